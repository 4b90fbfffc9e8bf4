"""An operator moves or deletes a consumer group's committed offsets (seed 004's offset
management): `kafka-consumer-groups.sh --reset-offsets --execute` or `--delete-offsets` while
the group has no member. Forward, the records jumped over are never processed although
nothing crashed; back, every record after the new offset is processed again; deleted, the
cluster no longer shows how far the group had read."""

from __future__ import annotations

import time

from auditor.lab import truth
from auditor.lab.cluster import LabError, wait_until
from auditor.lab.compare import Outcome, merge
from auditor.lab.registry import scenario
from auditor.lab.scenarios.consumers import CRASH_AT, TICKETS, skipped_truth, ticket_pipeline
from auditor.lab.workload import produce
from auditor.lab.world import World

FIRST = 10  # tickets processed before the reset
LATER = list(range(31, 36))  # produced after it, processed by the restarted consumer


@scenario(
    "offsets-reset-to-latest",
    "the consumer processes 10 of 30 records and stops; an operator resets the group's offsets to the log "
    "end (to get past a backlog); restarted, it processes only what comes after: the 20 jumped over are "
    "skipped, and unprocessed for reconciliation (AuditedConsumer)",
)
def offsets_reset_to_latest(world: World) -> Outcome:
    return _to_latest(world, probed=True)


@scenario(
    "offsets-reset-to-latest-plain",
    "as offsets-reset-to-latest with plain clients: was a committed record processed? unknown",
)
def offsets_reset_to_latest_plain(world: World) -> Outcome:
    return _to_latest(world, probed=False)


@scenario(
    "offsets-reset-to-latest-kip848",
    "as offsets-reset-to-latest with group.protocol=consumer (KIP-848), whose membership "
    "__consumer_offsets holds in records of another kind than a classic group's: still skipped "
    "and unprocessed, the reset never taken for a plain member's commit",
)
def offsets_reset_to_latest_kip848(world: World) -> Outcome:
    return _to_latest(world, probed=True, group_protocol="consumer")


def _to_latest(world: World, probed: bool, **client: str) -> Outcome:
    ticket_pipeline(world, probed)
    world.consume("at-least-once", crash_at=0, probed=probed, records=FIRST, **client)
    before = world.reconcile()  # the auditor has read the pipeline before the operator acts
    ends = {p: high for p, (_, high) in world.cluster.watermarks(world.topic).items()}
    world.cluster.reset_offsets(world.group, world.topic, ends)
    injected_at = time.monotonic()
    # The application goes on with new tickets, which it processes: only the jumped-over are stuck.
    world.insert(LATER)
    reports = produce(world.cluster.bootstrap, world.topic, LATER, {"acks": "all"}, probed=probed)
    if any(d.error for d in reports):
        raise RuntimeError(f"the workload's sends failed: {[d.error for d in reports if d.error][:3]}")
    world.start_consumer("at-least-once", probed=probed, **client)
    wait_until(lambda: all(world.processed().get(t) for t in LATER), 120, "the restarted consumer to process")
    skipped, committed = skipped_truth(world)
    if not skipped:
        raise LabError(f"the fault did not happen: nothing was jumped over (committed {committed})")
    world.notes.append(f"reset to {ends}; committed {committed}; never processed: {len(skipped)} tickets")
    verdicts = {"stuck:skipped", "unprocessed"} if probed else {"stuck:unknown"}
    expected = {key: set(verdicts) for key in skipped}
    expected |= world.expected_group_risks()  # none: the consumer is running
    found = world.reconcile()
    stuck = world.stuck()
    world.notes += [f"{key}: {reason}" for key, reason in sorted(stuck.reasons.items())][:3]
    return Outcome(
        injected=f"group offsets reset to the log end {ends} after {FIRST} of {len(TICKETS)} records"
        + ("" if probed else ", plain clients")
        + (f", group.protocol={client['group_protocol']}" if "group_protocol" in client else ""),
        expected=expected,
        got=merge(before.verdicts, found.verdicts, stuck.verdicts),
        detect_s=max(found.finished_monotonic, stuck.finished_monotonic) - injected_at,
    )


@scenario(
    "offsets-reset-to-earliest",
    "the consumer processes all 30 records; an operator resets the group's offsets to the log start (to "
    "replay); restarted, it processes every record again: reprocessed (AuditedConsumer)",
)
def offsets_reset_to_earliest(world: World) -> Outcome:
    return _to_earliest(world, probed=True)


@scenario(
    "offsets-reset-to-earliest-plain",
    "as offsets-reset-to-earliest with plain clients: without a processed ledger a replay leaves no trace",
)
def offsets_reset_to_earliest_plain(world: World) -> Outcome:
    return _to_earliest(world, probed=False)


