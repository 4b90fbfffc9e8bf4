"""Verdict rules 4-8 (verdicts.py) when no record with the item's key is in the topic: what the
producer ledger, the auditor's memory and the topic's history say happened to it."""

from __future__ import annotations

from typing import Any

from auditor.probes.codec import ACKED, ACKED_RANGE, NOT_PERSISTED, SENT, UNCONFIRMED, delivery_status
from auditor.stuck.evidence import (
    ClusterView,
    Diagnosis,
    KeyMemory,
    KeySightings,
    LedgerEntry,
    LedgerView,
    LocatedRecord,
    PartitionState,
    StuckRow,
    iso_to_ms,
    ms_to_iso,
)
from auditor.stuck.held_watermark import held_back
from auditor.stuck.untraced import untraced_producer
from auditor.stuck.verdict_outcomes import (
    COMPLETENESS_SLACK_MS,
    MarkIndex,
    Outcome,
    by_session,
    combine,
    committed_by,
    compacted_since,
    complete,
    counted_mark,
    group_info,
    judged_by,
    leader_changed_since,
    lost_mark,
    no_commit,
    passing_commit,
    place,
    standing,
    unprobed_below,
)
from auditor.stuck.verdicts_memory import COPY_PRIORITY, GoneJudge, from_copies
from auditor.stuck.verdicts_unplaced import acked_unplaced, in_flight, may_be_in_flight, sent_unplaced
from spark_jobs.send_outcome import UNBOUNDED


def _acked_at_positions(entries: list[LedgerEntry], view: ClusterView) -> list[LedgerEntry]:
    """The entries acked at a position (contract v1), where the producer ledger is readable."""
    ledger = view.producer_ledger
    if ledger is None or not ledger.available:
        return []
    return [e for e in entries if delivery_status(e.status, e.offset) == ACKED]


def _gone_judge(row: StuckRow, marks: MarkIndex, view: ClusterView) -> GoneJudge:
    """_written_then_gone for the row's records, as verdicts_memory.from_copies takes it."""
    return lambda partition, offset, how, evidence, written_ms, acked_by: _written_then_gone(
        row, partition, offset, how, marks, view, evidence, written_ms, acked_by
    )


def with_gone_copies(
    row: StuckRow,
    found: Diagnosis,
    located: list[LocatedRecord],
    entries: list[LedgerEntry],
    marks: MarkIndex,
    view: ClusterView,
    memory: KeyMemory,
) -> Diagnosis:
    """The verdict `found` of an item with a record in the topic (verdicts_consumer), weighed
    with its copies that are gone: records with its key a producer acked at a position, or runs
    saw, that the topic no longer has (an earlier send deleted since, a copy the broker lost),
    each judged as not_in_topic judges such a record (verdicts_memory).

    The item reached its consumer if any copy did: a gone copy processed settles it
    (processed-not-updated) whatever the record in the topic waits for. Where the record in the
    topic was committed past unprocessed (skipped), a gone copy whose fate is not known may have
    been the one processed (unknown). Otherwise `found` stands, the gone copies' verdicts in its
    evidence (`copies`: a second look at the consumer ledger goes by them)."""
    if found.verdict == "processed":
        return found
    here = {(r.partition, r.offset) for r in located}
    acked = [e for e in _acked_at_positions(entries, view) if (e.partition, e.offset) not in here]
    seen = memory.sightings.get(row.key)
    gone_seen = tuple(c for c in seen.copies if (c.partition, c.offset) not in here) if seen is not None else ()
    if not acked and not gone_seen:
        return found
    gone = from_copies(
        acked,
        KeySightings(gone_seen) if gone_seen else None,
        view,
        {"topic": view.topic},
        _gone_judge(row, marks, view),
        _gone_aborted(row, memory, view),
        memory,
    )
    evidence = dict(found.evidence)
    evidence["copies"] = gone.evidence.get("copies") or [
        {**(acked[0].as_json() if acked else gone_seen[0].as_json()), "verdict": gone.verdict,
         "groups": gone.evidence.get("groups")}
    ]  # fmt: skip
    if gone.verdict == "processed-not-updated":
        return Diagnosis(
            gone.verdict,
            f"{gone.reason}; a later record with this key is in the topic ({found.verdict}: {found.reason})",
            {**evidence, "groups": gone.evidence.get("groups"), "in_topic": found.verdict},
        )
    if found.verdict == "skipped" and gone.verdict not in COPY_PRIORITY[COPY_PRIORITY.index("skipped") :]:
        return Diagnosis(
            "unknown",
            f"{found.reason}; but an earlier record with this key is gone and {gone.reason}: that one may have "
            "been processed",
            evidence,
        )
    return Diagnosis(found.verdict, found.reason, evidence)


