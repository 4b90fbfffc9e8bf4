"""Verdict rules 4 and 5 (verdicts.py) when records with the item's key were written and the
topic no longer holds any of them: acked by a producer (contract v1 ledger entries, with their
position) or seen by reconciliation runs. One verdict per record, and which of them the item
gets.

A producer's retry or an application's re-send leaves several records with one key. The
item reached the consumer if any of them did, so each is judged on its own (as an acked or
seen record that is gone: verdicts_absent) and the copies are weighed by how far the item
got: a copy processed settles it (processed-not-updated, whatever became of the others);
otherwise a copy whose fate is unknown may have been the processed one (unknown); otherwise
the copy that got furthest names the failure: committed past unprocessed (skipped) before
deleted before the group reached it (expired) before lost by the broker (broker-lost), as a
re-send that went further makes up for the copy before it.

A record both acked and seen is judged both ways (the ack may be held back behind the high
watermark, the sighting may be of a topic since deleted): the two differ only where one of
them cannot tell, and the furthest, the one that cannot, counts for its position.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from auditor.stuck.evidence import (
    ClusterView,
    Diagnosis,
    KeyMemory,
    KeySightings,
    LedgerEntry,
    LocatedRecord,
    Sighting,
    ms_to_iso,
)
from auditor.stuck.verdict_outcomes import MAX_LISTED

# A judge of one record written at (partition, offset) and gone: verdicts_absent._written_then_gone
# with the row, marks and view bound (partition, offset, how, evidence, written_ms, acked_by:
# the producer's ledger entry of its ack, None for a sighting).
GoneJudge = Callable[[int, int, str, dict[str, Any], int | None, LedgerEntry | None], Diagnosis]

# A record with the key: acked by a producer session (its ledger entry), seen by a run, or
# read by a run only in an aborted transaction (a LocatedRecord in state aborted, from KeyMemory).
Copy = LedgerEntry | Sighting | LocatedRecord

# How far a copy got, furthest first; any other verdict counts as unknown. An aborted copy
# never reached a read_committed consumer: any other gets further.
COPY_PRIORITY = ("processed-not-updated", "unknown", "skipped", "expired", "broker-lost", "aborted")


def from_copies(
    acked: Sequence[LedgerEntry],
    seen: KeySightings | None,
    view: ClusterView,
    evidence: dict[str, Any],
    judge: GoneJudge,
    aborted: Sequence[LocatedRecord] = (),
    memory: KeyMemory | None = None,
) -> Diagnosis:
    """The item's verdict from every record with its key that a producer acked at a position
    (`acked`), runs saw (`seen`) or runs read only in aborted transactions (`aborted`); at
    least one of them. memory: what runs saw of the producer sessions (aborting_sessions)."""
    copies: list[Copy] = [*acked, *(seen.copies if seen is not None else ()), *aborted]
    unplaced = seen.unplaced if seen is not None else 0
    # A run that read a record only in an aborted transaction settles its ack, unless a run
    # also saw a record at its offset committed (rewritten since: the two tell nothing).
    committed = frozenset((c.partition, c.offset) for c in copies if isinstance(c, Sighting))
    recalled = _Recalled(
        tuple(a for a in aborted if (a.partition, a.offset) not in committed),
        memory.aborting_sessions if memory is not None else {},
        committed,
    )
    judged = [(copy, _copy_verdict(copy, view, dict(evidence), judge, recalled)) for copy in copies]
    # per position (one record, acked and seen), the furthest of its verdicts
    positions: dict[tuple[int, int], tuple[Copy, Diagnosis]] = {}
    for copy, diagnosis in judged:
        at = positions.get((copy.partition, copy.offset))
        if at is None or _rank(diagnosis.verdict) < _rank(at[1].verdict):
            positions[(copy.partition, copy.offset)] = (copy, diagnosis)
    best_copy, best = min(positions.values(), key=lambda j: _rank(j[1].verdict))
    if len(judged) == 1 and not unplaced:
        return best
    result = dict(best.evidence)
    # Every copy, not MAX_LISTED: a second look at the consumer ledger goes by their verdicts.
    result["copies"] = [{**_copy_json(c), "verdict": d.verdict, "groups": d.evidence.get("groups")} for c, d in judged]
    result["copies_seen"] = len(positions) + unplaced
    if len(positions) == 1 and not unplaced:  # one record, acked and seen
        return Diagnosis(best.verdict, best.reason, result)
    listed = ", ".join(f"{p}@{o} {d.verdict}" for (p, o), (_, d) in list(positions.items())[:MAX_LISTED])
    more = f" and {len(positions) - MAX_LISTED} more" if len(positions) > MAX_LISTED else ""
    summary = f"{_found_by(acked, seen)} {len(positions) + unplaced} records with this key ({listed}{more}"
    if unplaced:
        summary += f"; where the other {unplaced} were is not kept"
    summary += ")"
    if best.verdict != "processed-not-updated" and unplaced:
        return Diagnosis(
            "unknown",
            f"{summary}: one of those whose place is not known may have been processed, so {best.verdict} cannot be "
            "concluded",
            result,
        )
    if _rank(best.verdict) == COPY_PRIORITY.index("unknown"):
        return Diagnosis("unknown", f"{best.reason}; {summary}: that one may have been the copy processed", result)
    where = f"{best_copy.partition}@{best_copy.offset}"
    return Diagnosis(best.verdict, f"{best.reason}; {summary}, the one at {where} got furthest", result)


def _copy_json(copy: Copy) -> dict[str, Any]:
    return copy.aborted_json() if isinstance(copy, LocatedRecord) else copy.as_json()


def _found_by(acked: Sequence[LedgerEntry], seen: KeySightings | None) -> str:
    """Who wrote down the copies: "producer session s1 acked and reconciliation run r1 saw"."""
    said = []
    if acked:
        sessions = sorted({e.session for e in acked})
        said.append(f"producer session{'s' if len(sessions) > 1 else ''} {', '.join(sessions)} acked")
    if seen is not None and seen.copies:
        runs = sorted({s.run_id for s in seen.copies if s.run_id})
        said.append(
            f"reconciliation run{'s' if len(runs) > 1 else ''} {', '.join(runs)} saw"
            if runs
            else "reconciliation runs saw"
        )
    return " and ".join(said) or "reconciliation runs saw"


@dataclass(frozen=True)
class _Recalled:
    """What runs saw that bears on the item's acks (from_copies builds it once for them all).

    aborted: the records runs read only in aborted transactions, at positions no run saw a
    committed record at; aborting: the producer sessions runs read such records of (session ->
    a run that did); committed: the positions runs saw a record with the key at
    (read_committed: a transaction there committed)."""

    aborted: tuple[LocatedRecord, ...]
    aborting: Mapping[str, str | None]
    committed: frozenset[tuple[int, int]]


def _copy_verdict(
    copy: Copy, view: ClusterView, evidence: dict[str, Any], judge: GoneJudge, recalled: _Recalled
) -> Diagnosis:
    """One copy's verdict."""
    if isinstance(copy, LocatedRecord):
        return _aborted(copy, None, view, evidence)
    if isinstance(copy, LedgerEntry):
        read_aborted = next((a for a in recalled.aborted if a.is_of(copy)), None)
        if read_aborted is not None:
            return _aborted(read_aborted, copy, view, evidence)
        aborting = recalled.aborting
        transactional = copy.session in view.transactional_sessions or copy.session in aborting
        if transactional and (copy.partition, copy.offset) not in recalled.committed:
            # A transactional producer's ack says the broker wrote the record, not that its
            # transaction committed: records of an aborted one are acked too.
            evidence["transactional_session"] = copy.session
            if copy.session in view.transactional_sessions:
                known = f"the transactional producer session {copy.session}"
            else:
                run = aborting.get(copy.session)
                evidence["aborted_records_seen_by_run"] = run
                who = f"reconciliation run {run}" if run else "a reconciliation run"
                known = (
                    f"producer session {copy.session}, transactional ({who} read records of it in aborted "
                    "transactions, none of them this one)"
                )
            return Diagnosis(
                "unknown",
                f"acked at {view.topic}/{copy.partition}@{copy.offset} by {known}, and not in the topic now: the "
                "records of an aborted transaction are acked too, and no reconciliation run read this one, so "
                "whether it was committed (then lost or deleted) or aborted cannot be told",
                evidence,
            )
        if view.clients_unread is not None and (copy.partition, copy.offset) not in recalled.committed:
            # The clients topic is what says a v1 session is transactional: unread, this one
            # may be, and its record of an aborted transaction.
            evidence["clients_unread"] = view.clients_unread
            return Diagnosis(
                "unknown",
                f"acked at {view.topic}/{copy.partition}@{copy.offset} by producer session {copy.session}, and not "
                f"in the topic now; but {view.clients_unread}, so whether the session is transactional (the "
                "records of an aborted transaction are acked too) is not known, and no reconciliation run read "
                "this one: committed (then lost or deleted) or aborted cannot be told",
                evidence,
            )
        return judge(copy.partition, copy.offset, "acked at", evidence, copy.ts_ms, copy)
    evidence["seen"] = copy.as_json()
    run = f"reconciliation run {copy.run_id}" if copy.run_id else "a reconciliation run"
    how = f"seen by {run} at"
    if copy.deleted_topic_until_ms is not None:
        # Its offset now holds the new topic's records: nothing there says what became of it.
        since = ms_to_iso(copy.deleted_topic_until_ms)
        evidence["topic_recreated"] = f"the new topic's records are stamped since {since}"
        return Diagnosis(
            "unknown",
            f"{how} {view.topic}/{copy.partition}@{copy.offset} in the topic a later run found deleted and "
            f"created again (its records are stamped before {since}, the new topic's first record): it went with "
            "the deleted topic; lost, deleted, consumed or not cannot be told",
            evidence,
        )
    return judge(copy.partition, copy.offset, how, evidence, copy.ts_ms, None)


def _aborted(copy: LocatedRecord, acked: LedgerEntry | None, view: ClusterView, evidence: dict[str, Any]) -> Diagnosis:
    """A record a run read only in an aborted transaction, gone from the topic since."""
    evidence["aborted_seen"] = copy.aborted_json()
    run = f"reconciliation run {copy.run_id}" if copy.run_id else "a reconciliation run"
    by = f"acked by producer session {acked.session}, then " if acked is not None else ""
    return Diagnosis(
        "aborted",
        f"{by}read by {run} at {view.topic}/{copy.partition}@{copy.offset} only in an aborted transaction, "
        "since deleted: read_committed consumers never saw it",
        evidence,
    )


def _rank(verdict: str) -> int:
    return COPY_PRIORITY.index(verdict) if verdict in COPY_PRIORITY else COPY_PRIORITY.index("unknown")
