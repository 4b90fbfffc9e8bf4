"""Replication faults (seed 003): a leader killed under a safe producer, and an unclean
election that truncates acknowledged records."""

from __future__ import annotations

import time

from confluent_kafka import Producer

from auditor.lab import truth
from auditor.lab.cluster import LabError, Record, wait_until
from auditor.lab.compare import Outcome, merge
from auditor.lab.registry import scenario
from auditor.lab.workload import Delivery, produce
from auditor.lab.world import STUCK_AGE_S, World
from auditor.probes import AuditedProducer
from spark_jobs.watermark_hold import CLOCK_MARGIN_MS, DEFAULT_REPLICA_LAG_MAX_MS, hold_ms

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


def _old_leader_back(world: World, leader: int, reports: list[Delivery], why_not: str) -> tuple[list[Record], set[str]]:
    """The killed leader started again (it truncates what the new leader does not have), then
    the truth: a plain read of the topic, and the acked keys it no longer holds (the fault
    must have lost some, else LabError saying `why_not`)."""
    world.cluster.broker("start", leader)
    world.cluster.wait_for_isr(world.topic, 2)
    final = world.cluster.read_topic(world.topic)
    lost = truth.acked(reports) - set(truth.copies(final))
    if not lost:
        raise LabError(f"the fault lost nothing: {why_not}")
    return final, lost


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


@scenario(
    "unclean-truncation-secured",
    "as unclean-truncation, with the auditor reading the cluster through its SASL_SSL listener "
    "(SCRAM-SHA-512 over TLS, secrets as ${ENV} references)",
)
def unclean_truncation_secured(world: World) -> Outcome:
    return _unclean(world, probed=False, secured=True)


def _wait_out_held_acks(world: World, probed: bool) -> None:
    """A probed producer's acks=1 acks beyond the log end are judged only once no follower
    still in sync can hold the high watermark below them (the stack's brokers keep Kafka's
    replica.lag.time.max.ms): until then the auditor rightly says unknown, and a run leaves
    them to a later run."""
    if probed:
        wait_s = (hold_ms(DEFAULT_REPLICA_LAG_MAX_MS) + CLOCK_MARGIN_MS) / 1000 + 1.0
        world.notes.append(f"waited {wait_s:.0f} s for the acks=1 acks to be judged")
        time.sleep(wait_s)


def _unclean(world: World, probed: bool, secured: bool = False) -> Outcome:
    cluster = world.cluster
    world.make_topic(replication=2, min_insync_replicas="1", unclean_leader_election_enable="true")
    world.make_table()
    world.make_binding(secured=secured)
    # B's rows are old enough to be stuck (no consumer reads this topic), A's and C's are not:
    # the stuck verdicts score what the auditor remembers of B after the truncation.
    world.make_rule(older_than_s=STUCK_AGE_S * 30)
    start = cluster.partition(world.topic)
    leader, follower = start.leader, next(r for r in start.replicas if r != start.leader)
    base = {"message.timeout.ms": 60000, "request.timeout.ms": 5000, "enable.idempotence": False}
    a, b, c = list(range(1, 21)), list(range(21, 41)), list(range(41, 61))

    world.insert(a)
    reports = produce(cluster.bootstrap, world.topic, a, {**base, "acks": "all"}, probed=probed)
    cluster.broker("kill", follower)
    world.insert(b, age_s=STUCK_AGE_S * 60)
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
    final, lost = _old_leader_back(world, leader, reports, "the follower was not behind when it became leader")
    world.notes.append(f"{how}; acked and truncated: {len(lost)} record(s); first run #{first.detail['run']}")
    expected = truth.producer_side(
        a + b + c, final, seen_before=seen_before, probed_acked=truth.acked(reports) if probed else ()
    )
    # B's stuck rows, diagnosed before any run has seen the truncation (the first run's memory
    # against the live log: their offsets now hold C's records) and again after the second run.
    # The truth: acked by the broker and read back before the fault (plain read), absent now.
    stuck_rows = {str(i) for i, status in world.rows().items() if status == "NEW" and i in b}
    # A B record the fault left in place would be in the topic with no group named: unknown.
    expected = merge(expected, {key: {"stuck:broker-lost"} if key in lost else {"stuck:unknown"} for key in stuck_rows})
    _wait_out_held_acks(world, probed)
    from_memory = world.stuck()
    answer = world.reconcile()
    after_run = world.stuck()
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
        got=merge(answer.verdicts, from_memory.verdicts, after_run.verdicts, lint.verdicts),
        detect_s=from_memory.finished_monotonic - injected_at,
    )


@scenario(
    "acks1-clean-failover",
    "RF=2, clean elections only, plain producer with acks=1: the follower frozen (still in sync) while B is "
    "acked by the leader alone, the leader killed -9, the follower elected cleanly without B",
)
def acks1_clean_failover(world: World) -> Outcome:
    return _acks1_failover(world, probed=False)


@scenario(
    "acks1-clean-failover-probed",
    "as acks1-clean-failover with AuditedProducer: the ledger holds B's acks, so its rows are broker-lost",
)
def acks1_clean_failover_probed(world: World) -> Outcome:
    return _acks1_failover(world, probed=True)


