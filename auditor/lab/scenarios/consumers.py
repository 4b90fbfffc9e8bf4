"""Consumer crashes (seed 004): where the offset is committed decides what a crash costs."""

from __future__ import annotations

import signal
import time

from auditor.lab import truth
from auditor.lab.cluster import LabError, Record, wait_until
from auditor.lab.compare import Outcome, merge
from auditor.lab.registry import scenario
from auditor.lab.workload import consumer_config, produce
from auditor.lab.world import STUCK_AGE_S, World

TICKETS = list(range(1, 31))
CRASH_AT = 11  # the 11th record received
AUTO_CRASH_AT = 4


def ticket_pipeline(world: World, probed: bool) -> None:
    """A 3-replica topic with TICKETS produced (acks=all), their rows NEW and stuck-aged, a
    binding naming the world's group and a stuck rule."""
    world.make_topic(replication=3, min_insync_replicas="2")
    world.make_table()
    world.make_binding(groups=[world.group])
    world.make_rule(older_than_s=1)
    world.insert(TICKETS, age_s=STUCK_AGE_S)
    reports = produce(world.cluster.bootstrap, world.topic, TICKETS, {"acks": "all"}, probed=probed)
    if any(d.error for d in reports):
        raise RuntimeError(f"the workload's sends failed: {[d.error for d in reports if d.error][:3]}")


def skipped_truth(
    world: World, partitions: int = 1, records: list[Record] | None = None
) -> tuple[set[str], dict[int, int]]:
    """Ground truth: tickets whose row is still NEW and that nobody processed although the
    group committed past their record (the database, the group's committed offsets, a plain
    read of the topic: `records` where the caller read it already), and those offsets."""
    rows, processed = world.rows(), world.processed()
    committed = world.cluster.committed(world.group, world.topic, partitions=partitions)
    where = {r.key: (r.partition, r.offset) for r in (records or world.cluster.read_topic(world.topic))}
    skipped = set()
    for ticket, status in rows.items():
        partition, offset = where.get(str(ticket), (-1, 1 << 62))
        if status == "NEW" and not processed.get(ticket) and offset < committed.get(partition, -1):
            skipped.add(str(ticket))
    return skipped, committed


@scenario(
    "crash-at-most-once",
    "consumer commits a record's offset, then is killed -9 before processing it; restarted, it goes on "
    "after it: skipped (AuditedConsumer)",
)
def crash_at_most_once(world: World) -> Outcome:
    return _at_most_once(world, probed=True)


@scenario(
    "crash-at-most-once-plain",
    "as crash-at-most-once with plain clients: no processed ledger, so the truthful verdict is unknown",
)
def crash_at_most_once_plain(world: World) -> Outcome:
    return _at_most_once(world, probed=False)


@scenario(
    "crash-at-most-once-kafka-python",
    "as crash-at-most-once with a kafka-python consumer (a client the probes do not wrap): unknown",
)
def crash_at_most_once_kafka_python(world: World) -> Outcome:
    return _at_most_once(world, probed=False, client="kafka-python")


@scenario(
    "crash-at-most-once-kip848",
    "as crash-at-most-once with group.protocol=consumer (KIP-848), whose group the classic "
    "DescribeGroups reports as empty or dead: still skipped, never taken for an expiring group",
)
def crash_at_most_once_kip848(world: World) -> Outcome:
    return _at_most_once(world, probed=True, group_protocol="consumer")


