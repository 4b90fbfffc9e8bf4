"""The verdict of one stuck item: where its delivery broke, with the evidence.

A pure function of what the diagnosis read (evidence.py). The rule that keeps it honest:
a failure verdict needs positive evidence; whenever something that would decide it could
not be read (Kafka, a ledger, a group's offsets, records that old), the verdict is
``unknown`` with the reason.

Decision, in order:

1. Kafka unreadable -> unknown.
2. A record with the key is visible to read_committed readers -> the consumer side, per
   record and consumer group: a processed mark -> processed (the row update failed);
   the group's committed offset at or before the record -> waiting (with the lag); the
   group committed past it without a mark -> skipped (only when the group's consumer is
   probed, the consumer ledger holds every mark since the record was written, and the
   record is not below the group's first processed mark on its partition, below which the
   application may have read it before it was probed; otherwise unknown). A mark the
   ledger deleted after a reconciliation run read it counts (recalled from the run's
   state). Across records and groups: processed > waiting > unknown > skipped.
3. Only in a transaction still open (past the last stable offset) -> waiting; only in
   aborted transactions -> aborted.
4. Not in the topic at all (needs the producer ledger, else unknown):
   acked at an offset the log still covers -> broker-lost; acked at an offset below the
   log start -> deleted: processed mark -> processed-not-updated; the group had not
   reached it -> expired; committed past it: unknown when the consumer ledger no longer
   holds marks as old as the record or the record is below the group's first mark on its
   partition, else moved past it without reading its neighbours while they existed ->
   expired, read its neighbours but not it -> skipped; sent unconfirmed (acks=0, the
   broker never answers) and its partition still holds everything since the send ->
   produce-failed (never broker-lost), else unknown; a failed ledger entry and no
   ack -> produce-failed; no ledger entry -> never-produced when the topic (or the
   ledger) still holds everything since the row was created, else unknown; when the
   ledger has no entries for the topic at all (the producer is not probed), only if no
   partition can have changed leader since the row was created either.
   Contract v2 (acks in sequence ranges, keys in `keys` records, no position): acked ->
   broker-lost when every partition still holds everything since it was produced; deleted
   when no partition holds records that old: expired when no group can have read it (never
   committed, or probed since before the record was produced and no mark below a log start
   is as recent as the record), else unknown; sent and never confirmed -> produce-failed when every partition holds
   everything since, else unknown.
5. Without ledger evidence, the auditor's memory (what reconciliation runs saw, KeyMemory):
   seen at an offset the log still covers but no longer there -> broker-lost; seen at an
   offset since deleted -> decided as for an acked-then-deleted record (expired, ...);
   reported missing by a run while the topic held everything since the row was created,
   the topic still holds everything since that run, and no partition can have changed
   leader since the row was created (a leader change loses acks=1 records without a
   trace) -> never-produced. Each names the run.
6. On a compacted topic whose record key is not the binding's key, a record with the item's
   key absent now may have been removed by the log cleaner after delivery: wherever the
   rules above would conclude broker-lost, never-produced or produce-failed from such an
   absence (for records older than min.compaction.lag.ms), the verdict is unknown.
7. A topic deleted and created again under its name (its topic id changed since the auditor
   last saw it, auditor.pipelines.incarnations) took its records with it, and its offsets
   start again at 0: the topic is complete only since the new id was first seen, so a
   record acked or seen at an offset and produced before then is unknown (not broker-lost,
   not expired), and never-produced needs a row created after it (or a complete producer
   ledger).
8. Where offsets were reused (7, or a partition a reconciliation rebuild found truncated
   and rewritten past an offset: state.json `marks_rewritten`, spark_jobs.mark_rules), a
   processed mark made up to the bound may be of the gone record that held the offset: it
   is not taken for the record there now (a later mark at the same position counts), and
   a record written up to the bound (plus the slack for clocks) committed past without a
   later mark is unknown, not skipped. The same holds for a record acked or seen at such an
   offset that is now below the log start (4, 5): written up to the bound, it may have been
   lost with the rewritten part or kept and deleted since -> unknown; written after it, its
   marks are judged as above, and marks past it prove no skip (they may be of lost records).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from auditor.probes.codec import ACKED, ACKED_RANGE, SENT, UNCONFIRMED, delivery_status
from auditor.stuck.evidence import (
    ClusterView,
    Diagnosis,
    GroupState,
    KeyMemory,
    LedgerEntry,
    LedgerView,
    LocatedRecord,
    PartitionState,
    ProcessedMark,
    StuckRow,
    iso_to_ms,
    ms_to_iso,
)
from spark_jobs.kafka_cleanup import absent_keys_explained

# Producer clocks drift: a record counts as "certainly still in the log" only this long
# after the oldest remaining record.
COMPLETENESS_SLACK_MS = 60_000
MAX_LISTED = 5  # records / ledger entries listed per item

MarkIndex = Mapping[tuple[str, int, int], ProcessedMark]

# Outcomes of one (record, group) pair, most telling first.
_PRIORITY = ("processed", "waiting", "unknown", "expired", "skipped")
_VERDICT_OF = {
    "processed": "processed-not-updated",
    "waiting": "waiting",
    "unknown": "unknown",
    "expired": "expired",
    "skipped": "skipped",
}


@dataclass
class _Outcome:
    kind: str
    reason: str
    group: dict[str, Any]


def diagnose(
    row: StuckRow,
    records: Iterable[LocatedRecord],
    entries: Iterable[LedgerEntry],
    marks: MarkIndex,
    view: ClusterView,
    memory: KeyMemory | None = None,
) -> Diagnosis:
    records = sorted(records, key=lambda r: (r.partition, r.offset))
    entries = sorted(entries, key=lambda e: (e.ts_ms or 0, e.session, e.seq))
    evidence: dict[str, Any] = {
        "topic": view.topic,
        "records": [r.as_json() for r in records[:MAX_LISTED]],
        "records_found": len(records),
        "ledger": [e.as_json() for e in entries[-MAX_LISTED:]],
    }
    if view.kafka_error:
        return Diagnosis("unknown", f"Kafka could not be read: {view.kafka_error}", evidence)

    committed = [r for r in records if r.state == "committed"]
    if committed:
        return _consumer_side(row, committed, marks, view, evidence)

    open_records = [r for r in records if r.state == "open"]
    if open_records:
        record = open_records[0]
        state = view.partitions.get(record.partition)
        _place(evidence, record.partition, record.offset, state, view)
        stable = state.stable if state else "?"
        return Diagnosis(
            "waiting",
            f"in a transaction still open at {view.topic}/{record.partition}@{record.offset}: read_committed "
            f"consumers wait at the last stable offset {stable} until it commits or aborts",
            evidence,
        )
    aborted = [r for r in records if r.state == "aborted"]
    if aborted:
        record = aborted[-1]
        _place(evidence, record.partition, record.offset, view.partitions.get(record.partition), view)
        where = ", ".join(f"{r.partition}@{r.offset}" for r in aborted[:MAX_LISTED])
        return Diagnosis(
            "aborted",
            f"only in aborted transactions ({view.topic} {where}); read_committed consumers never see it "
            "and it was not produced again",
            evidence,
        )
    return _not_in_topic(row, entries, marks, view, evidence, memory or KeyMemory())


# --- the record is in the topic -------------------------------------------------------------


def _consumer_side(
    row: StuckRow, records: list[LocatedRecord], marks: MarkIndex, view: ClusterView, evidence: dict[str, Any]
) -> Diagnosis:
    latest = records[-1]
    _place(evidence, latest.partition, latest.offset, view.partitions.get(latest.partition), view)
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
    return _combine(outcomes, evidence)


def _group_info(group: GroupState, partition: int) -> dict[str, Any]:
    return {
        "group": group.group,
        "committed": group.committed.get(partition),
        "members": group.members,
        "group_state": group.state,
    }


def _lag(group: GroupState, state: PartitionState | None, partition: int, now_ms: int) -> dict[str, Any]:
    committed = group.committed.get(partition)
    if state is None:
        return {}
    position = committed if committed is not None else state.low
    oldest_ms = group.committed_timestamp_ms.get(partition)
    if oldest_ms is None and committed is None:
        oldest_ms = state.low_timestamp_ms
    lag_records = max(0, state.stable - position)
    seconds: float | None = 0
    if lag_records:  # records behind with no known time of the oldest one: the lag in time is unknown, not 0
        seconds = None if oldest_ms is None else round(max(0, now_ms - oldest_ms) / 1000, 1)
    return {"lag_records": lag_records, "lag_seconds": seconds}


def _visible_outcome(
    row: StuckRow,
    record: LocatedRecord,
    state: PartitionState | None,
    group: GroupState,
    marks: MarkIndex,
    view: ClusterView,
) -> _Outcome:
    info = _group_info(group, record.partition)
    where = f"{view.topic}/{record.partition}@{record.offset}"
    mark = marks.get((group.group, record.partition, record.offset))
    committed = group.committed.get(record.partition)
    # Written before the topic's new id was first seen, or where the broker truncated and
    # rewrote the partition: a mark at its offset made then may be of the gone record that
    # held the offset (the deleted topic's, or a lost one), and none may be missing.
    # The earliest mark there may be of it; a later one made after the bound counts.
    unclear_until, unclear_why = view.marks_unclear_until(record.partition, record.offset)
    mark = _counted_mark(mark, unclear_until)
    unclear = unclear_until is not None and not _complete(unclear_until, record.timestamp_ms or 0)
    if mark is not None:
        info["processed"] = mark.as_json()
        return _Outcome(
            "processed",
            f"processed by group {group.group} from {where} ({mark.describe()}) but the row is still {row.status}: "
            "the update after processing failed",
            info,
        )
    if committed is None or committed <= record.offset:
        info.update(_lag(group, state, record.partition, view.now_ms))
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
        return _Outcome(
            "waiting",
            f"waiting at {where}: group {group.group} has {position}{idle}; {info['records_ahead']} record(s) "
            f"before it, partition lag {info.get('lag_records', '?')} record(s) / {_duration(info.get('lag_seconds'))}"
            f"{unseen}",
            info,
        )
    # The group committed past it and has no mark for it.
    ledger = view.consumer_ledger
    if ledger is None or not ledger.available:
        reason = ledger.reason if ledger else "no consumer ledger"
        return _Outcome(
            "unknown",
            f"group {group.group} committed past {where} (committed {committed}), but the consumer ledger cannot "
            f"be read ({reason}): processed or skipped cannot be told apart",
            info,
        )
    if group.marks_on_topic == 0:
        return _Outcome(
            "unknown",
            f"group {group.group} committed past {where} (committed {committed}), but it has no processed marks "
            f"in the consumer ledger {ledger.topic}: its consumer is not probed",
            info,
        )
    if ledger.complete_since_ms is None or (
        record.timestamp_ms is not None and ledger.complete_since_ms > record.timestamp_ms
    ):
        return _Outcome(
            "unknown",
            f"group {group.group} committed past {where}, but the consumer ledger no longer holds marks that old",
            info,
        )
    if unclear:
        return _Outcome(
            "unknown",
            f"group {group.group} committed past {where} (committed {committed}), but {unclear_why}, and this record "
            f"was written before {ms_to_iso(unclear_until)}: a mark of it and one of the gone record that held the "
            "same offset cannot be told apart",
            info,
        )
    unprobed = _unprobed_below(group, view.topic, record.partition, record.offset)
    if unprobed:
        return _Outcome(
            "unknown",
            f"group {group.group} committed past {where} (committed {committed}), but {unprobed}: processed or "
            "skipped cannot be told apart",
            info,
        )
    return _Outcome(
        "skipped",
        f"group {group.group} committed past it ({view.topic}/{record.partition}: committed {committed} > offset "
        f"{record.offset}) but no consumer processed it: the offset was committed before processing",
        info,
    )


# --- the record is not in the topic ---------------------------------------------------------


def _not_in_topic(
    row: StuckRow,
    entries: list[LedgerEntry],
    marks: MarkIndex,
    view: ClusterView,
    evidence: dict[str, Any],
    memory: KeyMemory,
) -> Diagnosis:
    if view.records_scanned > 0 and view.keyed_records == 0:
        return Diagnosis(
            "unknown",
            f"record_key {view.record_key} found no key in any of the {view.records_scanned} records of "
            f"{view.topic}: is the binding's record_key right?",
            evidence,
        )
    ledger = view.producer_ledger
    ledger_readable = ledger is not None and ledger.available
    acked = [e for e in entries if delivery_status(e.status, e.offset) == ACKED] if ledger_readable else []
    if acked:
        entry = acked[-1]
        return _written_then_gone(row, entry.partition, entry.offset, "acked at", marks, view, evidence, entry.ts_ms)
    sighting = memory.sightings.get(row.key)
    if sighting is not None:
        evidence["seen"] = sighting.as_json()
        run = f"reconciliation run {sighting.run_id}" if sighting.run_id else "a reconciliation run"
        return _written_then_gone(
            row, sighting.partition, sighting.offset, f"seen by {run} at", marks, view, evidence, sighting.ts_ms
        )
    ranged = [e for e in entries if e.status == ACKED_RANGE] if ledger_readable else []
    if ranged:
        return _acked_unplaced(ranged[-1], view, evidence)
    if ledger is None or not ledger.available:
        reason = ledger.reason if ledger else "no producer ledger"
        return _from_missing_report(
            row,
            view,
            evidence,
            memory,
            f"no record with this key in {view.topic}, and the producer ledger cannot be read ({reason}): "
            "never-produced, produce-failed and broker-lost cannot be told apart",
        )
    unconfirmed = [e for e in entries if delivery_status(e.status, e.offset) == UNCONFIRMED]
    if unconfirmed:
        return _unconfirmed_absent(unconfirmed[-1], view, evidence)
    failed = [e for e in entries if e.status == "failed"]
    if failed:
        entry = failed[-1]
        return Diagnosis(
            "produce-failed",
            f"the send failed ({entry.error or 'no error text'}; persisted: {entry.persisted}) and no retry "
            f"reached {view.topic}",
            evidence,
        )
    sent = [e for e in entries if e.status == SENT]
    if sent:
        return _sent_unplaced(sent[-1], view, evidence)
    created_ms = iso_to_ms(row.since)
    if created_ms is None:
        created_ms = view.now_ms - int(row.age_seconds * 1000)
    unattributed = _unattributed_since(ledger, created_ms)
    if unattributed is not None:
        return Diagnosis("unknown", unattributed, evidence)
    topic_since = view.topic_complete_since_ms()
    evidence["topic_complete_since"] = ms_to_iso(topic_since) if topic_since else None
    evidence["ledger_complete_since"] = ms_to_iso(ledger.complete_since_ms) if ledger.complete_since_ms else None
    if _complete(topic_since, created_ms):
        note = (
            ""
            if ledger.entries_for_topic
            else f" (the producer ledger has no entries for {view.topic} at all: its producer is not probed, "
            "so a failed send would look the same)"
        )
        # a probed producer's ledger would hold the ack of a record lost since; without one, the
        # topic's completeness is all there is, and a leader change leaves no trace in it
        changed = (
            None
            if ledger.entries_for_topic
            else _leader_changed_since(view, created_ms, evidence) or _compacted_since(view, created_ms, evidence)
        )
        if changed is not None:
            return Diagnosis(
                "unknown",
                f"no record with this key in {view.topic} and no producer-ledger entry{note}, but {changed}",
                evidence,
            )
        return Diagnosis(
            "never-produced",
            f"no record with this key in {view.topic}, which still holds everything produced since before the "
            f"row was created, and no producer-ledger entry{note}",
            evidence,
        )
    if ledger.entries_for_topic and _complete(ledger.complete_since_ms, created_ms):
        return Diagnosis(
            "never-produced",
            f"no producer-ledger entry for this key since the row was created (the ledger {ledger.topic} is "
            f"complete since then); {view.topic} itself no longer holds records that old",
            evidence,
        )
    return _from_missing_report(
        row,
        view,
        evidence,
        memory,
        f"{view.topic} no longer holds records that old (oldest remaining record: "
        f"{ms_to_iso(topic_since) or 'unknown'}) and there is no ledger evidence for this key",
    )


def _written_then_gone(
    row: StuckRow,
    partition: int,
    offset: int,
    how: str,
    marks: MarkIndex,
    view: ClusterView,
    evidence: dict[str, Any],
    written_ms: int | None,
) -> Diagnosis:
    """A record with the key was written at partition@offset (acked, or seen by a run) and is
    not in the topic now: truncated where the log still covers the offset, else deleted."""
    state = view.partitions.get(partition)
    where = f"{view.topic}/{partition}@{offset}"
    if state is None:
        return Diagnosis("unknown", f"{how} {where}, a partition the topic no longer has", evidence)
    if view.recreated_until_ms is not None and not _complete(view.recreated_until_ms, written_ms or 0):
        # That offset may be of the deleted topic: what it holds now says nothing of the record.
        evidence["topic_recreated"] = view.recreated_reason
        return Diagnosis(
            "unknown",
            f"{how} {where}, but {view.recreated_reason}: lost, deleted with the topic, consumed or not cannot be told",
            evidence,
        )
    _place(evidence, partition, offset, state, view)
    end_now = (view.high_after or {}).get(partition)
    if offset >= state.high and (end_now is None or offset < end_now):
        # written (or acked by a leader whose high watermark had not reached it) after this
        # diagnosis read the topic: nothing says it is lost, only that it is newer than the view
        return Diagnosis(
            "unknown",
            f"{how} {where}, at or past the high watermark {state.high} this diagnosis read"
            + (", and the log has grown past it since" if end_now is not None else "")
            + ": newer than its view of the topic, the next diagnosis will see it",
            evidence,
        )
    if offset >= state.low:
        compacted = _compacted_since(view, written_ms, evidence)
        if compacted is not None:
            return Diagnosis(
                "unknown",
                f"{how} {where} and not in the topic now; {compacted}: broker-lost and compacted away cannot be told "
                "apart",
                evidence,
            )
        return Diagnosis(
            "broker-lost",
            f"{how} {where}, but the log has no record with this key there (log start {state.low}, high "
            f"watermark {state.high}): lost on the broker side, e.g. truncated by an unclean leader election",
            evidence,
        )
    unclear_until, unclear_why = view.marks_unclear_until(partition, offset)
    if unclear_until is not None and not _complete(unclear_until, written_ms or 0):
        # Past where reconciliation proved the partition survived a truncation, written before
        # the rewrite: lost with the rewritten part, or kept and deleted since.
        evidence["marks_unclear"] = unclear_why
        return Diagnosis(
            "unknown",
            f"{how} {where}, now below the log start {state.low}; but {unclear_why}, and it was written before "
            f"{ms_to_iso(unclear_until)}: lost with the rewritten part or deleted since cannot be told",
            evidence,
        )
    return _deleted(row, partition, offset, how, state, marks, view, evidence, written_ms, unclear_until, unclear_why)


def _from_missing_report(
    row: StuckRow, view: ClusterView, evidence: dict[str, Any], memory: KeyMemory, otherwise: str
) -> Diagnosis:
    """No ledger evidence: never-produced when a reconciliation run reported the row missing
    (it does so only while the topic held everything since the row was created) and the
    topic still holds everything produced since that run; else unknown, saying `otherwise`."""
    report = memory.missing.get(row.key)
    created_ms = iso_to_ms(row.since) or view.now_ms - int(row.age_seconds * 1000)
    unattributed = _unattributed_since(view.producer_ledger, created_ms)
    if report is not None:
        evidence["reported_missing"] = report.as_json()
        if unattributed is not None:
            return Diagnosis(
                "unknown", f"{unattributed}; reconciliation run {report.run_id} reported it missing", evidence
            )
        changed = _leader_changed_since(view, created_ms, evidence) or _compacted_since(view, created_ms, evidence)
        if changed is not None:
            return Diagnosis(
                "unknown",
                f"reconciliation run {report.run_id} found no record with this key in {view.topic} up to "
                f"{ms_to_iso(report.reported_at_ms)}, but {changed}",
                evidence,
            )
        if report.topic_complete_since(view):
            return Diagnosis(
                "never-produced",
                f"reconciliation run {report.run_id} found no record with this key in {view.topic} up to "
                f"{ms_to_iso(report.reported_at_ms)}, while the topic held everything since the row was created, "
                "and no record has been deleted from the topic since that run",
                evidence,
            )
        otherwise += (
            f"; reconciliation run {report.run_id} reported it missing, but records written since have been deleted"
        )
        if view.recreated_until_ms is not None and view.recreated_until_ms >= report.reported_at_ms:
            otherwise += f" ({view.recreated_reason})"
    if memory.reason:
        otherwise += f"; the reconciliation state could not be read ({memory.reason})"
    return Diagnosis("unknown", otherwise, evidence)


def _leader_changed_since(view: ClusterView, created_ms: int, evidence: dict[str, Any]) -> str | None:
    """Why "no record with this key" does not prove the row was never produced, or None.

    A leader change can lose acknowledged records without a trace in the log: those a leader
    acked alone (acks=1) before its followers fetched them, or all since the new leader fell
    out of sync (an unclean election). The new leader then writes over their offsets, and
    whether the row's record was among them cannot be told. So never-produced needs every
    partition to have kept its leader since the row was created: leader epoch 0, or a first
    record of the current leader older than the row (every leader change came before it)."""
    for p in sorted(view.partitions):
        state = view.partitions[p]
        if state.leader_epoch == 0:
            continue
        if state.leader_since_ms is not None and state.leader_since_ms + COMPLETENESS_SLACK_MS <= created_ms:
            continue
        evidence["leader_change"] = {
            "partition": p,
            "leader_epoch": state.leader_epoch,
            "current_leader_first_record_at": ms_to_iso(state.leader_since_ms),
        }
        if state.leader_epoch is None:
            return (
                f"the leader epoch of {view.topic}/{p} could not be read, so whether a leader change since the row "
                "was created lost its record (acked by a leader alone with acks=1, or written before an unclean "
                "election) cannot be told: never-produced and broker-lost cannot be told apart"
            )
        when = (
            "its current leader has appended no record yet"
            if state.leader_since_ms is None
            else f"its current leader's first record is from {ms_to_iso(state.leader_since_ms)}"
        )
        return (
            f"{view.topic}/{p} has changed leader (leader epoch {state.leader_epoch}) and may have done so after the "
            f"row was created ({when}): a leader change loses records a leader acked alone (acks=1) or wrote "
            "before an unclean election, without a trace, so never-produced and broker-lost cannot be told apart"
        )
    return None


def _compacted_since(view: ClusterView, written_ms: int | None, evidence: dict[str, Any]) -> str | None:
    """Why a record with the item's key, written at `written_ms` (None: unknown) and absent
    now, may have been delivered and then removed by log compaction; None when it cannot have.

    The log cleaner removes a record once a later record has the same record key. When the
    binding's key is the record key, an item with no record at all was never compacted away
    (the cleaner keeps each record key's last record); otherwise every record of an item may
    be, unless it is younger than min.compaction.lag.ms (kafka_cleanup)."""
    if not absent_keys_explained(view.record_key.split(":", 1)[0]):
        return None
    if view.cleanup is None:
        if view.cleanup_error is None:
            return None
        return (
            f"the cleanup.policy of {view.topic} could not be read ({view.cleanup_error}) and the binding's key "
            f"({view.record_key}) is not the record key: if the topic is compacted, the log cleaner may have removed "
            "the record after it was delivered"
        )
    horizon = view.cleanup.horizon_ms(view.now_ms)
    if horizon is None or (written_ms is not None and written_ms > horizon):
        return None
    evidence["compaction"] = {
        "cleanup_policy": view.cleanup.policy,
        "min_compaction_lag_ms": view.cleanup.compaction_lag_ms,
        "compactable_up_to": ms_to_iso(horizon),
    }
    return (
        f"{view.topic} is compacted ({view.cleanup.describe()}) and the binding's key ({view.record_key}) is not the "
        "record key: the log cleaner removes a record once a later record has the same record key, so this item's "
        "record may have been delivered and compacted away"
    )


def _unattributed_since(ledger: LedgerView | None, created_ms: int) -> str | None:
    """Why "no ledger entry for this key" proves nothing, or None.

    Contract-v2 producers ledger acks as sequence ranges without keys: when such a range
    covers records produced since the row was created, one of them may have carried this
    key and been lost by the broker after its ack, so never-produced cannot be concluded.
    """
    if ledger is None or ledger.unattributed_to_ms is None:
        return None
    if ledger.unattributed_to_ms + COMPLETENESS_SLACK_MS < created_ms:
        return None
    return (
        f"no record with this key in the topic, but contract-v2 producers acked records there up to "
        f"{ms_to_iso(ledger.unattributed_to_ms)} without naming their keys (the ledger {ledger.topic} keeps "
        "sequence ranges): never-produced and broker-lost cannot be told apart"
    )


def _unconfirmed_absent(entry: LedgerEntry, view: ClusterView, evidence: dict[str, Any]) -> Diagnosis:
    """Sent with acks=0 and not in the topic: a send that may have been dropped.

    The broker never confirmed it, so its absence is never a broker-side loss. It is a
    failed produce only while its partition still holds everything since it was sent:
    otherwise retention could have removed it after it was written.
    """
    state = view.partitions.get(entry.partition)
    where = f"{view.topic}/{entry.partition}" if entry.partition >= 0 else view.topic
    sent = ms_to_iso(entry.ts_ms) or "an unknown time"
    compacted = _compacted_since(view, entry.ts_ms, evidence)
    if compacted is not None:
        return Diagnosis(
            "unknown", f"sent with acks=0 at {sent}, never confirmed, and not in {where}; {compacted}", evidence
        )
    if state is not None and entry.ts_ms is not None:
        oldest = view.partition_complete_since_ms(state)
        if _complete(oldest, entry.ts_ms):
            return Diagnosis(
                "produce-failed",
                f"sent with acks=0 at {sent} (fire-and-forget: the broker never confirmed it, and such sends are "
                f"never retried) and {where} has no record with this key although it still holds everything "
                "since then: the send was dropped before the broker wrote it",
                evidence,
            )
    return Diagnosis(
        "unknown",
        f"sent with acks=0 at {sent}, never confirmed by the broker, and not in {where}; records that old are "
        "no longer all there, so a dropped send and one written then deleted by retention cannot be told apart",
        evidence,
    )


def _window(entry: LedgerEntry) -> str:
    start = ms_to_iso(entry.ts_ms) or "an unknown time"
    end = ms_to_iso(entry.to_ms)
    return f"between {start} and {end}" if end and end != start else f"at {start}"


def _partitions_since(
    view: ClusterView, from_ms: int | None, to_ms: int | None, after: tuple[str, int] | None = None
) -> str:
    """Where the topic's partitions stand against a record produced between from_ms and to_ms
    whose partition is unknown: `complete` (every partition that ever had records still holds
    everything since from_ms), `deleted` (none holds records that old: each has lost everything
    up to past to_ms, or its first record is a later sequence of `after`'s producer session,
    which wrote its records to each partition in order) or `mixed`."""
    kinds = set()
    for state in view.partitions.values():
        if state.high == 0:
            continue  # never had a record
        oldest = view.partition_complete_since_ms(state)
        if from_ms is not None and _complete(oldest, from_ms):
            kinds.add("complete")
        elif state.low > 0 and (
            state.low >= state.high
            or (after is not None and state.low_audit is not None and _later_of_session(state.low_audit, after))
            or (
                state.low_timestamp_ms is not None
                and to_ms is not None
                and state.low_timestamp_ms > to_ms + COMPLETENESS_SLACK_MS
            )
        ):
            kinds.add("deleted")
        else:
            kinds.add("mixed")
    if kinds == {"complete"} or not kinds:
        return "complete"
    return "deleted" if kinds == {"deleted"} else "mixed"


def _later_of_session(head: tuple[str, int], record: tuple[str, int]) -> bool:
    return head[0] == record[0] and head[1] > record[1]


def _acked_unplaced(entry: LedgerEntry, view: ClusterView, evidence: dict[str, Any]) -> Diagnosis:
    """Acked (contract v2: in a range, position unknown) and not in the topic."""
    acked = (
        f"acked {_window(entry)} (sequence {entry.seq} of producer session {entry.session}; contract v2 ledgers "
        "no partition or offset)"
    )
    where = _partitions_since(
        view, entry.ts_ms, entry.to_ms if entry.to_ms is not None else entry.ts_ms, (entry.session, entry.seq)
    )
    evidence["acked_window"] = {"from": ms_to_iso(entry.ts_ms), "to": ms_to_iso(entry.to_ms)}
    if where == "complete":
        compacted = _compacted_since(view, entry.to_ms if entry.to_ms is not None else entry.ts_ms, evidence)
        if compacted is not None:
            return Diagnosis(
                "unknown",
                f"{acked} and not in {view.topic}; {compacted}: broker-lost and compacted away cannot be told apart",
                evidence,
            )
        return Diagnosis(
            "broker-lost",
            f"{acked}, but no partition of {view.topic} has a record with this key although each still holds "
            "everything produced since then: lost on the broker side, e.g. truncated by an unclean leader election",
            evidence,
        )
    if where == "mixed":
        return Diagnosis(
            "unknown",
            f"{acked} and not in {view.topic}; some partitions no longer hold records that old and the ledger does "
            "not say which partition it went to: broker-lost and deleted by retention cannot be told apart",
            evidence,
        )
    deleted = f"{acked}, since deleted: no partition of {view.topic} holds records that old any more"
    if view.groups_error:
        return Diagnosis("unknown", f"{deleted}; the groups' offsets could not be read: {view.groups_error}", evidence)
    if not view.groups:
        return Diagnosis("unknown", f"{deleted}; the binding names no consumer groups", evidence)
    outcomes = [_unplaced_group_outcome(entry, group, view, deleted) for group in view.groups.values()]
    return _combine(outcomes, evidence)


def _unplaced_group_outcome(entry: LedgerEntry, group: GroupState, view: ClusterView, deleted: str) -> _Outcome:
    """Did `group` read a record now deleted whose partition and offset are unknown?

    Expired when it cannot have: it never committed an offset of the topic; or its consumer
    is probed, the consumer ledger is complete since the record was produced, and no mark at
    an offset now below its partition's log start is that recent (reading the record would
    have left one: its offset is below the log start of whichever partition it went to)."""
    info: dict[str, Any] = {"group": group.group, "committed": dict(group.committed), "members": group.members}
    if not any(c is not None for c in group.committed.values()):
        return _Outcome("expired", f"{deleted}, and group {group.group} has never committed an offset of it", info)
    ledger = view.consumer_ledger
    if ledger is None or not ledger.available or group.marks_on_topic == 0:
        why = ledger.reason if ledger is not None and not ledger.available else "its consumer is not probed"
        return _Outcome(
            "unknown",
            f"{deleted}; whether group {group.group} read it before cannot be told ({why or 'no consumer ledger'}, "
            "and contract v2 ledgers no position)",
            info,
        )
    produced = entry.ts_ms
    if produced is None or not _complete(ledger.complete_since_ms, produced):
        return _Outcome(
            "unknown",
            f"{deleted}; the consumer ledger {ledger.topic} no longer holds marks that old, so whether group "
            f"{group.group} read it cannot be told",
            info,
        )
    first = group.first_mark_ms
    if first is None or first > produced:
        return _Outcome(
            "unknown",
            f"{deleted}; group {group.group} first marked a record of {view.topic} processed at {ms_to_iso(first)}, "
            "after it was produced: it may have read it before its consumer was probed",
            info,
        )
    last = group.last_mark_below_low_ms
    info["last_mark_below_log_start_at"] = ms_to_iso(last)
    if last is None or last < produced:
        since = f"since {ms_to_iso(last)}" if last is not None else "ever"
        return _Outcome(
            "expired",
            f"{deleted} before group {group.group} read it: its consumer marked no record of the deleted part of "
            f"any partition after it was produced (the last such mark: {since})",
            info,
        )
    return _Outcome(
        "unknown",
        f"{deleted}; group {group.group} processed records of the deleted part after it was produced "
        f"(at {ms_to_iso(last)}), and contract v2 ledgers no position to tell whether it was one of them",
        info,
    )


def _sent_unplaced(entry: LedgerEntry, view: ClusterView, evidence: dict[str, Any]) -> Diagnosis:
    """Sent (contract v2), never confirmed (acks=0, a failure window, or the unresolved tail a
    crash leaves), partition unknown, and not in the topic."""
    sent = (
        f"sent {_window(entry)} (sequence {entry.seq} of producer session {entry.session}) and never confirmed by "
        "the broker (acks=0, a failed send, or a producer that stopped before its reports came)"
    )
    compacted = _compacted_since(view, entry.to_ms if entry.to_ms is not None else entry.ts_ms, evidence)
    if compacted is not None:
        return Diagnosis("unknown", f"{sent}; not in {view.topic}; {compacted}", evidence)
    if _partitions_since(view, entry.ts_ms, entry.to_ms) == "complete":
        return Diagnosis(
            "produce-failed",
            f"{sent}; no partition of {view.topic} has a record with this key although each still holds everything "
            "since then: the send never reached the log",
            evidence,
        )
    return Diagnosis(
        "unknown",
        f"{sent}; not in {view.topic}, whose partitions no longer all hold records that old: a dropped send and "
        "one written then deleted by retention cannot be told apart",
        evidence,
    )


def _unprobed_below(group: GroupState, topic: str, partition: int, offset: int) -> str | None:
    """Why the group may have read `offset` before its consumer was probed (no processed mark
    there to expect), or None: records below the group's first processed mark on a partition
    may have been consumed by the application before it was wrapped (the auditor adopted on a
    running pipeline), and a plain consumer leaves no mark."""
    first = group.first_mark.get(partition)
    if first is None:
        return f"its consumer marked no record of {topic}/{partition} processed (it may not be probed there)"
    if offset < first:
        return (
            f"its first processed mark on {topic}/{partition} is at offset {first}: it may have read the records "
            "below that before its consumer was probed"
        )
    return None


def _complete(since_ms: int | None, created_ms: int) -> bool:
    return since_ms is not None and (since_ms == 0 or since_ms + COMPLETENESS_SLACK_MS <= created_ms)


def _deleted(
    row: StuckRow,
    partition: int,
    offset: int,
    how: str,
    state: PartitionState,
    marks: MarkIndex,
    view: ClusterView,
    evidence: dict[str, Any],
    written_ms: int | None,
    unclear_until: int | None = None,
    unclear_why: str = "",
) -> Diagnosis:
    """Written at an offset below today's log start: retention or delete-records removed it.
    Past `unclear_until` (marks_unclear_until: the record was written after it), marks made
    up to then at its partition's rewritten offsets may be of records the broker lost."""
    where = f"{view.topic}/{partition}@{offset}"
    if view.groups_error:
        return Diagnosis(
            "unknown",
            f"{how} {where}, since deleted; the groups' offsets could not be read: {view.groups_error}",
            evidence,
        )
    if not view.groups:
        return Diagnosis(
            "unknown",
            f"{how} {where}, since deleted (log start {state.low}); the binding names no consumer groups",
            evidence,
        )
    ledger = view.consumer_ledger
    outcomes = []
    for group in view.groups.values():
        info = _group_info(group, partition)
        mark = _counted_mark(marks.get((group.group, partition, offset)), unclear_until)
        committed = group.committed.get(partition)
        if mark is not None:
            info["processed"] = mark.as_json()
            outcomes.append(
                _Outcome(
                    "processed",
                    f"processed by group {group.group} from {where} ({mark.describe(with_time=False)}) but the "
                    f"row is still {row.status}: the update after processing failed",
                    info,
                )
            )
        elif committed is None or committed <= offset:
            outcomes.append(
                _Outcome(
                    "expired",
                    f"{how} {where}, deleted by retention or delete-records (log start now {state.low}) before "
                    f"group {group.group} reached it (committed {committed})",
                    info,
                )
            )
        elif ledger is None or not ledger.available or group.marks_on_topic == 0:
            why = ledger.reason if ledger is not None and not ledger.available else "its consumer is not probed"
            outcomes.append(
                _Outcome(
                    "unknown",
                    f"{how} {where}, since deleted; group {group.group} committed past it ({committed}) and whether "
                    f"it processed it cannot be told ({why or 'no consumer ledger'})",
                    info,
                )
            )
        elif written_ms is None or not _complete(ledger.complete_since_ms, written_ms):
            # its mark may have gone with the ledger's oldest records, the later ones' not
            outcomes.append(
                _Outcome(
                    "unknown",
                    f"{how} {where}, since deleted; group {group.group} committed past it ({committed}), and the "
                    f"consumer ledger {ledger.topic} no longer holds marks that old: whether it processed it cannot "
                    "be told",
                    info,
                )
            )
        elif unprobed := _unprobed_below(group, view.topic, partition, offset):
            outcomes.append(
                _Outcome(
                    "unknown",
                    f"{how} {where}, since deleted; group {group.group} committed past it ({committed}), but "
                    f"{unprobed}: whether it processed it cannot be told",
                    info,
                )
            )
        elif group.max_mark_below_low.get(partition, -1) > offset and unclear_until is not None:
            outcomes.append(
                _Outcome(
                    "unknown",
                    f"{how} {where}, since deleted; group {group.group} committed past it ({committed}) and marked "
                    f"records past it processed, but {unclear_why}: those marks may be of records the broker lost",
                    info,
                )
            )
        elif group.max_mark_below_low.get(partition, -1) > offset:
            info["processed_after_it"] = group.max_mark_below_low[partition]
            outcomes.append(
                _Outcome(
                    "skipped",
                    f"group {group.group} processed later records of partition {partition} while they were in "
                    f"the log but not {where}, and committed past it: committed before processing (the record has "
                    "since been deleted)",
                    info,
                )
            )
        else:
            outcomes.append(
                _Outcome(
                    "expired",
                    f"{how} {where}, deleted (log start now {state.low}); group {group.group} resumed past it "
                    f"(committed {committed}) without reading it: the log start moved past it before the group "
                    "reached it",
                    info,
                )
            )
    return _combine(outcomes, evidence)


# --- helpers --------------------------------------------------------------------------------


def _counted_mark(mark: ProcessedMark | None, unclear_until: int | None) -> ProcessedMark | None:
    """The mark at a position that is of the record there now: where marks up to
    `unclear_until` may be of a gone record that held the offset (marks_unclear_until), the
    latest mark there if it was made after that, else none."""
    if unclear_until is None or mark is None or (mark.ts_ms or 0) > unclear_until:
        return mark
    later = mark.latest()
    return later if (later.ts_ms or 0) > unclear_until else None


def _combine(outcomes: list[_Outcome], evidence: dict[str, Any]) -> Diagnosis:
    evidence["groups"] = [o.group | {"outcome": o.kind} for o in outcomes]
    best = min(outcomes, key=lambda o: _PRIORITY.index(o.kind))
    return Diagnosis(_VERDICT_OF[best.kind], best.reason, evidence)


def _place(
    evidence: dict[str, Any], partition: int, offset: int, state: PartitionState | None, view: ClusterView
) -> None:
    evidence["partition"] = partition
    evidence["offset"] = offset
    if state is not None:
        evidence["log"] = state.as_json()
    evidence["retention_ms"] = view.retention_ms


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "? s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
