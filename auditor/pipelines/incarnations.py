"""Which topic ids the auditor saw a topic under: a topic deleted and created again.

See TopicIncarnation. Diagnoses and reconciliation runs call observe_topic_id with the id
they read; the answer says whether, and by when, the topic was re-created since the auditor
first saw it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction

from auditor.pipelines.models import Cluster, TopicIncarnation


@dataclass(frozen=True)
class Recreation:
    """The topic was deleted and created again after `old_last_seen` (under `old_id`) and
    before `new_first_seen` (under `new_id`): every record produced up to `new_first_seen`
    may have been in the deleted topic."""

    topic: str
    old_id: str
    new_id: str
    old_last_seen: datetime
    new_first_seen: datetime

    @property
    def until_ms(self) -> int:
        return int(self.new_first_seen.timestamp() * 1000)

    def describe(self) -> str:
        return (
            f"topic {self.topic} was deleted and created again between {self.old_last_seen.isoformat(timespec='seconds')} "
            f"(topic id {self.old_id}) and {self.new_first_seen.isoformat(timespec='seconds')} (topic id "
            f"{self.new_id}): its records from before went with it"
        )


def observe_topic_id(cluster: Cluster, topic: str, topic_id: str, now: datetime) -> Recreation | None:
    """Record that `topic` has id `topic_id` at `now`; the latest re-creation seen, if any.
    A cluster that is not stored (a binding built for one diagnosis, as the benchmarks do)
    has nowhere to keep it: None."""
    if cluster.pk is None:
        return None
    with transaction.atomic():
        seen, created = TopicIncarnation.objects.get_or_create(
            cluster=cluster, topic=topic, topic_id=topic_id, defaults={"first_seen": now, "last_seen": now}
        )
        if not created and seen.last_seen < now:
            seen.last_seen = now
            seen.save(update_fields=["last_seen"])
        older = (
            TopicIncarnation.objects.filter(cluster=cluster, topic=topic, first_seen__lte=seen.first_seen)
            .exclude(topic_id=topic_id)
            .order_by("-last_seen")
            .first()
        )
    if older is None:
        return None
    return Recreation(topic, older.topic_id, topic_id, older.last_seen, seen.first_seen)


def first_seen(cluster: Cluster, topic: str, topic_id: str) -> datetime | None:
    """When the auditor first saw `topic` under `topic_id` (None: never, or a cluster that is
    not stored). The topic existed under that id since then at the latest."""
    if cluster.pk is None:
        return None
    seen = TopicIncarnation.objects.filter(cluster=cluster, topic=topic, topic_id=topic_id).first()
    return None if seen is None else seen.first_seen