def _at_most_once(world: World, probed: bool, **client: str) -> Outcome:
    ticket_pipeline(world, probed)
    crashed = world.consume("at-most-once", crash_at=CRASH_AT, probed=probed, **client)
    injected_at = time.monotonic()
    # The application comes back and stays up; its group has a member while the auditor looks
    # (a KIP-848 group must not be taken for an empty one whose offsets will expire). The new
    # member may wait for the dead one's session to end (KIP-848: 45 s on the broker).
    world.start_consumer("at-most-once", probed=probed, **client)
    wait_until(lambda: len(world.processed()) >= len(TICKETS) - 1, 120, "the restarted consumer to catch up")
    skipped, committed = skipped_truth(world)
    if not skipped:
        raise LabError(f"the fault did not happen: every record was processed (consumer exit {crashed})")
    world.notes.append(f"consumer exit {crashed}; committed {committed}; never processed: {sorted(skipped)}")
    verdict = "stuck:skipped" if probed else "stuck:unknown"
    expected = {key: {verdict} for key in skipped}
    expected |= world.expected_group_risks()
    answer = world.stuck()
    world.notes += [f"{key}: {reason}" for key, reason in sorted(answer.reasons.items())][:5]
    protocol = f", group.protocol={client['group_protocol']}" if "group_protocol" in client else ""
    library = f", {client['client']}" if "client" in client else ""
    return Outcome(
        injected=f"consumer killed -9 after committing record {CRASH_AT}, before processing it{protocol}{library}",
        expected=expected,
        got=answer.verdicts,
        detect_s=answer.finished_monotonic - injected_at,
    )


@scenario(
    "crash-at-most-once-after-processing",
    "an at-most-once consumer commits a record, processes and marks it, and is killed -9 before the probe "
    "flushed the mark; restarted, it goes on after it: every record was processed, nothing to report (the "
    "mark died with the process, the commit made before the processing stands)",
)
def crash_at_most_once_after_processing(world: World) -> Outcome:
    ticket_pipeline(world, probed=True)
    crashed = world.consume("at-most-once", crash_at=CRASH_AT, probed=True, crash_after="processing")
    injected_at = time.monotonic()
    world.start_consumer("at-most-once", probed=True)
    wait_until(lambda: len(world.processed()) >= len(TICKETS), 120, "the restarted consumer to catch up")
    # Ground truth: the application's log (every ticket processed, once), the table and the
    # group's committed offset.
    rows, processed = world.rows(), world.processed()
    committed = world.cluster.committed(world.group, world.topic)
    if any(n != 1 for n in processed.values()) or any(status != "DONE" for status in rows.values()):
        raise LabError(f"not every ticket was processed once: {sorted(processed.items())[:5]}")
    world.notes.append(f"consumer exit {crashed}; committed {committed}; every ticket processed once")
    expected = world.expected_group_risks()
    found = world.reconcile()
    stuck = world.stuck()
    return Outcome(
        injected=f"at-most-once consumer killed -9 right after processing and marking record {CRASH_AT}",
        expected=expected,
        got=merge(found.verdicts, stuck.verdicts),
        detect_s=max(found.finished_monotonic, stuck.finished_monotonic) - injected_at,
    )


@scenario(
    "crash-at-least-once",
    "consumer processes a record, is killed -9 before committing; restarted, it processes it again: "
    "reprocessed (AuditedConsumer)",
)
def crash_at_least_once(world: World) -> Outcome:
    return _at_least_once(world, probed=True)


@scenario(
    "crash-at-least-once-plain",
    "as crash-at-least-once with plain clients: without a processed ledger nothing can be said",
)
def crash_at_least_once_plain(world: World) -> Outcome:
    return _at_least_once(world, probed=False)


def _at_least_once(world: World, probed: bool) -> Outcome:
    ticket_pipeline(world, probed)
    crashed = world.consume("at-least-once", crash_at=CRASH_AT, probed=probed)
    injected_at = time.monotonic()
    # The restarted member may wait for the dead one's session to end before it is assigned.
    world.consume("at-least-once", probed=probed, records=len(TICKETS) - CRASH_AT + 1, idle_s=90)
    processed = world.processed()
    again = {str(i) for i, n in processed.items() if n > 1}
    if not again:
        raise LabError(f"the fault did not happen: nothing was processed twice (consumer exit {crashed})")
    world.notes.append(f"consumer exit {crashed}; processed more than once: {sorted(again)}")
    expected = {key: {"reprocessed"} for key in again} if probed else {}
    answer = world.reconcile()
    return Outcome(
        injected=f"consumer killed -9 after processing record {CRASH_AT}, before committing it",
        expected=expected,
        got=answer.verdicts,
        detect_s=(answer.finished_monotonic - injected_at) if expected else None,
    )


