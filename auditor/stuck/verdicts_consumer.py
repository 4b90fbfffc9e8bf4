"""Verdict rule 2 (verdicts.py): a record with the item's key is in the topic; per record and
consumer group, processed, waiting, skipped or unknown."""

from __future__ import annotations

from typing import Any

from auditor.stuck.evidence import (
    ClusterView,
    Diagnosis,
    GroupState,
    LocatedRecord,
    PartitionState,
    StuckRow,
    ms_to_iso,
)
from auditor.stuck.verdict_outcomes import (
    MarkIndex,
    Outcome,
    by_session,
    combine,
    committed_by,
    complete,
    counted_mark,
    duration,
    group_info,
    judged_by,
    lag,
    lost_mark,
    passing_commit,
    place,
    standing,
    still_processing,
    unprobed_below,
)


def consumer_side(
    row: StuckRow, records: list[LocatedRecord], marks: MarkIndex, view: ClusterView, evidence: dict[str, Any]
) -> Diagnosis:
    latest = records[-1]
    place(evidence, latest.partition, latest.offset, view.partitions.get(latest.partition), view)
    where = f"{view.topic}/{latest.partition}@{latest.offset}"
    if view.groups_error:
        return Diagnosis(
            "unknown",
            f"in the topic at {where}, but the groups' offsets could not be read: {view.groups_error}",
            evidence,
        )
    if not view.groups:
        return Diagnosis(
            "unknown", f"in the topic at {where}; the binding names no consumer groups to tell where it waits", evidence
        )
    outcomes = []
    for record in records:
        state = view.partitions.get(record.partition)
        for group in view.groups.values():
            outcomes.append(_visible_outcome(row, record, state, group, marks, view))
    return combine(outcomes, evidence)


def _visible_outcome(
    row: StuckRow,
    record: LocatedRecord,
    state: PartitionState | None,
    group: GroupState,
    marks: MarkIndex,
    view: ClusterView,
) -> Outcome:
    info = group_info(group, record.partition)
    where = f"{view.topic}/{record.partition}@{record.offset}"
    mark = marks.get((group.group, record.partition, record.offset))
    at = standing(group, record.partition, record.offset, present=True)
    committed = at.committed
    # Written before the topic's new id was first seen, or where the broker truncated and
    # rewrote the partition: a mark at its offset made then may be of the gone record that
    # held the offset (the deleted topic's, or a lost one), and none may be missing.
    # The earliest mark there may be of it; a later one made after the bound counts.
    unclear_until, unclear_why = view.marks_unclear_until(record.partition, record.offset)
    mark = counted_mark(mark, unclear_until)
    unclear = unclear_until is not None and not complete(unclear_until, record.timestamp_ms or 0)
    if mark is not None:
        info["processed"] = mark.as_json()
        return Outcome(
            "processed",
            f"processed by group {group.group} from {where} ({mark.describe()}) but the row is still {row.status}: "
            "the update after processing failed",
            info,
        )
    if committed is None or committed <= record.offset:
        info.update(lag(group, state, record.partition, view.now_ms))
        low = state.low if state else 0
        info["records_ahead"] = record.offset - (committed if committed is not None else low)
        if record.timestamp_ms is not None:
            info["waiting_seconds"] = round(max(0, view.now_ms - record.timestamp_ms) / 1000, 1)
        position = f"committed offset {committed}" if committed is not None else "no committed offset"
        idle = ", no active members" if group.members == 0 else ""
        # An active group that never committed here: its consumers' position is not visible.
        unseen = (
            "; its members are active there but where they are is not visible: with auto.offset.reset=latest "
            "they started past this record and will not read it (see the group's risks)"
            if group.unseen_position(record.partition)
            else ""
        )
        return Outcome(
            "waiting",
            f"waiting at {where}: group {group.group} has {position}{idle}; {info['records_ahead']} record(s) "
            f"before it, partition lag {info.get('lag_records', '?')} record(s) / {duration(info.get('lag_seconds'))}"
            f"{unseen}",
            info,
        )
    # The group committed past it (now, or as a run saw) and has no mark for it.
    past = judged_by(info, at)

    def cannot_tell(why: str) -> Outcome:
        return Outcome(
            "unknown",
            f"group {group.group} committed past {where} ({past}), but {why}: processed or skipped cannot be told "
            "apart",
            info,
        )

    ledger = view.consumer_ledger
    if ledger is None or not ledger.available:
        return cannot_tell(f"the consumer ledger cannot be read ({ledger.reason if ledger else 'no consumer ledger'})")
    lost = lost_mark(group, view.topic, record.partition, record.offset)
    if lost:
        return cannot_tell(lost)
    if group.marks_on_topic == 0:
        return Outcome(
            "unknown",
            f"group {group.group} committed past {where} ({past}), but it has no processed marks in the consumer "
            f"ledger {ledger.topic}: its consumer is not probed",
            info,
        )
    # the record's timestamp is its producer's clock, the ledger's edge its consumer's: the same
    # margin as for a deleted record (verdicts_absent._deleted); a record without a timestamp
    # only where the ledger holds everything since its start
    if not complete(ledger.complete_since_ms, record.timestamp_ms or 0):
        return Outcome(
            "unknown",
            f"group {group.group} committed past {where} ({past}), but the consumer ledger no longer holds marks "
            "that old",
            info,
        )
    if unclear:
        return Outcome(
            "unknown",
            f"group {group.group} committed past {where} ({past}), but {unclear_why}, and this record "
            f"was written before {ms_to_iso(unclear_until)}: a mark of it and one of the gone record that held the "
            "same offset cannot be told apart",
            info,
        )
    unprobed = unprobed_below(group, view.topic, record.partition, record.offset)
    if unprobed:
        return cannot_tell(unprobed)
    commit = passing_commit(group, record.partition, record.offset)
    plain = committed_by(group, view.topic, record.partition, record.offset, info, commit)
    if plain:
        return cannot_tell(plain)
    processing = still_processing(group, commit, view.topic, record.partition, record.offset, view, info)
    if processing:
        return Outcome("unknown", processing, info)
    return Outcome(
        "skipped",
        f"group {group.group} committed past it ({view.topic}/{record.partition}: {past} > offset {record.offset}) "
        f"but no consumer processed it: the offset was committed before processing{by_session(info)}",
        info,
    )