def _acks1_failover(world: World, probed: bool) -> Outcome:
    """The loss acks=1 allows with unclean elections off (seed 003's "leader fails over with
    acks=1"). The follower is SIGSTOPped, so it stays in the ISR (replica.lag.time.max.ms and the
    controller's session timeout have not run out) but fetches nothing: the leader alone holds B
    and acks it, and the high watermark stays before B, so no reader ever sees B. The leader is
    killed -9 and the follower resumed: the controller fences the dead leader and elects the
    follower, an in-sync replica, cleanly; it has no B, and the old leader truncates B when it
    comes back. Nothing in the log says B existed: without a ledger the auditor must not call
    B's rows never-produced (the producer had its acks); with one, they are broker-lost.

    The freeze must stay short (seconds): AuditedProducer.flush(5) once waited 30 s for its
    ledger, whose acks=all writes the frozen broker held up, and the follower, frozen that
    long, left the ISR, so the partition went offline instead of failing over."""
    cluster = world.cluster
    world.make_topic(replication=2, min_insync_replicas="1")
    world.make_table()
    world.make_binding(groups=[world.group])
    world.make_rule(older_than_s=1)
    start = cluster.partition(world.topic)
    leader, follower = start.leader, next(r for r in start.replicas if r != start.leader)
    base = {"message.timeout.ms": 60000, "request.timeout.ms": 5000, "enable.idempotence": False, "acks": "1"}
    a, b, c = list(range(1, 21)), list(range(21, 41)), list(range(41, 61))
    world.insert(a + b + c, age_s=STUCK_AGE_S)

    settings = {"bootstrap.servers": cluster.bootstrap, "linger.ms": 0, **base}
    producer: AuditedProducer | Producer = (
        AuditedProducer(settings, delivery_reports="all") if probed else Producer(settings)
    )
    reports = produce(cluster.bootstrap, world.topic, a, producer=producer)
    # A is on both replicas: the high watermark passes a record once every in-sync replica has it
    wait_until(lambda: cluster.watermarks(world.topic)[0][1] >= len(a), 30, "the follower to have A")
    world.notes.append(f"before the fault: {cluster.partition(world.topic)}")
    cluster.broker("pause", follower)
    try:
        # The follower's last fetch request may still wait at the leader (replica.fetch.wait.max.ms,
        # 500 ms): a record appended meanwhile would be sent to the frozen follower's socket and
        # be read when it thaws. Once that request has expired, the frozen follower asks for nothing.
        time.sleep(1.0)
        produce(cluster.bootstrap, world.topic, b, producer=producer, flush_s=2, reports=reports)
        b_acked = len(truth.acked(reports)) - len(a)  # no metadata call here: the frozen broker may be asked
        cluster.broker("kill", leader)
        injected_at = time.monotonic()
    finally:
        cluster.broker("resume", follower)
    world.notes.append(f"B acked while the follower was frozen: {b_acked} of {len(b)}")
    cluster.wait_for_leader(world.topic, other_than=leader, timeout=60)
    world.notes.append(
        f"{time.monotonic() - injected_at:.1f}s after the kill: {cluster.partition(world.topic)}, "
        f"offsets {cluster.watermarks(world.topic)}"
    )
    produce(cluster.bootstrap, world.topic, c, producer=producer, flush_s=90, reports=reports)
    if isinstance(producer, AuditedProducer):
        producer.close(60)
    final, lost = _old_leader_back(world, leader, reports, "the follower had B when it became leader")
    world.notes.append(f"acked and truncated by a clean election: {len(lost)} record(s)")
    world.consume("at-least-once", probed=probed, records=len(truth.copies(final)), idle_s=15)
    rows = world.rows()
    stuck_keys = {str(k) for k, status in rows.items() if status == "NEW"}
    if stuck_keys != lost:
        raise LabError(f"rows still NEW {sorted(stuck_keys, key=int)} are not the lost records")
    expected = truth.producer_side(a + b + c, final, probed_acked=truth.acked(reports) if probed else ())
    # Stuck items: a probed producer's ledger holds B's acks (broker-lost); without it nothing the
    # auditor can read says whether B was ever produced: unknown, never never-produced.
    for key in lost:
        expected[key].add("stuck:broker-lost" if probed else "stuck:unknown")
    expected |= world.expected_group_risks()
    # The settings this scenario weakened on purpose: acks=1, and min.insync.replicas=1.
    expected |= {"lint producer": {"lint:acks"}, "lint topic": {"lint:min.insync.replicas"}}
    _wait_out_held_acks(world, probed)
    answer = world.reconcile()
    stuck = world.stuck()
    world.notes += [f"{key}: {reason}" for key, reason in sorted(stuck.reasons.items())][:3]
    lint = world.lint(producer=settings)
    return Outcome(
        injected=f"RF=2: follower {follower} SIGSTOPped, B written acks=1, leader {leader} killed -9, "
        f"follower resumed and elected cleanly, C written, {leader} back (truncates B)",
        expected=expected,
        got=merge(answer.verdicts, stuck.verdicts, lint.verdicts),
        detect_s=stuck.finished_monotonic - injected_at,
    )