def _to_earliest(world: World, probed: bool) -> Outcome:
    ticket_pipeline(world, probed)
    world.consume("at-least-once", probed=probed, records=len(TICKETS))
    before = world.reconcile()  # every record processed once, seen so by the auditor
    starts = {p: low for p, (low, _) in world.cluster.watermarks(world.topic).items()}
    world.cluster.reset_offsets(world.group, world.topic, starts)
    injected_at = time.monotonic()
    world.consume("at-least-once", probed=probed, records=len(TICKETS))
    processed = world.processed()
    again = {str(i) for i, n in processed.items() if n > 1}
    if not again:
        raise LabError(f"the fault did not happen: nothing was processed twice ({processed})")
    world.notes.append(f"reset to {starts}; processed twice: {len(again)} tickets")
    expected = {key: {"reprocessed"} for key in again} if probed else {}
    found = world.reconcile()
    return Outcome(
        injected=f"group offsets reset to the log start {starts} after every record was processed"
        + ("" if probed else ", plain clients"),
        expected=expected,
        got=merge(before.verdicts, found.verdicts),
        detect_s=(found.finished_monotonic - injected_at) if expected else None,
    )


DELETED_BELOW = 13  # retention standing in: the first 13 records deleted


@scenario(
    "offsets-deleted",
    "an at-most-once consumer commits record 11 and is killed -9 before processing it; a run reads the "
    "pipeline; an operator deletes the group's offsets and retention deletes records 1-13: record 11 is "
    "skipped (a run saw the group commit past it), 12-13 unknown (how far the group went before its offsets "
    "went cannot be told), the rest waiting (AuditedConsumer)",
)
def offsets_deleted(world: World) -> Outcome:
    return _deleted(world, probed=True)


@scenario(
    "offsets-deleted-plain",
    "as offsets-deleted with plain clients: record 11, committed past and unprocessed, is unknown (no "
    "processed ledger), never expired",
)
def offsets_deleted_plain(world: World) -> Outcome:
    return _deleted(world, probed=False)


@scenario(
    "offsets-deleted-unseen",
    "as offsets-deleted with no reconciliation run before the operator deletes the group's offsets: "
    "nothing the auditor read saw how far the group had gone, and records 11-13 are unknown, not expired "
    "(the removal's tombstone in __consumer_offsets), the rest waiting (AuditedConsumer)",
)
def offsets_deleted_unseen(world: World) -> Outcome:
    return _deleted(world, probed=True, seen=False)


def _deleted(world: World, probed: bool, seen: bool = True) -> Outcome:
    ticket_pipeline(world, probed)
    crashed = world.consume("at-most-once", crash_at=CRASH_AT, probed=probed)
    committed = world.cluster.committed(world.group, world.topic)
    position = {r.key: r.offset for r in world.cluster.read_topic(world.topic)}
    before = world.reconcile() if seen else None  # a run sees the group's committed offset
    world.cluster.delete_offsets(world.group, world.topic, [0])  # once the killed member's session ended
    world.cluster.delete_records(world.topic, {0: DELETED_BELOW})
    injected_at = time.monotonic()
    rows, processed = world.rows(), world.processed()
    if world.cluster.committed(world.group, world.topic):
        raise LabError("the fault did not happen: the group still has committed offsets")
    # Ground truth: the client's commit before the fault, the topic read then, the database.
    # Unseen, the group's commit past the record is gone without a trace the auditor read
    # before: whether it went past it cannot be told (not expired, not skipped).
    skipped = "stuck:skipped" if probed and seen else "stuck:unknown"
    expected: dict[str, set[str]] = {}
    for ticket, status in rows.items():
        key, offset = str(ticket), position.get(str(ticket))
        if status != "NEW" or processed.get(ticket) or offset is None:
            continue
        if offset < committed.get(0, -1):  # committed past, never processed
            expected[key] = {skipped, "unprocessed"} if probed and seen else {skipped}
        elif offset < DELETED_BELOW:
            # Deleted before the group reached it; but the auditor only knows that the group's
            # offset, seen short of it, is gone: it may have gone past the record before.
            expected[key] = {"stuck:unknown"}
        else:
            expected[key] = {"stuck:waiting"}
    if not any(position[key] < committed.get(0, -1) for key in expected):
        raise LabError(f"the fault did not happen: no record was committed past unprocessed (exit {crashed})")
    world.notes.append(
        f"consumer exit {crashed}; committed {committed} before the offsets were deleted; the run before: "
        f"{sorted(before.verdicts.items())[:3] if before is not None else 'none'}"
    )
    expected |= world.expected_group_risks()
    found = world.reconcile()
    stuck = world.stuck()
    world.notes += [f"{key}: {reason}" for key, reason in sorted(stuck.reasons.items())][:3]
    expected, unjudged = truth.died_with_its_marks(expected)
    return Outcome(
        injected=f"at-most-once consumer killed -9 after committing record {CRASH_AT}; {'a run' if seen else 'no run'}; "
        "the group's offsets "
        f"deleted; records below offset {DELETED_BELOW} deleted" + ("" if probed else ", plain clients"),
        expected=expected,
        # the run after the fault, not merged with the one before: a run must not report a record
        # `unprocessed` that it could not judge before the group's offset that showed it went
        got=merge(found.verdicts, stuck.verdicts),
        detect_s=stuck.finished_monotonic - injected_at,
        optional=unjudged,
    )
