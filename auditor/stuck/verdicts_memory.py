"""Verdict rule 5 (verdicts.py) when reconciliation runs saw records with the item's key that
the topic no longer holds: one verdict per record seen, and which of them the item gets.

A producer's retry or an application's re-send leaves several records with one key. The
item reached the consumer if any of them did, so each is judged on its own (as an acked or
seen record that is gone: verdicts_absent) and the copies are weighed by how far the item
got: a copy processed settles it (processed-not-updated, whatever became of the others);
otherwise a copy whose fate is unknown may have been the processed one (unknown); otherwise
the copy that got furthest names the failure: committed past unprocessed (skipped) before
deleted before the group reached it (expired) before lost by the broker (broker-lost), as a
re-send that went further makes up for the copy before it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from auditor.stuck.evidence import ClusterView, Diagnosis, KeySightings, Sighting, ms_to_iso
from auditor.stuck.verdict_outcomes import MAX_LISTED

# A judge of one record written at (partition, offset) and gone: verdicts_absent._written_then_gone
# with the row, marks and view bound (partition, offset, how, evidence, written_ms).
GoneJudge = Callable[[int, int, str, dict[str, Any], int | None], Diagnosis]

# How far a copy got, furthest first; any other verdict counts as unknown.
COPY_PRIORITY = ("processed-not-updated", "unknown", "skipped", "expired", "broker-lost")


def from_sightings(seen: KeySightings, view: ClusterView, evidence: dict[str, Any], judge: GoneJudge) -> Diagnosis:
    """The item's verdict from every record with its key that runs saw (`seen`)."""
    judged = [(sighting, _copy_verdict(sighting, view, dict(evidence), judge)) for sighting in seen.copies]
    if len(judged) == 1 and not seen.unplaced:
        return judged[0][1]
    best_sighting, best = min(judged, key=lambda j: _rank(j[1].verdict))
    result = dict(best.evidence)
    # Every copy, not MAX_LISTED: a second look at the consumer ledger goes by their verdicts.
    result["copies"] = [{**s.as_json(), "verdict": d.verdict, "groups": d.evidence.get("groups")} for s, d in judged]
    result["copies_seen"] = len(judged) + seen.unplaced
    listed = ", ".join(f"{s.partition}@{s.offset} {d.verdict}" for s, d in judged[:MAX_LISTED])
    more = f" and {len(judged) - MAX_LISTED} more" if len(judged) > MAX_LISTED else ""
    runs = sorted({s.run_id for s in seen.copies if s.run_id})
    who = f"reconciliation run{'s' if len(runs) > 1 else ''} {', '.join(runs)}" if runs else "reconciliation runs"
    summary = f"{who} saw {len(judged) + seen.unplaced} records with this key ({listed}{more}"
    if seen.unplaced:
        summary += f"; where the other {seen.unplaced} were is not kept"
    summary += ")"
    if best.verdict != "processed-not-updated" and seen.unplaced:
        return Diagnosis(
            "unknown",
            f"{summary}: one of those whose place is not known may have been processed, so {best.verdict} cannot be "
            "concluded",
            result,
        )
    if _rank(best.verdict) == COPY_PRIORITY.index("unknown"):
        return Diagnosis("unknown", f"{best.reason}; {summary}: that one may have been the copy processed", result)
    where = f"{best_sighting.partition}@{best_sighting.offset}"
    return Diagnosis(best.verdict, f"{best.reason}; {summary}, the one at {where} got furthest", result)


def _copy_verdict(sighting: Sighting, view: ClusterView, evidence: dict[str, Any], judge: GoneJudge) -> Diagnosis:
    evidence["seen"] = sighting.as_json()
    run = f"reconciliation run {sighting.run_id}" if sighting.run_id else "a reconciliation run"
    how = f"seen by {run} at"
    if sighting.deleted_topic_until_ms is not None:
        # Its offset now holds the new topic's records: nothing there says what became of it.
        since = ms_to_iso(sighting.deleted_topic_until_ms)
        evidence["topic_recreated"] = f"the new topic's records are stamped since {since}"
        return Diagnosis(
            "unknown",
            f"{how} {view.topic}/{sighting.partition}@{sighting.offset} in the topic a later run found deleted and "
            f"created again (its records are stamped before {since}, the new topic's first record): it went with "
            "the deleted topic; lost, deleted, consumed or not cannot be told",
            evidence,
        )
    return judge(sighting.partition, sighting.offset, how, evidence, sighting.ts_ms)


def _rank(verdict: str) -> int:
    return COPY_PRIORITY.index(verdict) if verdict in COPY_PRIORITY else COPY_PRIORITY.index("unknown")
