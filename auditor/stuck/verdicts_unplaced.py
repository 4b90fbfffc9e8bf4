"""Verdict rule 4 for contract v2 ledger entries, which name no partition or offset: acked or
sent, and not in the topic."""

from __future__ import annotations

from typing import Any

from auditor.stuck.evidence import (
    ClusterView,
    Diagnosis,
    GroupState,
    LedgerEntry,
    ms_to_iso,
)
from auditor.stuck.held_watermark import held_back
from auditor.stuck.verdict_outcomes import COMPLETENESS_SLACK_MS, Outcome, combine, compacted_since, complete, no_commit
from spark_jobs import send_outcome


def may_be_in_flight(last_sent_ms: int | None, view: ClusterView) -> bool:
    """Whether a send never confirmed may still be written: sent less than the send outcome
    bound ago (a producer retries it, through a leader failover, for up to its message
    timeout: view.send_outcome_ms)."""
    return last_sent_ms is None or last_sent_ms > send_outcome.judged_until_ms(view.now_ms, view.send_outcome_ms)


def in_flight(view: ClusterView) -> str:
    return (
        "a send that recent may still be written (a producer retries it for up to its message timeout: "
        f"{send_outcome.describe(view.send_outcome_ms)})"
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
        if from_ms is not None and complete(oldest, from_ms):
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


def _emptied_partition(view: ClusterView) -> bool:
    """Whether a partition that had records holds none below its high watermark now: a record
    beyond it (held back) is no older than anything deleted there."""
    return any(0 < state.high <= state.low for state in view.partitions.values())


def _later_of_session(head: tuple[str, int], record: tuple[str, int]) -> bool:
    return head[0] == record[0] and head[1] > record[1]


def acked_unplaced(entry: LedgerEntry, view: ClusterView, evidence: dict[str, Any]) -> Diagnosis:
    """Acked (contract v2: in a range, position unknown) and not in the topic."""
    acked = (
        f"acked {_window(entry)} (sequence {entry.seq} of producer session {entry.session}; contract v2 ledgers "
        "no partition or offset)"
    )
    where = _partitions_since(view, entry.ts_ms, entry.produced_by_ms, (entry.session, entry.seq))
    evidence["acked_window"] = {"from": ms_to_iso(entry.ts_ms), "to": ms_to_iso(entry.to_ms)}
    if where == "complete" or (where == "deleted" and _emptied_partition(view)):
        # Not in the log up to any partition's high watermark: an ack given by a leader alone
        # may be of a record it still holds beyond it (the v1 ack's check, position unknown).
        held = held_back(view, None, entry.session, entry.acked_no_later_ms, evidence)
        if held is not None:
            return Diagnosis(
                "unknown",
                f"{acked} and not in {view.topic} up to the high watermarks this diagnosis read, but {held}",
                evidence,
            )
    if where == "complete":
        compacted = compacted_since(view, entry.produced_by_ms, evidence)
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
    return combine(outcomes, evidence)


def _unplaced_group_outcome(entry: LedgerEntry, group: GroupState, view: ClusterView, deleted: str) -> Outcome:
    """Did `group` read a record now deleted whose partition and offset are unknown?

    Expired when it cannot have: it never committed an offset of the topic, and the record is
    younger than the offsets a group commits are kept (verdict_outcomes.no_commit); or its
    consumer is probed, the consumer ledger is complete since the record was produced, and no mark at
    an offset now below its partition's log start is that recent (reading the record would
    have left one: its offset is below the log start of whichever partition it went to)."""
    info: dict[str, Any] = {"group": group.group, "committed": dict(group.committed), "members": group.members}
    if not any(c is not None for c in group.committed.values()):
        if group.seen:  # it had committed offsets of the topic, gone since
            info["seen_commits"] = {str(p): seen.to_json() for p, seen in sorted(group.seen.items())}
            return Outcome(
                "unknown",
                f"{deleted}; group {group.group} has no committed offset of it now, but reconciliation runs saw it "
                f"commit on partition(s) {', '.join(str(p) for p in sorted(group.seen))} (deleted or expired since), "
                "and the ledger does not say which partition the record went to: whether the group read it cannot "
                "be told",
                info,
            )
        unsure = no_commit(group, None, entry.ts_ms, view, info)
        if unsure is not None:
            return Outcome("unknown", f"{deleted}; {unsure}", info)
        return Outcome("expired", f"{deleted}, and group {group.group} has never committed an offset of it", info)
    ledger = view.consumer_ledger
    if ledger is None or not ledger.available or group.marks_on_topic == 0:
        why = ledger.reason if ledger is not None and not ledger.available else "its consumer is not probed"
        return Outcome(
            "unknown",
            f"{deleted}; whether group {group.group} read it before cannot be told ({why or 'no consumer ledger'}, "
            "and contract v2 ledgers no position)",
            info,
        )
    produced = entry.ts_ms
    if produced is None or not complete(ledger.complete_since_ms, produced):
        return Outcome(
            "unknown",
            f"{deleted}; the consumer ledger {ledger.topic} no longer holds marks that old, so whether group "
            f"{group.group} read it cannot be told",
            info,
        )
    first = group.first_mark_ms
    if first is None or first > produced:
        return Outcome(
            "unknown",
            f"{deleted}; group {group.group} first marked a record of {view.topic} processed at {ms_to_iso(first)}, "
            "after it was produced: it may have read it before its consumer was probed",
            info,
        )
    last = group.last_mark_below_low_ms
    info["last_mark_below_log_start_at"] = ms_to_iso(last)
    if last is None or last < produced:
        since = f"since {ms_to_iso(last)}" if last is not None else "ever"
        return Outcome(
            "expired",
            f"{deleted} before group {group.group} read it: its consumer marked no record of the deleted part of "
            f"any partition after it was produced (the last such mark: {since})",
            info,
        )
    return Outcome(
        "unknown",
        f"{deleted}; group {group.group} processed records of the deleted part after it was produced "
        f"(at {ms_to_iso(last)}), and contract v2 ledgers no position to tell whether it was one of them",
        info,
    )


def sent_unplaced(entry: LedgerEntry, view: ClusterView, evidence: dict[str, Any]) -> Diagnosis:
    """Sent (contract v2), never confirmed (acks=0, a failure window, or the unresolved tail a
    crash leaves), partition unknown, and not in the topic."""
    sent = (
        f"sent {_window(entry)} (sequence {entry.seq} of producer session {entry.session}) and never confirmed by "
        "the broker (acks=0, a failed send, or a producer that stopped before its reports came)"
    )
    last_sent_ms = entry.produced_by_ms
    if may_be_in_flight(last_sent_ms, view):
        return Diagnosis("unknown", f"{sent}; not in {view.topic} yet, but {in_flight(view)}", evidence)
    compacted = compacted_since(view, last_sent_ms, evidence)
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