@scenario(
    "crash-after-async-commit",
    "an at-least-once consumer processes each record, marks it and commits it asynchronously; killed -9 "
    "20 ms after record 11's commit, its last commits and marks in flight: every record was processed, so "
    "nothing is unprocessed or skipped. What the restart processed again is reprocessed where the first "
    "marks reached the ledger before the kill, which no client can tell (allowed there, not required) "
    "(AuditedConsumer)",
)
def crash_after_async_commit(world: World) -> Outcome:
    ticket_pipeline(world, probed=True)
    crashed = world.consume("at-least-once", crash_at=CRASH_AT, probed=True, commit="async")
    committed_then = world.cluster.committed(world.group, world.topic)
    # From the group's offset, which may lag the kill by the commits still in flight; idle 15 s
    # after its last record (the dead member's session ends within 6 s)
    world.consume("at-least-once", probed=True, commit="async", idle_s=15)
    processed = world.processed()
    if crashed != -signal.SIGKILL or len(processed) != len(TICKETS):
        raise LabError(f"the fault did not happen: consumer exit {crashed}, {len(processed)} tickets processed")
    again = sorted(i for i, n in processed.items() if n > 1)
    world.notes.append(f"consumer exit {crashed}; committed at the kill {committed_then}; processed twice {again}")
    expected = world.expected_group_risks()
    answer = world.reconcile()
    stuck = world.stuck()
    return Outcome(
        injected=f"consumer killed -9 20 ms after committing record {CRASH_AT} asynchronously",
        expected=expected,
        got=merge(answer.verdicts, stuck.verdicts),
        detect_s=None,
        # the marks of a processing the kill cut off may never have left the process: whether
        # the auditor can see a record processed twice is not known to the lab (a record
        # processed once called reprocessed is still a false alarm)
        optional={str(key): {"reprocessed"} for key in again},
    )


@scenario(
    "processed-not-updated",
    "the consumer processes a record and commits it, but the row update is lost: "
    "processed-not-updated (AuditedConsumer)",
)
def processed_not_updated(world: World) -> Outcome:
    return _not_updated(world, probed=True)


@scenario(
    "processed-not-updated-plain",
    "as processed-not-updated with plain clients: was the committed record processed? unknown",
)
def processed_not_updated_plain(world: World) -> Outcome:
    return _not_updated(world, probed=False)


def _not_updated(world: World, probed: bool) -> Outcome:
    ticket_pipeline(world, probed)
    world.consume("at-least-once", fail_update_at=CRASH_AT, probed=probed, records=len(TICKETS))
    injected_at = time.monotonic()
    rows = world.rows()
    lost_updates = {str(i) for i in world.processed_not_updated() if rows.get(i) == "NEW"}
    verdict = "stuck:processed-not-updated" if probed else "stuck:unknown"
    expected = {key: {verdict} for key in lost_updates}
    expected |= world.expected_group_risks()
    answer = world.stuck()
    world.notes += [f"{key}: {reason}" for key, reason in sorted(answer.reasons.items())][:5]
    return Outcome(
        injected=f"the row update of record {CRASH_AT} is lost after processing (the offset is committed)",
        expected=expected,
        got=answer.verdicts,
        detect_s=answer.finished_monotonic - injected_at,
    )


HANDOVER = 10  # records the probed instance processes before the plain one takes the partition


@scenario(
    "probe-rolling-deploy",
    "a rolling deploy of the probe: the group's probed instance processes the first records and leaves, a "
    "plain instance (not yet deployed) takes the partition and loses a row update: unknown, never skipped "
    "(its commits name no probed session)",
)
def probe_rolling_deploy(world: World) -> Outcome:
    return _rolling_deploy(world, "subscribe")