def _gone_aborted(row: StuckRow, memory: KeyMemory, view: ClusterView) -> tuple[LocatedRecord, ...]:
    """The records with the row's key runs read only in aborted transactions that are below
    their partition's log start now: deleted (those the log still covers, the topic read
    shows). One in a partition the topic no longer has is left out: nothing says what it was."""
    return tuple(
        a
        for a in memory.aborted.get(row.key, ())
        if (state := view.partitions.get(a.partition)) is not None and a.offset < state.low
    )


def not_in_topic(
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
    acked = _acked_at_positions(entries, view)
    seen = memory.sightings.get(row.key)
    aborted = _gone_aborted(row, memory, view)
    if acked or seen is not None or aborted:
        # every record with the key a producer acked or a run saw (committed, or only in an
        # aborted transaction): the item got as far as the furthest of them
        return from_copies(acked, seen, view, evidence, _gone_judge(row, marks, view), aborted, memory)
    ranged = [e for e in entries if e.status == ACKED_RANGE] if ledger_readable else []
    if ranged:
        return acked_unplaced(ranged[-1], view, evidence)
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
    sent = [e for e in entries if e.status == SENT]
    if failed:
        # Every send of the key counts, not the latest alone: one the broker may have written
        # (an ack lost, a timeout after the write) may be the record retention deleted since,
        # and a re-send never confirmed may still be on its way.
        entry = failed[-1]
        why = f"the send failed ({entry.error or 'no error text'}; persisted: {entry.persisted})"
        for attempt in reversed(failed):
            if attempt.persisted == NOT_PERSISTED:
                continue
            # absent now proves no failure unless nothing that old was deleted
            gone = _written_maybe_deleted(attempt, view, evidence)
            if gone is not None:
                how = f"the send failed ({attempt.error or 'no error text'}; persisted: {attempt.persisted})"
                return Diagnosis("unknown", f"{how}, and the broker may have written it; {gone}", evidence)
        # Contract v2 also ledgers each failed send's sequence in an unconfirmed range (`sent`:
        # a failure report names no sequence): only more `sent` entries than failures show a
        # send that did not fail, whose fate is that of a send never confirmed.
        if len(sent) > len(failed):
            resent = sent_unplaced(sent[-1], view, evidence)
            if resent.verdict != "produce-failed":
                return Diagnosis(resent.verdict, f"{why}, but another send of it was {resent.reason}", evidence)
        if len(failed) > 1:
            why = (
                f"{len(failed)} sends failed (the last: {entry.error or 'no error text'}; persisted: {entry.persisted})"
            )
        return Diagnosis("produce-failed", f"{why} and no retry reached {view.topic}", evidence)
    if sent:
        return sent_unplaced(sent[-1], view, evidence)
    created_ms = _created_ms(row, evidence, view)
    unattributed = _unattributed_since(ledger, created_ms)
    if unattributed is not None:
        return Diagnosis("unknown", unattributed, evidence)
    topic_since = view.topic_complete_since_ms()
    evidence["topic_complete_since"] = ms_to_iso(topic_since) if topic_since else None
    evidence["ledger_complete_since"] = ms_to_iso(ledger.complete_since_ms) if ledger.complete_since_ms else None
    unprobed = _unprobed_producer(view, ledger.covers_topic_from_ms, evidence)
    miskeyed = _miskeyed_producer(view, ledger.covers_topic_from_ms, evidence)
    probed = (
        bool(ledger.entries_for_topic)
        and complete(ledger.covers_topic_from_ms, created_ms)
        and not unprobed
        and not miskeyed
    )
    incarnation = _before_incarnation(view, created_ms, evidence)
    if complete(topic_since, created_ms) and incarnation is None:
        note = (
            ""
            if probed
            else f" (the producer ledger has no entries for {view.topic} at all: its producer is not probed, "
            "so a failed send would look the same)"
            if not ledger.entries_for_topic
            else f" ({unprobed}, so the row's may be among them)"
            if unprobed
            else f" ({miskeyed})"
            if miskeyed
            else f" (the producer ledger speaks for {view.topic} only since "
            f"{ms_to_iso(ledger.covers_topic_from_ms)}: the row's producer may not have been probed)"
        )
        # a probed producer's ledger would hold the ack of a record lost since, unless a session
        # that never closed sent it after its last ledger flush (untraced); without one, the
        # topic's completeness is all there is, and a leader change or the log cleaner leaves no
        # trace in it
        if probed:
            untraced = untraced_producer(ledger, view, topic_since, created_ms, evidence)
            if untraced is not None:
                return Diagnosis("unknown", untraced, evidence)
        elif changed := leader_changed_since(view, created_ms, evidence) or compacted_since(view, created_ms, evidence):
            return Diagnosis(
                "unknown",
                f"no record with this key in {view.topic} and no producer-ledger entry{note}, but {changed}",
                evidence,
            )
        if held := _send_held(view, created_ms):
            return Diagnosis("unknown", held, evidence)
        return Diagnosis(
            "never-produced",
            f"no record with this key in {view.topic}, which still holds everything produced since before the "
            f"row was created, and no producer-ledger entry{note}",
            evidence,
        )
    evidence["ledger_covers_topic_from"] = ms_to_iso(ledger.covers_topic_from_ms)
    # The ledger's silence speaks only for rows created once a probed producer of the topic
    # ran: one created before may have been produced, and deleted since, unprobed.
    if probed and complete(ledger.complete_since_ms, created_ms):
        untraced = untraced_producer(ledger, view, topic_since, created_ms, evidence)
        if untraced is not None:
            return Diagnosis("unknown", untraced, evidence)
        if held := _send_held(view, created_ms):
            return Diagnosis("unknown", held, evidence)
        return Diagnosis(
            "never-produced",
            f"no producer-ledger entry for this key since the row was created (the ledger {ledger.topic} is "
            f"complete since then, and a probed producer of the topic ran since "
            f"{ms_to_iso(ledger.covers_topic_from_ms)}); "
            + (f"{view.topic} itself no longer holds records that old" if incarnation is None else incarnation),
            evidence,
        )
    return _from_missing_report(
        row,
        view,
        evidence,
        memory,
        (f"{unprobed}, whose records leave no ledger entry; " if unprobed else f"{miskeyed}; " if miskeyed else "")
        + (
            f"{view.topic} has deleted records, and when they were written is not known: {view.backdated_reason}"
            if view.backdated_reason and view.stamp_lag_ms is None
            else f"{view.topic} no longer holds records that old (oldest remaining record: "
            f"{ms_to_iso(topic_since) or 'unknown'})"
            if incarnation is None or not complete(topic_since, created_ms)
            else f"no record with this key in {view.topic}, but the row was created before {incarnation}"
        )
        + " and there is no ledger evidence for this key",
    )


def _before_incarnation(view: ClusterView, created_ms: int, evidence: dict[str, Any]) -> str | None:
    """Why the topic's completeness does not speak for a row created at `created_ms`: before
    its current incarnation is known to have existed (ClusterView.incarnation_since_ms), the
    row's record may have gone with a topic of the same name deleted since; None otherwise."""
    if not view.before_incarnation(created_ms):
        return None
    evidence["topic_known_since"] = ms_to_iso(view.incarnation_since_ms)
    return (
        view.incarnation_reason or f"{view.topic} is known to exist only since {ms_to_iso(view.incarnation_since_ms)}"
    )


def _send_held(view: ClusterView, created_ms: int) -> str | None:
    """Why a send of a row created less than the send outcome bound ago may still be on its way
    although nothing shows it, or None. A producer retries a refused send for up to its message
    timeout; one refused for minutes needs a partition the cluster refuses writes to, which is
    what a partition under min.insync.replicas is (NOT_ENOUGH_REPLICAS, for acks=all sends). A
    probed contract-v1 producer ledgers a send only once its report comes, an unprobed one
    never: the ledger's silence does not tell it. `created_ms` is the earliest the row can have
    been created (_created_ms); by a source clock found off, it may have been as much later."""
    created_ms += abs(view.source_clock_ahead_ms)
    if not may_be_in_flight(created_ms, view):
        return None
    if view.stalled:
        why = view.stalled[min(view.stalled)]
    elif view.stalled_error:
        why = f"whether a partition of {view.topic} refuses writes cannot be told ({view.stalled_error})"
    else:
        return None
    return (
        f"no record with this key in {view.topic} and no producer-ledger entry, but the row was created at "
        f"{ms_to_iso(created_ms)} and {why}: a send of it may be refused and retried still, and "
        f"{in_flight(view)}"
    )


CREATION_UNKNOWN = (
    "when the row was created is not known (the binding names no created column, and the rule's age column may "
    "be another time): it is taken as created before anything the topic and the ledgers hold"
)


def _created_ms(row: StuckRow, evidence: dict[str, Any], view: ClusterView) -> int:
    """When the row was created, from the binding's created column. Not known (no created
    column): 0, so that only a topic or ledger complete since its start speaks for it. The
    rule's age column may be updated_at or a status-since column, much later than the row's
    record. A source clock found ahead of the auditor's moves it back by as much; one behind
    leaves it: the earliest it can have been, where an application may stamp rows by its own
    clock (_send_held takes the latest)."""
    created_ms = iso_to_ms(row.created)
    evidence["row_created"] = ms_to_iso(created_ms) if created_ms is not None else None
    if created_ms is None:
        return 0
    if view.source_clock_ahead_ms > 0:
        # Stamped by a clock ahead of the auditor's (and, as far as the auditor can tell, of
        # Kafka's): the row was created that much earlier by the clocks records are stamped by.
        evidence["source_clock_ahead_ms"] = view.source_clock_ahead_ms
        return created_ms - view.source_clock_ahead_ms
    return created_ms


def _unprobed_producer(view: ClusterView, probed_from_ms: int | None, evidence: dict[str, Any]) -> str | None:
    """Why the producer ledger's silence does not speak for every producer of the topic: a
    record without any audit header was written since its first probed producer ran (or
    shortly before: timestamps are the producers' clocks). None when none was seen."""
    seen = view.unprobed_record_ms
    if seen is None or probed_from_ms is None or seen + COMPLETENESS_SLACK_MS < probed_from_ms:
        return None
    evidence["unprobed_record"] = ms_to_iso(seen)
    return (
        f"records without audit headers were written to {view.topic} since its probed producer started (the "
        f"latest stamped {ms_to_iso(seen)}): a producer that is not probed writes to it too"
    )


def _miskeyed_producer(view: ClusterView, probed_from_ms: int | None, evidence: dict[str, Any]) -> str | None:
    """Why the producer ledger's silence does not speak for the binding's keys: a record whose
    audit id is not its key by the binding's record_key (a probe without a key_fn on a binding
    keyed by a value field or a header ledgers its record keys) was written since the first
    probed producer of the topic ran. None when none was read."""
    seen = view.miskeyed_record_ms
    if seen is None or probed_from_ms is None or seen + COMPLETENESS_SLACK_MS < probed_from_ms:
        return None
    evidence["miskeyed_record"] = {"ts": ms_to_iso(seen), "session": view.miskeyed_session}
    by = f" by producer session {view.miskeyed_session}" if view.miskeyed_session else ""
    return (
        f"records whose audit id is not their key by the binding's record_key {view.record_key} were written to "
        f"{view.topic}{by} since its probed producer started (the latest stamped {ms_to_iso(seen)}): its probe "
        "ledgers them under other ids (no key_fn for this binding), so no ledger entry need name this key"
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
    acked_by: LedgerEntry | None = None,
) -> Diagnosis:
    """A record with the key was written at partition@offset (acked by producer session
    entry `acked_by`, or seen by a run) and is not in the topic now: truncated where the log still
    covers the offset, else deleted. Beyond the log end, an ack may be of a record the leader
    still holds above a high watermark held back (held_watermark); a sighting cannot."""
    state = view.partitions.get(partition)
    where = f"{view.topic}/{partition}@{offset}"
    if state is None:
        return Diagnosis("unknown", f"{how} {where}, a partition the topic no longer has", evidence)
    if view.recreated_until_ms is not None and not complete(view.recreated_until_ms, written_ms or 0):
        # That offset may be of the deleted topic: what it holds now says nothing of the record.
        evidence["topic_recreated"] = view.recreated_reason
        return Diagnosis(
            "unknown",
            f"{how} {where}, but {view.recreated_reason}: lost, deleted with the topic, consumed or not cannot be told",
            evidence,
        )
    place(evidence, partition, offset, state, view)
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
    if offset >= state.high and acked_by is not None:
        held = held_back(view, partition, acked_by.session, acked_by.acked_no_later_ms, evidence)
        if held is not None:
            return Diagnosis(
                "unknown",
                f"{how} {where}, beyond the log end at both of this diagnosis's reads (high watermark {state.high}, "
                f"then {end_now}), but {held}",
                evidence,
            )
    if offset >= state.low:
        compacted = compacted_since(view, written_ms, evidence)
        if compacted is not None:
            return Diagnosis(
                "unknown",
                f"{how} {where} and not in the topic now; {compacted}: broker-lost and compacted away cannot be told "
                "apart",
                evidence,
            )
        if view.topic_id_error is not None:
            # A topic deleted and created again since takes the offset again too; only its id
            # tells that from a truncation (as a reconciliation run refuses to publish then).
            evidence["topic_id_error"] = view.topic_id_error
            return Diagnosis(
                "unknown",
                f"{how} {where}, and the log has no record with this key there (log start {state.low}, high "
                f"watermark {state.high}); but the topic's id could not be read ({view.topic_id_error}): truncated "
                "by the broker or deleted with the topic, created again since, cannot be told apart",
                evidence,
            )
        if acked_by is not None and written_ms is not None and view.before_incarnation(written_ms):
            # The producer ledger names no topic id: an ack from before the topic's current
            # incarnation is known to have existed may be of a deleted one, whose offsets the new
            # log takes again. (A run's sighting is of an incarnation the auditor saw: its id was
            # read then, and a re-creation since is recreated_until_ms's.)
            evidence["topic_known_since"] = ms_to_iso(view.incarnation_since_ms)
            return Diagnosis(
                "unknown",
                f"{how} {where} at {ms_to_iso(written_ms)}, and the log has no record with this key there (log "
                f"start {state.low}, high watermark {state.high}); but {view.incarnation_reason}: truncated by the "
                "broker or gone with such a topic cannot be told apart",
                evidence,
            )
        return Diagnosis(
            "broker-lost",
            f"{how} {where}, but the log has no record with this key there (log start {state.low}, high "
            f"watermark {state.high}): lost on the broker side, e.g. truncated by an unclean leader election",
            evidence,
        )
    return _deleted(row, partition, offset, how, state, marks, view, evidence, written_ms)


def _from_missing_report(
    row: StuckRow, view: ClusterView, evidence: dict[str, Any], memory: KeyMemory, otherwise: str
) -> Diagnosis:
    """No ledger evidence: never-produced when a reconciliation run reported the row missing
    (it does so only while the topic held everything since the row was created) and the
    topic still holds everything produced since that run; else unknown, saying `otherwise`."""
    report = memory.missing.get(row.key)
    created_ms = _created_ms(row, evidence, view)
    if row.created is None:
        otherwise += f"; {CREATION_UNKNOWN}"
    unattributed = _unattributed_since(view.producer_ledger, created_ms)
    if report is not None:
        evidence["reported_missing"] = report.as_json()
        if unattributed is not None:
            return Diagnosis(
                "unknown", f"{unattributed}; reconciliation run {report.run_id} reported it missing", evidence
            )
        changed = leader_changed_since(view, created_ms, evidence) or compacted_since(
            view, created_ms, evidence, report.reported_at_ms
        )
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


def _written_maybe_deleted(entry: LedgerEntry, view: ClusterView, evidence: dict[str, Any]) -> str | None:
    """Why a record the broker may have written when `entry` was sent can be gone without a
    trace (compaction, or its partition, the whole topic where the entry names none, no
    longer holding everything since then); None when it cannot."""
    # a failed entry's time is its delivery report's, up to a message timeout after the send
    # (and the write): judge from that much earlier
    outcome = view.send_outcome_ms
    written_from = None if entry.ts_ms is None or outcome == UNBOUNDED else entry.ts_ms - outcome
    compacted = compacted_since(view, written_from, evidence)
    if compacted is not None:
        return compacted
    state = view.partitions.get(entry.partition)
    since = view.partition_complete_since_ms(state) if state is not None else view.topic_complete_since_ms()
    if written_from is not None and complete(since, written_from):
        return None
    where = f"{view.topic}/{entry.partition}" if state is not None else view.topic
    return f"{where} no longer holds everything since it was sent, so retention may have deleted it"


def _unconfirmed_absent(entry: LedgerEntry, view: ClusterView, evidence: dict[str, Any]) -> Diagnosis:
    """Sent with acks=0 and not in the topic: a send that may have been dropped.

    The broker never confirmed it, so its absence is never a broker-side loss. It is a
    failed produce only while its partition still holds everything since it was sent:
    otherwise retention could have removed it after it was written.
    """
    state = view.partitions.get(entry.partition)
    where = f"{view.topic}/{entry.partition}" if entry.partition >= 0 else view.topic
    sent = ms_to_iso(entry.ts_ms) or "an unknown time"
    if may_be_in_flight(entry.ts_ms, view):
        return Diagnosis(
            "unknown", f"sent with acks=0 at {sent} and not in {where} yet, but {in_flight(view)}", evidence
        )
    compacted = compacted_since(view, entry.ts_ms, evidence)
    if compacted is not None:
        return Diagnosis(
            "unknown", f"sent with acks=0 at {sent}, never confirmed, and not in {where}; {compacted}", evidence
        )
    if state is not None and entry.ts_ms is not None:
        oldest = view.partition_complete_since_ms(state)
        if complete(oldest, entry.ts_ms):
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
) -> Diagnosis:
    """Written at an offset below today's log start: retention or delete-records removed it.
    Where the offset was reused (marks_unclear_until), written before the bound it may have
    been lost instead; written after it, marks made up to the bound at its partition's
    rewritten offsets may be of records the broker lost."""
    where = f"{view.topic}/{partition}@{offset}"
    unclear_until, unclear_why = view.marks_unclear_until(partition, offset)
    if unclear_until is not None and not complete(unclear_until, written_ms or 0):
        # Past where reconciliation proved the partition survived a truncation, written before
        # the rewrite: lost with the rewritten part, or kept and deleted since.
        evidence["marks_unclear"] = unclear_why
        return Diagnosis(
            "unknown",
            f"{how} {where}, now below the log start {state.low}; but {unclear_why}, and it was written before "
            f"{ms_to_iso(unclear_until)}: lost with the rewritten part or deleted since cannot be told",
            evidence,
        )
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
        info = group_info(group, partition)
        mark = counted_mark(marks.get((group.group, partition, offset)), unclear_until)
        at = standing(group, partition, offset, present=False)
        committed = at.committed
        # a run saw the group's committed offset pass it while it was still in the log: not deleted unread
        seen = group.seen.get(partition)
        read_in_log = seen.passed_in_log(offset) if seen is not None else None
        past = judged_by(info, at) if mark is None else ""  # (a processed mark needs no position)
        if mark is not None:
            info["processed"] = mark.as_json()
            outcomes.append(
                Outcome(
                    "processed",
                    f"processed by group {group.group} from {where} ({mark.describe(with_time=False)}) but the "
                    f"row is still {row.status}: the update after processing failed",
                    info,
                )
            )
        elif committed is None and (gone := group.seen.get(partition)) is not None:
            # runs saw its offset short of the record, and it is gone since: it may have gone
            # on past the record before that, which no retention setting bounds
            info["seen_commits"] = gone.to_json()
            outcomes.append(
                Outcome(
                    "unknown",
                    f"{how} {where}, since deleted; group {group.group} has no committed offset there now, but "
                    f"reconciliation run {gone.latest.last_run} saw it at {gone.offset} ({ms_to_iso(gone.latest.seen_ms)})"
                    ": deleted or expired since, it may have gone past the record before, which cannot be told",
                    info,
                )
            )
        elif committed is None and (unsure := no_commit(group, partition, written_ms, view, info)) is not None:
            outcomes.append(Outcome("unknown", f"{how} {where}, since deleted; {unsure}", info))
        elif committed is None or committed <= offset:
            outcomes.append(
                Outcome(
                    "expired",
                    f"{how} {where}, deleted by retention or delete-records (log start now {state.low}) before "
                    f"group {group.group} reached it (committed {committed})",
                    info,
                )
            )
        elif ledger is None or not ledger.available or group.marks_on_topic == 0:
            why = ledger.reason if ledger is not None and not ledger.available else "its consumer is not probed"
            outcomes.append(
                Outcome(
                    "unknown",
                    f"{how} {where}, since deleted; group {group.group} committed past it ({past}) and whether "
                    f"it processed it cannot be told ({why or 'no consumer ledger'})",
                    info,
                )
            )
        elif written_ms is None or not complete(ledger.complete_since_ms, written_ms):
            # its mark may have gone with the ledger's oldest records, the later ones' not
            outcomes.append(
                Outcome(
                    "unknown",
                    f"{how} {where}, since deleted; group {group.group} committed past it ({past}), and the "
                    f"consumer ledger {ledger.topic} no longer holds marks that old: whether it processed it cannot "
                    "be told",
                    info,
                )
            )
        elif lost := lost_mark(group, view.topic, partition, offset):
            outcomes.append(
                Outcome(
                    "unknown",
                    f"{how} {where}, since deleted; group {group.group} committed past it ({past}), but {lost}: "
                    "whether it processed it cannot be told",
                    info,
                )
            )
        elif unprobed := unprobed_below(group, view.topic, partition, offset):
            outcomes.append(
                Outcome(
                    "unknown",
                    f"{how} {where}, since deleted; group {group.group} committed past it ({past}), but "
                    f"{unprobed}: whether it processed it cannot be told",
                    info,
                )
            )
        elif group.max_mark_below_low.get(partition, -1) > offset and unclear_until is not None:
            outcomes.append(
                Outcome(
                    "unknown",
                    f"{how} {where}, since deleted; group {group.group} committed past it ({past}) and marked "
                    f"records past it processed, but {unclear_why}: those marks may be of records the broker lost",
                    info,
                )
            )
        elif read_in_log is not None and (
            plain := committed_by(group, view.topic, partition, offset, info, passing_commit(group, partition, offset))
        ):
            outcomes.append(
                Outcome(
                    "unknown",
                    f"{how} {where}, since deleted; group {group.group} committed past it ({past}), but {plain}: "
                    "whether it processed it cannot be told",
                    info,
                )
            )
        elif read_in_log is not None:
            info["passed_in_log"] = read_in_log.to_json()
            if group.max_mark_below_low.get(partition, -1) > offset:
                info["processed_after_it"] = group.max_mark_below_low[partition]
            outcomes.append(
                Outcome(
                    "skipped",
                    f"{read_in_log.describe()} of partition {partition} of group {group.group} while they were in "
                    f"the log, {where} among them (the last at {ms_to_iso(read_in_log.seen_ms)}), and no consumer of "
                    f"the group processed it: the offset was committed before processing{by_session(info)} (the record "
                    "has since been deleted)",
                    info,
                )
            )
        elif group.max_mark_below_low.get(partition, -1) > offset:
            # Marks past it prove the group read on past its offset, not that the record was
            # still there then: a group down while retention deleted it resumes at the log
            # start, past it, and marks the records it reads there just the same.
            info["processed_after_it"] = group.max_mark_below_low[partition]
            outcomes.append(
                Outcome(
                    "unknown",
                    f"{how} {where}, since deleted (log start now {state.low}); group {group.group} committed past it "
                    f"({past}) and marked later records of partition {partition} processed (up to offset "
                    f"{group.max_mark_below_low[partition]}), but nothing shows the record was still in the log when "
                    "the group went past it: skipped (committed before processing) and expired (deleted before the "
                    "group reached it, the group reset to the log start) cannot be told apart",
                    info,
                )
            )
        else:
            outcomes.append(
                Outcome(
                    "expired",
                    f"{how} {where}, deleted (log start now {state.low}); group {group.group} resumed past it "
                    f"({past}) without reading it: the log start moved past it before the group "
                    "reached it",
                    info,
                )
            )
    return combine(outcomes, evidence)
