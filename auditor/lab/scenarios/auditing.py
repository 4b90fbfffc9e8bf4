"""The auditor itself under a fault: a broker killed -9 or frozen just before it looks. Nothing was lost
(acks=all, RF=3, min.insync.replicas=2); every answer it gives must still be the truth, or
unknown, which counts as a miss here, never as a false alarm, and the reconciliation run must
finish (it failed under a frozen leader until lab run #24; a failed run is a miss). The frozen
variant runs the diagnosis as its own process (`manage.py audit stuck`, as a user would):
librdkafka 2.16.0's admin client aborted the process there (upstream
confluentinc/librdkafka#4605, avoided since by spark_jobs.group_offsets.coordinator_request); a
crash fails this scenario, not the lab.

coordinator-paused-after-commit freezes the group's coordinator instead, right after the
group's last commit: Kafka 4's coordinator elected in its place answers committed offsets from
its high watermark, which had not caught up, and answered the group's earlier commit as the
current one (CI, stop 30) until the auditor asked as a read_committed consumer does."""

from __future__ import annotations

import time

from confluent_kafka import KafkaException

from auditor.lab import truth
from auditor.lab.cluster import LabError
from auditor.lab.compare import Outcome, merge
from auditor.lab.registry import scenario
from auditor.lab.workload import produce
from auditor.lab.world import STUCK_AGE_S, AuditorAnswer, World

TICKETS = list(range(1, 61))
PARTITIONS = 3
# Where the fault keeps the auditor from reading (a frozen leader's partition before the
# controller fences it, a coordinator that cannot say what is committed) `unknown` is its
# honest answer, for an item or for the groups' risks: a miss of what was expected, never an
# alarm.
UNREADABLE = frozenset({"stuck:unknown", "risk:risks-unknown"})
# The reconciliation run's own outcome, scored as one more answer
RUN, RUN_FINISHED = "reconciliation", "run:finished"


@scenario(
    "broker-killed-while-auditing",
    "3 partitions, RF=3, acks=all; half the tickets processed; the leader of partition 0 killed -9 right "
    "before a stuck diagnosis and a reconciliation run: the rest waiting, nothing missing",
)
def broker_killed_while_auditing(world: World) -> Outcome:
    return _while_auditing(world, ("kill", "start"))


@scenario(
    "broker-paused-while-auditing",
    "as broker-killed-while-auditing, but the leader is frozen (SIGSTOP) while the auditor looks: its "
    "connections hang instead of failing",
)
def broker_paused_while_auditing(world: World) -> Outcome:
    return _while_auditing(world, ("pause", "resume"))