@scenario(
    "catch-up-outside-group",
    "as probe-rolling-deploy with the plain consumer outside the group's membership (assign() with the "
    "group's id: a catch-up script, a framework assigning its own partitions), its commits accepted only "
    "while the group is empty, like an operator's reset: unknown, never skipped, and nothing unprocessed",
)
def catch_up_outside_group(world: World) -> Outcome:
    return _rolling_deploy(world, "assign")


def _rolling_deploy(world: World, partitions_by: str) -> Outcome:
    ticket_pipeline(world, probed=True)
    world.consume("at-least-once", probed=True, records=HANDOVER)
    injected_at = time.monotonic()
    world.consume(
        "at-least-once",
        probed=False,
        fail_update_at=CRASH_AT - HANDOVER,
        records=len(TICKETS) - HANDOVER,
        partitions_by=partitions_by,
    )
    rows, processed = world.rows(), world.processed()
    lost_updates = {str(i) for i in world.processed_not_updated() if rows.get(i) == "NEW"}
    if not lost_updates or len(processed) != len(TICKETS):
        raise LabError(f"the fault did not happen: {len(processed)} tickets processed, lost updates {lost_updates}")
    # Ground truth: the plain instance processed the record and lost its row update; with no
    # marks of its own, the auditor cannot tell processed from skipped: unknown is the truth it
    # can give. `skipped` would accuse the group of a skip that never happened.
    # Reconciliation has nothing to report either: every record was processed, the plain
    # instance's without marks, past which its commits (naming no probed session) took the group.
    expected = {key: {"stuck:unknown"} for key in lost_updates}
    expected |= world.expected_group_risks()
    found = world.reconcile()
    answer = world.stuck()
    world.notes += [f"{key}: {reason}" for key, reason in sorted(answer.reasons.items())][:5]
    return Outcome(
        injected=f"the probed instance left after {HANDOVER} records; a plain one"
        + (" outside the group (assign())" if partitions_by == "assign" else "")
        + f" lost record {CRASH_AT}'s row update",
        expected=expected,
        got=merge(found.verdicts, answer.verdicts),
        detect_s=max(found.finished_monotonic, answer.finished_monotonic) - injected_at,
    )


@scenario(
    "crash-auto-commit",
    "enable.auto.commit every 1 s, 1.5 s per record; killed -9 while processing a polled record: whatever "
    "really happened (skipped when the timer committed it first, reprocessed when not) (AuditedConsumer)",
)
def crash_auto_commit(world: World) -> Outcome:
    return _auto_commit(world, probed=True)


@scenario(
    "crash-auto-commit-plain",
    "as crash-auto-commit with plain clients: a skipped record is unknown (no processed ledger), a "
    "reprocessed one invisible; the lint still names the setting",
)
def crash_auto_commit_plain(world: World) -> Outcome:
    return _auto_commit(world, probed=False)


