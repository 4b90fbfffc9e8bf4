"""What the probed producers of a cluster reported about themselves (the clients topic), as
the stuck diagnosis and reconciliation both need it: how long a send's outcome can stay open
(spark_jobs.send_outcome); and, for the stuck diagnosis, how long its probed consumers may
process what they polled (their max.poll.interval.ms)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException
from django.db.models import Q

from auditor.lint.observed import read_reported_clients
from auditor.pipelines.models import Cluster
from auditor.probes.topics import CLIENTS_TOPIC
from spark_jobs.mark_rules import env_seconds
from spark_jobs.processing_bound import DEFAULT_MAX_POLL_INTERVAL_MS
from spark_jobs.send_outcome import SEND_OUTCOME_MS, UNBOUNDED, describe, judging, send_outcome_ms

# Caps how long a probed consumer session is taken to be still processing what one of its
# commits passed (spark_jobs.processing_bound: its max.poll.interval.ms); 0: not at all. Read
# by the stuck diagnosis and reconciliation alike; the name before stop 86 is still read.
PROCESSING_BOUND_ENV = "AUDITOR_PROCESSING_BOUND_SECONDS"
PROCESSING_BOUND_ENV_BEFORE = "AUDITOR_STUCK_PROCESSING_BOUND_SECONDS"


def processing_cap_ms() -> int | None:
    """$AUDITOR_PROCESSING_BOUND_SECONDS (or the name it had before) in ms, None when not set
    (a value that is not 0 or more seconds raises, naming it)."""
    for name in (PROCESSING_BOUND_ENV, PROCESSING_BOUND_ENV_BEFORE):
        if os.environ.get(name) is not None:
            return int(env_seconds(name, 0.0) * 1000)
    return None


def processing_bounds(poll_intervals_ms: Mapping[str, int]) -> tuple[int, dict[str, int]]:
    """(the processing bound of a session the clients topic does not show, each shown session's)
    in ms, as a reconciliation job takes them (spark_jobs.binding: processing_bound_ms,
    session_bounds_ms): librdkafka's max.poll.interval.ms and each session's own, capped."""
    cap = processing_cap_ms()

    def capped(ms: int) -> int:
        return ms if cap is None else min(ms, cap)

    return capped(DEFAULT_MAX_POLL_INTERVAL_MS), {s: capped(ms) for s, ms in poll_intervals_ms.items()}


@dataclass(frozen=True)
class ObservedProducers:
    """What the clients topic says of the cluster's probed producers."""

    outcome: tuple[int, str | None]  # observed_send_outcome's answer
    # the producer sessions it shows with a transactional.id (those it does not show may be too)
    transactional_sessions: frozenset[str] = frozenset()
    # the producer sessions it shows acking with acks=all (those it does not show may not)
    acks_all_sessions: frozenset[str] = frozenset()
    # why the clients topic was not read whole (the read failed, or stopped short of its end),
    # None when it was: a producer session it does not show may then be transactional
    unread: str | None = None
    # the consumer sessions it shows, with their max.poll.interval.ms (observed.max_poll_interval_ms)
    poll_intervals_ms: Mapping[str, int] = field(default_factory=dict)


def observed_send_outcome(
    kafka_config: Mapping[str, Any], clients_topic: str = CLIENTS_TOPIC, timeout_s: float = 5.0
) -> tuple[int, str | None]:
    """(the send outcome bound in ms, 0: without limit; a note for the run when it is not
    librdkafka's defaults' or could not be read)."""
    return observed_producers(kafka_config, clients_topic, timeout_s).outcome


def observed_producers(
    kafka_config: Mapping[str, Any], clients_topic: str = CLIENTS_TOPIC, timeout_s: float = 5.0
) -> ObservedProducers:
    """The send outcome bound (observed_send_outcome) and the transactional producer sessions,
    from one read of the clients topic."""
    try:
        reported = read_reported_clients(kafka_config, clients_topic, timeout=timeout_s)
    except KafkaException as exc:
        return ObservedProducers(
            (
                SEND_OUTCOME_MS,
                f"the producers' message timeouts could not be read from {clients_topic} ({exc}): "
                f"{describe(SEND_OUTCOME_MS)} assumed",
            ),
            unread=f"the clients topic {clients_topic} could not be read ({exc})",
        )
    bound = send_outcome_ms(c.config for c in reported.clients if c.kind == "producer")
    notes = [judged] if (judged := judging(bound)) else []
    unread = None
    if not reported.complete:
        notes.append(
            f"{clients_topic} was not read to its end within {timeout_s:g} s: a producer that retries longer may be unseen"
        )
        unread = f"the clients topic {clients_topic} was not read to its end within {timeout_s:g} s"
    return ObservedProducers(
        (bound, "; ".join(notes) or None),
        reported.transactional_sessions,
        reported.acks_all_sessions,
        unread,
        reported.poll_intervals_ms,
    )


def widest(kept: int | None, seen: int) -> int:
    """The wider of two send outcome bounds (UNBOUNDED is the widest; None: nothing kept)."""
    if kept is None:
        return seen
    if UNBOUNDED in (kept, seen):
        return UNBOUNDED
    return max(kept, seen)


def cluster_send_outcome(
    cluster: Cluster,
    *,
    read: bool = True,
    clients_topic: str = CLIENTS_TOPIC,
    timeout_s: float = 5.0,
    observed: tuple[int, str | None] | None = None,
) -> tuple[int, str | None]:
    """The send outcome bound for the cluster: the widest its probed producers report now
    (observed_send_outcome, or `observed` when the caller read it already; read: False, the
    cluster is known to be unreachable: none read) or reported to an earlier run
    (Cluster.send_outcome_ms, which this widens)."""
    if observed is not None:
        seen, note = observed
    elif read:
        seen, note = observed_send_outcome(cluster.client_config(), clients_topic, timeout_s)
    else:
        seen, note = SEND_OUTCOME_MS, None
    # Widened in one statement: a run that saw less never narrows what another one stored.
    stored = Cluster.objects.filter(pk=cluster.pk)
    if seen == UNBOUNDED:
        stored.exclude(send_outcome_ms=UNBOUNDED).update(send_outcome_ms=UNBOUNDED)
    else:
        stored.filter(
            Q(send_outcome_ms__isnull=True) | Q(send_outcome_ms__gt=UNBOUNDED, send_outcome_ms__lt=seen)
        ).update(send_outcome_ms=seen)
    kept = stored.values_list("send_outcome_ms", flat=True).first() if cluster.pk is not None else None
    cluster.send_outcome_ms = widest(kept if kept is not None else cluster.send_outcome_ms, seen)
    bound = cluster.send_outcome_ms
    if bound != seen:
        note = f"{judging(bound)} (as an earlier run saw it; the clients topic no longer shows it)" + (
            f"; {note}" if note else ""
        )
    return bound, note
