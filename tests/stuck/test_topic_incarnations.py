"""The topic ids the auditor records (auditor.pipelines.incarnations) and what a diagnosis
makes of a re-creation, on inline evidence (no broker: the ids and times are given)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from auditor.pipelines.incarnations import observe_topic_id
from auditor.pipelines.models import Cluster, TopicIncarnation
from auditor.stuck.evidence import ClusterView, PartitionState

T0 = datetime(2026, 11, 28, 3, 0, tzinfo=UTC)


@pytest.mark.django_db
def test_a_topic_seen_under_two_ids_was_recreated_between_the_sightings() -> None:
    cluster = Cluster.objects.create(name="c", bootstrap_servers="k:9092")
    other = Cluster.objects.create(name="other", bootstrap_servers="k2:9092")
    assert observe_topic_id(cluster, "tickets", "A", T0) is None
    assert observe_topic_id(cluster, "tickets", "A", T0 + timedelta(minutes=5)) is None
    assert observe_topic_id(other, "tickets", "Z", T0 + timedelta(minutes=6)) is None  # another cluster's topic
    assert observe_topic_id(cluster, "orders", "B", T0 + timedelta(minutes=6)) is None  # another topic

    seen = observe_topic_id(cluster, "tickets", "B", T0 + timedelta(minutes=10))
    assert seen is not None
    assert (seen.old_id, seen.new_id, seen.old_last_seen, seen.new_first_seen) == (
        "A",
        "B",
        T0 + timedelta(minutes=5),
        T0 + timedelta(minutes=10),
    )
    # Later sightings of the new id keep the bound where the new id was first seen.
    again = observe_topic_id(cluster, "tickets", "B", T0 + timedelta(hours=1))
    assert again is not None and again.new_first_seen == T0 + timedelta(minutes=10)
    assert "deleted and created again" in again.describe()
    assert TopicIncarnation.objects.filter(cluster=cluster, topic="tickets").count() == 2
    # a cluster that is not stored keeps nothing, and sees no re-creation
    assert observe_topic_id(Cluster(name="unsaved", bootstrap_servers="k:9092"), "tickets", "C", T0) is None
    assert TopicIncarnation.objects.count() == 4


def test_a_recreation_bounds_how_far_back_the_topic_is_complete() -> None:
    until = int((T0 + timedelta(minutes=10)).timestamp() * 1000)
    view = ClusterView(topic="tickets", now_ms=until + 600_000)
    view.partitions = {0: PartitionState(0, 0, 5, 5), 1: PartitionState(1, 3, 9, 9, low_timestamp_ms=until + 60_000)}
    assert view.topic_complete_since_ms() == until + 60_000
    assert view.partition_complete_since_ms(view.partitions[0]) == 0
    view.recreated_until_ms = until
    assert view.partition_complete_since_ms(view.partitions[0]) == until  # no longer "since ever"
    assert view.partition_complete_since_ms(view.partitions[1]) == until + 60_000
    view.partitions = {0: PartitionState(0, 0, 5, 5)}
    assert view.topic_complete_since_ms() == until
