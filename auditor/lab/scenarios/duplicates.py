"""Duplicates (seed 001): ack timeouts without idempotence make the producer send again."""

from __future__ import annotations

import time

from confluent_kafka import Producer

from auditor.lab import truth
from auditor.lab.compare import Outcome
from auditor.lab.registry import scenario
from auditor.lab.workload import produce
from auditor.lab.world import World
from auditor.probes import AuditedProducer

# No idempotence: a request that times out is sent again and the broker cannot tell.
RETRYING_PRODUCER = {
    "acks": "all",
    "enable.idempotence": False,
    "request.timeout.ms": 1500,
    "message.timeout.ms": 60000,
    "retry.backoff.ms": 200,
    "linger.ms": 0,
}
PAUSE_S = 4.0


@scenario(
    "producer-retry",
    "acks=all without idempotence; a follower SIGSTOPped past request.timeout.ms holds the acks, the "
    "producer re-sends appended batches: duplicates by producer retry (AuditedProducer)",
)
def producer_retry(world: World) -> Outcome:
    return _retry(world, probed=True)


@scenario(
    "producer-retry-plain",
    "as producer-retry with a plain producer: the duplicates carry no session/sequence, cause unknown",
)
def producer_retry_plain(world: World) -> Outcome:
    return _retry(world, probed=False)


def _retry(world: World, probed: bool) -> Outcome:
    cluster = world.cluster
    world.make_topic(replication=3, min_insync_replicas="2")
    world.make_table()
    world.make_binding()
    tickets = list(range(1, 41))
    world.insert(tickets)
    settings = {"bootstrap.servers": cluster.bootstrap, **RETRYING_PRODUCER}
    producer: AuditedProducer | Producer = (
        AuditedProducer(settings, delivery_reports="all") if probed else Producer(settings)
    )
    reports = produce(cluster.bootstrap, world.topic, tickets[:20], producer=producer)
    layout = cluster.partition(world.topic)
    follower = next(r for r in layout.replicas if r != layout.leader)
    # The leader appends each batch and waits for the paused follower's fetch; past
    # request.timeout.ms the producer gives up on the request and sends the batch again.
    cluster.broker("pause", follower)
    injected_at = time.monotonic()
    try:
        produce(cluster.bootstrap, world.topic, tickets[20:], producer=producer, flush_s=0, reports=reports)
        producer.poll(PAUSE_S)
    finally:
        cluster.broker("resume", follower)
    producer.flush(60)
    if isinstance(producer, AuditedProducer):
        producer.close(30)
    final = cluster.read_topic(world.topic)
    expected = truth.producer_side(
        tickets,
        final,
        probed_acked=truth.acked(reports) if probed else (),
        duplicate_cause="producer-retry" if probed else "unknown",
    )
    if not any(v == {"duplicate/producer-retry"} or v == {"duplicate/unknown"} for v in expected.values()):
        world.notes.append("the pause produced no duplicate this time")
    answer = world.reconcile()
    return Outcome(
        injected=f"follower {follower} SIGSTOPped {PAUSE_S:.0f}s (request.timeout.ms=1500, no idempotence), then SIGCONT",
        expected=expected,
        got=answer.verdicts,
        detect_s=(answer.finished_monotonic - injected_at) if expected else None,
    )
