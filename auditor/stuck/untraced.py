"""Producer sessions that may have sent records no ledger record names.

A probed producer ledgers at its background flush: contract v2 what it sent (the `keys`
records, the unresolved tail), contract v1 the delivery reports served since the last flush.
Killed between two flushes, a v2 session leaves the records it sent since the last one without
any ledger trace, and a v1 session those whose report came since, whenever it sent them (a
report comes up to `message.timeout.ms` after the send, or later when the application does not
poll). The ledger's silence about a key then proves nothing for a row whose record such a
session may have sent. A session that wrote its `closed` session-end sent nothing unledgered;
one whose probe declares `alive_ms` (it writes a ledger record at least that often while it
runs, a heartbeat when idle) stopped within `alive_ms` of its last ledger record; one that
declares nothing (probes before stop 64 for v2, stop 65 for v1) may have run on unledgered for
any time.

Both locate engines report each unclosed producer session as an UntracedSession (session, the
timestamp of its last ledger record, alive_ms or None, whether it ledgers sends):
``SessionTrails`` here for the Python engine, ``spark_jobs.stuck_locate.transform_untraced_sessions``
for Spark.
"""

from __future__ import annotations

from typing import Any

from auditor.probes.codec import (
    LedgerDecodeError,
    LedgerRecord,
    ProducerBatch,
    ProducerFailures,
    ProducerKeys,
    ProducerRanges,
    SessionEnd,
    SessionStart,
)
from auditor.stuck.evidence import ClusterView, LedgerView, UntracedSession, ms_to_iso
from auditor.stuck.verdict_outcomes import COMPLETENESS_SLACK_MS, compacted_since, complete, leader_changed_since

__all__ = ["SessionTrails", "UntracedSession", "may_run_past", "untraced_producer"]


class SessionTrails:
    """Per producer session of a ledger read: its last record's time, its declared alive_ms,
    whether it wrote contract-v2 records (which ledger what it sent), and whether it closed."""

    def __init__(self) -> None:
        self._last_ms: dict[str, int] = {}
        self._alive_ms: dict[str, int] = {}
        self._ledgers_sends: set[str] = set()
        self._closed: set[str] = set()

    def note(self, record: LedgerRecord | LedgerDecodeError, ts_ms: int | None) -> None:
        """One record of the producer ledger, `ts_ms` its Kafka timestamp (None: none)."""
        if isinstance(record, (ProducerRanges, ProducerKeys, ProducerFailures)):
            session = record.pid
            self._ledgers_sends.add(session)
        elif isinstance(record, ProducerBatch):
            session = record.pid
        elif isinstance(record, (SessionStart, SessionEnd)) and record.kind == "producer":
            session = record.session
            if record.alive_ms is not None:
                self._alive_ms[session] = max(record.alive_ms, self._alive_ms.get(session, record.alive_ms))
            if isinstance(record, SessionEnd) and record.closed:
                self._closed.add(session)
        else:
            return
        if ts_ms is not None and ts_ms > self._last_ms.get(session, ts_ms - 1):
            self._last_ms[session] = ts_ms

    def untraced(self) -> list[UntracedSession]:
        """The producer sessions (either contract) without a `closed` session-end, by session."""
        return [
            UntracedSession(session, last_ms, self._alive_ms.get(session), session in self._ledgers_sends)
            for session, last_ms in sorted(self._last_ms.items())
            if session not in self._closed
        ]


def may_run_past(ledger: LedgerView, created_ms: int) -> list[UntracedSession]:
    """The sessions that never closed and may have run on until the row's record was produced
    (not before the row was created, give or take the clock margin): up to `alive_ms` after
    their last ledger record, without a bound when they declare none. Oldest first."""
    return [
        trail
        for trail in sorted(ledger.untraced_sessions, key=lambda s: (s.last_ms, s.session))
        if trail.alive_ms is None or trail.last_ms + trail.alive_ms + COMPLETENESS_SLACK_MS >= created_ms
    ]


def untraced_producer(
    ledger: LedgerView, view: ClusterView, topic_since_ms: int | None, created_ms: int, evidence: dict[str, Any]
) -> str | None:
    """Why the producer ledger's silence about a key does not prove the row was never
    produced, though it is complete since the row was created: a session that never closed
    may have sent its record unledgered (may_run_past), and the topic may no longer hold it.
    None when no session can have.

    What such a session sent unledgered is still in the topic only if the topic holds
    everything since it can have sent it, and nothing since can have lost or removed it without
    a trace: a leader change (an acks=1 record its leader acked alone, an unclean election) or
    the log cleaner (compacted_since). A session that ledgers its sends (contract v2) sent it
    after its last ledger record; one that ledgers delivery reports (contract v1) at any time
    after the row was created."""
    for trail in may_run_past(ledger, created_ms):
        session, last_ms, alive_ms, ledgers_sends = trail
        sent_from = max(last_ms, created_ms) if ledgers_sends else created_ms
        lost = None
        if complete(topic_since_ms, sent_from):
            since = (
                "the row was created" if sent_from == created_ms else f"its last ledger record ({ms_to_iso(last_ms)})"
            )
            lost = leader_changed_since(view, sent_from, evidence, since) or compacted_since(view, sent_from, evidence)
            if lost is None:
                continue
        evidence["untraced_producer_session"] = {
            "session": session,
            "last_ledger_record": ms_to_iso(last_ms),
            "alive_ms": alive_ms,
            "ledgers_sends": ledgers_sends,
        }
        untraced = (
            "what it sent since its last ledger flush"
            if ledgers_sends
            else "the deliveries reported since its last ledger flush, whenever it sent them (its ledger records "
            "delivery reports, not sends)"
        )
        ran_on = (
            f"the probe writes a ledger record at least every {alive_ms} ms while it runs, so it may have sent "
            f"records until {ms_to_iso(last_ms + alive_ms)}"
            if alive_ms is not None
            else "its probe declares no heartbeat, so how long it ran on without ledgering is not known"
        )
        gone = (
            f"{view.topic} no longer holds records that old: never-produced and produced then deleted cannot be told "
            "apart"
            if lost is None
            else f"{view.topic} still holds everything produced since then, but {lost}"
        )
        return (
            f"no producer-ledger entry for this key, but producer session {session} ledgered nothing after "
            f"{ms_to_iso(last_ms)} and never closed: killed, it leaves {untraced} without a ledger trace ({ran_on}), "
            f"and {gone}"
        )
    return None
