"""Producer sessions that may have sent records no ledger record names.

A contract-v2 producer ledgers what it sent (the `keys` records, the unresolved tail) only at
its background flush: killed between two flushes, it leaves the records it sent since the last
one without any ledger trace. The ledger's silence about a key then proves nothing for a row
whose record such a session may have sent. A session that wrote its `closed` session-end sent
nothing unledgered; one whose probe declares `alive_ms` (it writes a ledger record at least
that often while it runs, a heartbeat when idle) stopped within `alive_ms` of its last ledger
record; one that declares nothing may have run on unledgered for any time.

Both locate engines report each unclosed v2 session as (session, the timestamp of its last
ledger record, alive_ms or None): ``SessionTrails`` here for the Python engine,
``spark_jobs.stuck_locate.transform_untraced_sessions`` for Spark.
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
from auditor.stuck.evidence import ClusterView, LedgerView, ms_to_iso
from auditor.stuck.verdict_outcomes import COMPLETENESS_SLACK_MS, compacted_since, complete, leader_changed_since

UntracedSession = tuple[str, int, int | None]  # session, last ledger record (epoch ms), alive_ms


class SessionTrails:
    """Per producer session of a ledger read: its last record's time, its declared alive_ms,
    whether it wrote contract-v2 records, and whether it closed."""

    def __init__(self) -> None:
        self._last_ms: dict[str, int] = {}
        self._alive_ms: dict[str, int] = {}
        self._v2: set[str] = set()
        self._closed: set[str] = set()

    def note(self, record: LedgerRecord | LedgerDecodeError, ts_ms: int | None) -> None:
        """One record of the producer ledger, `ts_ms` its Kafka timestamp (None: none)."""
        if isinstance(record, (ProducerRanges, ProducerKeys, ProducerFailures)):
            session = record.pid
            self._v2.add(session)
        elif isinstance(record, ProducerBatch):
            session = record.pid
        elif isinstance(record, (SessionStart, SessionEnd)) and record.kind == "producer":
            session = record.session
            if record.alive_ms is not None:
                self._v2.add(session)
                self._alive_ms[session] = max(record.alive_ms, self._alive_ms.get(session, record.alive_ms))
            if isinstance(record, SessionEnd) and record.closed:
                self._closed.add(session)
        else:
            return
        if ts_ms is not None and ts_ms > self._last_ms.get(session, ts_ms - 1):
            self._last_ms[session] = ts_ms

    def untraced(self) -> list[UntracedSession]:
        """The contract-v2 sessions without a `closed` session-end, ordered by session."""
        return [
            (session, self._last_ms[session], self._alive_ms.get(session))
            for session in sorted(self._v2 - self._closed)
            if session in self._last_ms
        ]


def may_run_past(ledger: LedgerView, created_ms: int) -> list[UntracedSession]:
    """The sessions that never closed and may have run on until the row's record was produced
    (not before the row was created, give or take the clock margin): up to `alive_ms` after
    their last ledger record, without a bound when they declare none. Oldest first."""
    return [
        (session, last_ms, alive_ms)
        for session, last_ms, alive_ms in sorted(ledger.untraced_sessions, key=lambda s: (s[1], s[0]))
        if alive_ms is None or last_ms + alive_ms + COMPLETENESS_SLACK_MS >= created_ms
    ]


def untraced_producer(
    ledger: LedgerView, view: ClusterView, topic_since_ms: int | None, created_ms: int, evidence: dict[str, Any]
) -> str | None:
    """Why the producer ledger's silence about a key does not prove the row was never
    produced, though it is complete since the row was created: a session that never closed
    may have sent its record after its last ledger flush (may_run_past), and the topic may no
    longer hold it. None when no session can have.

    What such a session sent after its last ledger record (and after the row was created) is
    still in the topic only if the topic holds everything since then and nothing since can
    have lost or removed it without a trace: a leader change (an acks=1 record its leader
    acked alone, an unclean election) or the log cleaner (compacted_since)."""
    for session, last_ms, alive_ms in may_run_past(ledger, created_ms):
        sent_from = max(last_ms, created_ms)
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
        }
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
            f"{ms_to_iso(last_ms)} and never closed: killed, it leaves what it sent since its last ledger flush "
            f"without a ledger trace ({ran_on}), and {gone}"
        )
    return None