def _while_auditing(world: World, fault: tuple[str, str]) -> Outcome:
    cluster = world.cluster
    inject, heal = fault
    world.make_topic(partitions=PARTITIONS, replication=3, min_insync_replicas="2")
    world.make_table()
    world.make_binding(groups=[world.group])
    world.make_rule(older_than_s=1)
    world.insert(TICKETS, age_s=STUCK_AGE_S)
    reports = produce(cluster.bootstrap, world.topic, TICKETS, {"acks": "all", "enable.idempotence": True})
    truth.all_sent(reports)
    world.consume("at-least-once", records=len(TICKETS) // 2)  # processes and commits half, then stops

    # Ground truth before the fault, from the table, the application's log and the group's
    # committed offsets: an unprocessed ticket whose record lies at or past its partition's
    # committed offset waits for the group (its consumer is stopped).
    rows, processed = world.rows(), world.processed()
    committed = cluster.committed(world.group, world.topic, partitions=PARTITIONS)
    waiting = {
        d.key
        for d in reports
        if rows[int(d.key)] == "NEW" and not processed.get(int(d.key)) and d.offset >= committed.get(d.partition, 0)
    }
    if not waiting:
        raise LabError("the consumer processed every ticket: nothing is left to wait")
    expected: dict[str, set[str]] = {key: {"stuck:waiting"} for key in waiting}
    expected |= world.expected_group_risks()
    # Every partition keeps a leader through the fault (RF=3): the run asks again through the
    # failover and must finish. A failed run publishes nothing, so it is no false alarm, but it
    # is an answer the auditor did not give: a miss.
    expected[RUN] = {RUN_FINISHED}

    # The group's offsets stay readable through the fault only if their partition keeps
    # min.insync.replicas (2) in sync without the victim: with one follower out of sync, its
    # coordinator cannot commit a write (KIP-966), and a stable fetch is one. The lab waits
    # for all three, as it does for the topic, and notes where the coordinator was.
    offsets_partition = cluster.offsets_partition(world.group)
    waited = time.monotonic()
    cluster.wait_for_isr("__consumer_offsets", 3, partition=offsets_partition)
    before = cluster.partition("__consumer_offsets", offsets_partition)
    world.notes.append(
        f"the group's offsets partition __consumer_offsets-{offsets_partition} before the fault: leader"
        f" {before.leader}, in sync {list(before.isr)} (waited {time.monotonic() - waited:.1f} s for 3)"
    )
    victim = cluster.partition(world.topic, 0).leader
    cluster.broker(inject, victim)
    try:
        diagnosis = world.stuck(own_process=inject == "pause", judged=False)
        try:
            run = world.reconcile()
            finished = {RUN: {RUN_FINISHED}}
        except LabError as exc:
            world.notes.append(f"the reconciliation run failed under the fault: {exc}")
            run, finished = AuditorAnswer({}, time.monotonic()), {}
    finally:
        try:
            during = cluster.partition("__consumer_offsets", offsets_partition)
            placed = f"leader {during.leader}, in sync {list(during.isr)}"
        except (KafkaException, LabError) as exc:  # a note only: the broker must come back whatever happens
            placed = f"not read ({exc})"
        cluster.broker(heal, victim)
    world.notes.append(
        f"__consumer_offsets-{offsets_partition} after the diagnosis and the run, before the broker came back: {placed}"
    )
    cluster.wait_for_isr(world.topic, 3)
    how = "killed -9" if inject == "kill" else "frozen (SIGSTOP)"
    world.notes.append(f"broker {victim} (leader of partition 0) {how}; {len(waiting)} ticket(s) waiting")
    world.notes += [f"{key}: {reason}" for key, reason in sorted(diagnosis.reasons.items())][:2]
    return Outcome(
        injected=f"broker {victim}, leader of partition 0, {how} right before the diagnosis and the run",
        expected=expected,
        got=merge(diagnosis.verdicts, run.verdicts, finished),
        detect_s=None,
        ignored=UNREADABLE,
    )


CRASH_AT = 11  # the at-most-once consumer commits the 11th record, then is killed -9


@scenario(
    "coordinator-paused-after-commit",
    "at-most-once consumer killed -9 after committing record 11, before processing it; the group's "
    "coordinator (its offsets partition on 2 replicas) frozen right after that commit while the auditor "
    "looks, then resumed: never the group's earlier commit taken for its position; exact once healed",
)
def coordinator_paused_after_commit(world: World) -> Outcome:
    cluster = world.cluster
    world.make_topic(replication=3, min_insync_replicas="2")
    world.make_table()
    world.make_binding(groups=[world.group])
    world.make_rule(older_than_s=1)
    world.insert(TICKETS[:30], age_s=STUCK_AGE_S)
    reports = produce(cluster.bootstrap, world.topic, TICKETS[:30], {"acks": "all"}, probed=True)
    truth.all_sent(reports)
    # Two replicas: once the frozen coordinator is fenced, its follower leads alone, below
    # min.insync.replicas (2); its high watermark cannot advance (KIP-966) until the
    # coordinator is back, so what it had not learned was committed stays above it.
    offsets_partition = cluster.offsets_partition(world.group)
    placed = cluster.partition("__consumer_offsets", offsets_partition)
    coordinator = placed.leader
    kept = [coordinator, next(r for r in placed.replicas if r != coordinator)]
    cluster.reassign("__consumer_offsets", offsets_partition, kept)
    try:
        crashed = world.consume("at-most-once", crash_at=CRASH_AT, probed=True)
        cluster.broker("pause", coordinator)  # within the follower's fetch wait (500 ms) of the commit
        try:
            during = world.stuck(own_process=True, judged=False)
        finally:
            cluster.broker("resume", coordinator)
        cluster.wait_for_isr("__consumer_offsets", 2, offsets_partition)
        cluster.wait_for_isr(world.topic, 3)
        healed = world.stuck()
    finally:
        cluster.reassign(
            "__consumer_offsets", offsets_partition, sorted(cluster.expected_brokers or cluster.broker_ids())
        )

    # Ground truth once healed, from the table, the application's log, a full read of the
    # topic and the group's committed offsets (the lab's own read_committed consumer).
    rows, processed = world.rows(), world.processed()
    committed = cluster.committed(world.group, world.topic).get(0, -1)
    position = {r.key: r.offset for r in cluster.read_topic(world.topic)}
    unprocessed = {str(i) for i, status in rows.items() if status == "NEW" and not processed.get(i)}
    skipped = {key for key in unprocessed if position.get(key, 1 << 62) < committed}
    if not skipped:
        raise LabError(f"the fault did not happen: nothing was skipped (consumer exit {crashed})")
    expected: dict[str, set[str]] = {key: {"stuck:skipped"} for key in skipped}
    expected |= {key: {"stuck:waiting"} for key in unprocessed - skipped}
    expected |= world.expected_group_risks()
    world.notes.append(
        f"consumer exit {crashed}; committed {committed}; skipped {sorted(skipped)}; coordinator {coordinator} "
        f"frozen, __consumer_offsets/{offsets_partition} on {kept}"
    )
    world.notes += [f"while frozen, {key}: {reason}" for key, reason in sorted(during.reasons.items())][:2]
    return Outcome(
        injected=f"group coordinator {coordinator} frozen (SIGSTOP) right after the group committed record {CRASH_AT}",
        expected=expected,
        # both answers count: the one while frozen may only be unknown, the one after must be exact
        got=merge(during.verdicts, healed.verdicts),
        detect_s=None,
        ignored=UNREADABLE,
    )
