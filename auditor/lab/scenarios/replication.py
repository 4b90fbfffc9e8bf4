"""Replication faults (seed 003): a leader killed under a safe producer, and an unclean
election that truncates acknowledged records."""

from __future__ import annotations

import time

from confluent_kafka import Producer

from auditor.lab import truth
from auditor.lab.cluster import LabError, Record, wait_until
from auditor.lab.compare import Outcome, merge
from auditor.lab.registry import scenario
from auditor.lab.workload import produce
from auditor.lab.world import World
from auditor.probes import AuditedProducer

SAFE_PRODUCER = {
    "acks": "all",
    "enable.idempotence": True,
    "retries": 2147483647,
    "message.timeout.ms": 60000,
    "request.timeout.ms": 5000,
}


@scenario(
    "failover-idempotent",
    "leader killed -9 mid-stream, producer acks=all + idempotence + retries: nothing lost, nothing to report",
)
def failover_idempotent(world: World) -> Outcome:
    return _failover(world, probed=True)


@scenario(
    "failover-idempotent-plain",
    "as failover-idempotent with a plain confluent-kafka producer (no probes)",
)
def failover_idempotent_plain(world: World) -> Outcome:
    return _failover(world, probed=False)


def _failover(world: World, probed: bool) -> Outcome:
    cluster = world.cluster
    world.make_topic(replication=3, min_insync_replicas="2")
    world.make_table()
    world.make_binding()
    tickets = list(range(1, 61))
    world.insert(tickets)
    settings = {"bootstrap.servers": cluster.bootstrap, "linger.ms": 5, **SAFE_PRODUCER}
    producer: AuditedProducer | Producer = (
        AuditedProducer(settings, delivery_reports="all") if probed else Producer(settings)
    )
    reports = produce(cluster.bootstrap, world.topic, tickets[:30], producer=producer)
    leader = cluster.partition(world.topic).leader
    cluster.broker("kill", leader)
    injected_at = time.monotonic()
    reports += produce(cluster.bootstrap, world.topic, tickets[30:], producer=producer, flush_s=90)
    if isinstance(producer, AuditedProducer):
        producer.close(30)
    cluster.broker("start", leader)
    cluster.wait_for_isr(world.topic, 3)
    final = cluster.read_topic(world.topic)
    if truth.failed(reports):
        world.notes.append(f"{len(truth.failed(reports))} send(s) failed: {sorted(truth.failed(reports))[:5]}")
    expected = truth.producer_side(
        tickets, final, probed_acked=truth.acked(reports) if probed else (), duplicate_cause="producer-retry"
    )
    answer = world.reconcile()
    # A safe producer on RF=3, min.insync.replicas=2: the lint must find nothing to object to.
    lint = world.lint(producer=settings)
    return Outcome(
        injected=f"kill -9 of leader {leader} after 30 of 60 sends (acks=all, idempotence, retries)",
        expected=expected,
        got=merge(answer.verdicts, lint.verdicts),
        detect_s=(answer.finished_monotonic - injected_at) if expected else None,
    )


@scenario(
    "unclean-truncation",
    "RF=2, unclean.leader.election.enable=true, plain producer: B acked with acks=1 then truncated by an "
    "unclean election; C rewrites B's offsets",
)
def unclean_truncation(world: World) -> Outcome:
    return _unclean(world, probed=False)


@scenario("unclean-truncation-probed", "as unclean-truncation with AuditedProducer (producer ledger)")
def unclean_truncation_probed(world: World) -> Outcome:
    return _unclean(world, probed=True)


def _unclean(world: World, probed: bool) -> Outcome:
    cluster = world.cluster
    world.make_topic(replication=2, min_insync_replicas="1", unclean_leader_election_enable="true")
    world.make_table()
    world.make_binding()
    start = cluster.partition(world.topic)
    leader, follower = start.leader, next(r for r in start.replicas if r != start.leader)
    base = {"message.timeout.ms": 60000, "request.timeout.ms": 5000, "enable.idempotence": False}
    a, b, c = list(range(1, 21)), list(range(21, 41)), list(range(41, 61))

    world.insert(a)
    reports = produce(cluster.bootstrap, world.topic, a, {**base, "acks": "all"}, probed=probed)
    cluster.broker("kill", follower)
    world.insert(b)
    reports += produce(cluster.bootstrap, world.topic, b, {**base, "acks": "1"}, probed=probed)
    # B is readable once the high watermark passes it: after the controller has dropped the
    # dead follower from the ISR (broker.session.timeout.ms). Only then can a run read A and B.
    seen_before: list[Record] = []

    def b_readable() -> bool:
        seen_before[:] = cluster.read_topic(world.topic)
        return {str(t) for t in b} <= set(truth.copies(seen_before))

    wait_until(b_readable, 60, "B to be readable (the high watermark past it)")
    first = world.reconcile()  # reads A and B

    cluster.broker("kill", leader)
    injected_at = time.monotonic()
    cluster.broker("start", follower)
    how = "automatic unclean election (topic config)"
    try:
        cluster.wait_for_leader(world.topic, other_than=leader, timeout=30)
    except LabError:
        election = cluster.elect(world.topic, 0, unclean=True)
        how = f"unclean election through the admin API ({election})"
        cluster.wait_for_leader(world.topic, other_than=leader, timeout=30)
    world.insert(c)
    reports += produce(cluster.bootstrap, world.topic, c, {**base, "acks": "1"}, probed=probed, flush_s=90)
    cluster.broker("start", leader)
    cluster.wait_for_isr(world.topic, 2)
    final = cluster.read_topic(world.topic)
    lost = truth.acked(reports) - set(truth.copies(final))
    if not lost:
        raise LabError("the fault lost nothing: the follower was not behind when it became leader")
    world.notes.append(f"{how}; acked and truncated: {len(lost)} record(s); first run #{first.detail['run']}")
    expected = truth.producer_side(
        a + b + c, final, seen_before=seen_before, probed_acked=truth.acked(reports) if probed else ()
    )
    answer = world.reconcile()
    # The settings this scenario weakened on purpose, each of which lets an acked record go:
    # B's and C's producer (acks=1), the topic's unclean elections and its min.insync.replicas=1.
    expected |= {
        "lint producer": {"lint:acks"},
        "lint topic": {"lint:unclean.leader.election.enable", "lint:min.insync.replicas"},
    }
    lint = world.lint(producer={"bootstrap.servers": cluster.bootstrap, "linger.ms": 0, **base, "acks": "1"})
    return Outcome(
        injected=f"RF=2: follower {follower} killed, B written acks=1, leader {leader} killed -9, "
        f"out-of-sync {follower} elected, C written, {leader} back (truncates B)",
        expected=expected,
        got=merge(answer.verdicts, lint.verdicts),
        detect_s=answer.finished_monotonic - injected_at,
    )