def _auto_commit(world: World, probed: bool) -> Outcome:
    ticket_pipeline(world, probed)
    # Processing outlasts the commit interval: the timer commits a polled record's offset
    # (enable.auto.offset.store) before its processing ends, as seed 004 describes.
    crashed = world.consume("auto", crash_at=AUTO_CRASH_AT, probed=probed, auto_commit_ms=1000, slow_ms=1500)
    injected_at = time.monotonic()
    world.consume("auto", probed=probed, auto_commit_ms=1000, idle_s=15)
    rows, processed = world.rows(), world.processed()
    committed = world.cluster.committed(world.group, world.topic)
    position = {r.key: r.offset for r in world.cluster.read_topic(world.topic)}
    expected: dict[str, set[str]] = {}
    for ticket, status in rows.items():
        key = str(ticket)
        if processed.get(ticket, 0) > 1:
            if probed:  # without a processed ledger a second processing leaves no trace
                expected[key] = {"reprocessed"}
        elif status == "NEW" and not processed.get(ticket) and position.get(key, 1 << 62) < committed.get(0, -1):
            # The group committed past it and no consumer processed it.
            expected[key] = {"stuck:skipped", "unprocessed"} if probed else {"stuck:unknown"}
    if not expected:  # the timer committed exactly what was processed: a legitimate outcome
        world.notes.append("the crash cost nothing this time: no record skipped or processed twice")
    world.notes.append(f"consumer exit {crashed}; committed {committed}; truth {sorted(expected.items())[:5]}")
    expected |= world.expected_group_risks()
    # The config let it happen: auto-commit commits the offsets stored at poll time
    # (enable.auto.offset.store=true, the default), processed or not.
    expected["lint consumer"] = {"lint:enable.auto.offset.store"}
    found = world.reconcile()
    stuck = world.stuck()
    lint = world.lint(consumer=consumer_config(world.cluster.bootstrap, world.group, "auto", auto_commit_ms=1000))
    got = merge(found.verdicts, stuck.verdicts, lint.verdicts)
    # the killed session's last auto-commit passed the record it was processing
    expected, unjudged = truth.died_with_its_marks(expected)
    return Outcome(
        injected=f"auto-commit every 1 s, 1.5 s per record, killed -9 while processing record {AUTO_CRASH_AT}"
        + ("" if probed else ", plain clients"),
        expected=expected,
        got=got,
        optional=unjudged,
        detect_s=max(found.finished_monotonic, stuck.finished_monotonic) - injected_at,
    )


BATCH, SLOW_MS, MAX_POLL_MS = 10, 1000, 6000


@scenario(
    "rebalance-mid-batch",
    "a consumer processes a batch of 10 records at 1 s each (max.poll.interval.ms=6s) while a second member "
    "joins: the group moves the partition mid-batch, the batch's commit fails and the new owner processes "
    "it again: reprocessed (AuditedConsumer)",
)
def rebalance_mid_batch(world: World) -> Outcome:
    return _rebalance(world, probed=True)


@scenario(
    "rebalance-mid-batch-plain",
    "as rebalance-mid-batch with plain clients: without a processed ledger nothing can be said",
)
def rebalance_mid_batch_plain(world: World) -> Outcome:
    return _rebalance(world, probed=False)


def _rebalance(world: World, probed: bool) -> Outcome:
    ticket_pipeline(world, probed)
    slow = world.start_consumer(
        "at-least-once", probed=probed, batch=BATCH, slow_ms=SLOW_MS, max_poll_interval_ms=MAX_POLL_MS
    )
    wait_until(lambda: len(world.processed()) >= 1, 60, "the first consumer to start its batch")
    injected_at = time.monotonic()
    world.start_consumer("at-least-once", probed=probed)  # joins: the group rebalances mid-batch
    wait_until(lambda: len(world.processed()) >= len(TICKETS), 180, "every ticket to be processed")
    wait_until(lambda: all(v == "DONE" for v in world.rows().values()), 60, "every row to be DONE")
    time.sleep(3)  # the last commits and the probes' ledger flushes
    world.stop_consumers()
    processed = world.processed()
    again = {str(i) for i, n in processed.items() if n > 1}
    if not again:
        raise LabError(f"the fault did not happen: nothing was processed twice (first consumer {slow.returncode})")
    world.notes.append(f"processed more than once: {sorted(again, key=int)}")
    expected = {key: {"reprocessed"} for key in again} if probed else {}
    answer = world.reconcile()
    return Outcome(
        injected=f"batch of {BATCH} at {SLOW_MS} ms per record, max.poll.interval.ms={MAX_POLL_MS}; a second member "
        "joins mid-batch",
        expected=expected,
        got=answer.verdicts,
        detect_s=(answer.finished_monotonic - injected_at) if expected else None,
    )
