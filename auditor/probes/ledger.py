"""Pure functions over decoded ledger records: per-session summaries, sequence gaps,
duplicates and reprocessing. No Kafka I/O here; callers read the audit topics
(or build records inline in tests) and pass ``decode_ledger_record`` results.

The one rule every reader must keep (docs/contracts.md): never infer a gap past
a session's last ledgered sequence. A session that crashed stops being
accountable where its last flushed batch (or session-end) stopped.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from auditor.probes.codec import (
    ACKED,
    UNCONFIRMED,
    ConsumerBatch,
    FailureEntry,
    HeaderProblems,
    LedgerDecodeError,
    LedgerRecord,
    ProcessedRanges,
    ProducerBatch,
    ProducerEntry,
    ProducerFailures,
    ProducerKeys,
    ProducerRanges,
    SessionEnd,
    SessionStart,
    delivery_status,
)
from auditor.probes.headers import parse_audit_headers

GapReason = Literal["acked-not-seen", "unconfirmed-not-seen", "failed", "unledgered"]


# --- producer ledger --------------------------------------------------------------------
@dataclass
class TopicLedger:
    """What one producer session's ledger says about one topic."""

    last_seq: int = -1
    acked: dict[int, tuple[int, int]] = field(default_factory=dict)  # seq -> (partition, offset)
    failed: dict[int, ProducerEntry] = field(default_factory=dict)
    # Sent with acks=0: left the client, the broker never confirmed it.
    unconfirmed: dict[int, ProducerEntry] = field(default_factory=dict)
    # Contract v2: sequences resolved in ranges, acked without a known position (seq ->
    # (from_ms, to_ms)), or sent and never confirmed (acks=0, a failure's window, the
    # unresolved tail); failure reports, which name a window of sequences, not one.
    acked_ranges: dict[int, tuple[int, int]] = field(default_factory=dict)
    sent: dict[int, tuple[int, int]] = field(default_factory=dict)
    failures: list[FailureEntry] = field(default_factory=list)
    keys: dict[int, str] = field(default_factory=dict)  # v2 `keys` records: seq -> audit id

    @property
    def acked_seqs(self) -> set[int]:
        return set(self.acked)

    @property
    def failed_seqs(self) -> set[int]:
        return set(self.failed)


@dataclass
class ProducerSession:
    pid: str
    client_id: str | None = None
    host: str | None = None
    started_ms: int | None = None
    ended_ms: int | None = None  # the latest session-end (flush() or close())
    topics: dict[str, TopicLedger] = field(default_factory=dict)

    @property
    def ended(self) -> bool:
        """False for a session that crashed before any flush()/close() was ledgered."""
        return self.ended_ms is not None

    def last_seq(self, topic: str) -> int:
        """The last sequence the ledger accounts for on ``topic`` (-1: none)."""
        ledger = self.topics.get(topic)
        return -1 if ledger is None else ledger.last_seq

    def topic(self, topic: str) -> TopicLedger:
        ledger = self.topics.get(topic)
        if ledger is None:
            ledger = self.topics[topic] = TopicLedger()
        return ledger


def _add_entry(ledger: TopicLedger, entry: ProducerEntry) -> None:
    status = delivery_status(entry.status, entry.offset)
    seq = entry.seq
    if status == ACKED:
        ledger.acked[seq] = (entry.partition, entry.offset)
        ledger.unconfirmed.pop(seq, None)
        ledger.failed.pop(seq, None)
    elif seq in ledger.acked:
        return
    elif status == UNCONFIRMED:
        ledger.unconfirmed[seq] = entry
        ledger.failed.pop(seq, None)
    elif seq not in ledger.unconfirmed:
        ledger.failed[seq] = entry


def summarize_producer_ledger(
    records: Iterable[LedgerRecord | LedgerDecodeError],
) -> dict[str, ProducerSession]:
    """Per producer session: last ledgered seq, acked and failed entries per topic.

    The last seq is the highest of any entry's seq and any session-end's
    ``last_seq``. A seq with several entries (it cannot be in one ledger, but
    merged ledgers can disagree) keeps the strongest: acked > unconfirmed > failed.
    An ``acked`` entry without an offset counts as unconfirmed (``delivery_status``).
    Decode errors and consumer records are ignored.
    """
    sessions: dict[str, ProducerSession] = {}

    def session(pid: str) -> ProducerSession:
        found = sessions.get(pid)
        if found is None:
            found = sessions[pid] = ProducerSession(pid)
        return found

    for record in records:
        if isinstance(record, ProducerBatch):
            current = session(record.pid)
            if current.client_id is None:
                current.client_id = record.client_id
            ledger = current.topic(record.topic)
            for entry in record.entries:
                _add_entry(ledger, entry)
                if entry.seq > ledger.last_seq:
                    ledger.last_seq = entry.seq
        elif isinstance(record, ProducerRanges):
            current = session(record.pid)
            if current.client_id is None:
                current.client_id = record.client_id
            ledger = current.topic(record.topic)
            for span in record.ranges:
                target = ledger.acked_ranges if span.status == ACKED else ledger.sent
                for seq in range(span.first, span.last + 1):
                    target[seq] = (span.from_ms, span.to_ms)
                if span.status == ACKED:
                    for seq in range(span.first, span.last + 1):
                        ledger.sent.pop(seq, None)
                ledger.last_seq = max(ledger.last_seq, span.last)
        elif isinstance(record, ProducerFailures):
            ledger = session(record.pid).topic(record.topic)
            ledger.failures.extend(record.entries)
        elif isinstance(record, ProducerKeys):
            keys = session(record.pid).topic(record.topic).keys
            for run in record.runs:
                keys.update((run.first + i, key) for i, key in enumerate(run.keys) if key is not None)
        elif isinstance(record, SessionStart) and record.kind == "producer":
            current = session(record.session)
            current.started_ms = record.ts_ms
            current.client_id = record.client_id
            current.host = record.host
        elif isinstance(record, SessionEnd) and record.kind == "producer":
            current = session(record.session)
            if current.ended_ms is None or record.ts_ms >= current.ended_ms:
                current.ended_ms = record.ts_ms
            for topic, seq in record.last_seq.items():
                ledger = current.topic(topic)
                if seq > ledger.last_seq:
                    ledger.last_seq = seq
    return sessions


class SeenRecord(NamedTuple):
    """An audited record as read back from a topic."""

    pid: str
    topic: str
    seq: int
    partition: int = -1
    offset: int = -1


def seen_record_from_message(
    topic: str,
    partition: int,
    offset: int,
    headers: Iterable[tuple[str, bytes | None]] | None,
) -> SeenRecord | None:
    """A SeenRecord for a consumed record, or None when its audit headers are missing or malformed."""
    parsed = parse_audit_headers(headers)
    if parsed is None or not parsed.valid or parsed.pid is None or parsed.seq is None:
        return None
    return SeenRecord(parsed.pid, topic, parsed.seq, partition, offset)


@dataclass(frozen=True)
class SequenceGap:
    """Sequences ``first``..``last`` of (pid, topic) were not seen in the topic."""

    pid: str
    topic: str
    first: int
    last: int
    reason: GapReason

    @property
    def count(self) -> int:
        return self.last - self.first + 1


def _seen_by_stream(records_seen: Iterable[SeenRecord | tuple[str, str, int]]) -> dict[tuple[str, str], set[int]]:
    seen: dict[tuple[str, str], set[int]] = defaultdict(set)
    for record in records_seen:
        seen[(record[0], record[1])].add(record[2])
    return seen


def find_sequence_gaps(
    records_seen: Iterable[SeenRecord | tuple[str, str, int]],
    ledger: Mapping[str, ProducerSession],
    include_failed: bool = False,
) -> list[SequenceGap]:
    """Sequences a producer session sent but that are absent from ``records_seen``.

    Only sessions in ``ledger`` are checked, and only up to each session's last
    ledgered seq per topic, so a crashed session's unflushed tail is never a gap.
    Reasons: ``acked-not-seen`` (broker acked it, the topic lacks it),
    ``unconfirmed-not-seen`` (sent with acks=0, never confirmed, the topic lacks
    it: the send may have been dropped; never a broker-side loss), ``unledgered`` (inside the ledgered range but without an entry), and
    ``failed`` (the producer was told it failed; reported only with
    ``include_failed`` since the ledger already explains it).
    """
    seen = _seen_by_stream(records_seen)
    gaps: list[SequenceGap] = []
    for pid in sorted(ledger):
        session = ledger[pid]
        for topic in sorted(session.topics):
            topic_ledger = session.topics[topic]
            seen_seqs = seen.get((pid, topic), set())
            run_start: int | None = None
            run_reason: GapReason | None = None
            for seq in range(topic_ledger.last_seq + 1):
                reason: GapReason | None = None
                if seq not in seen_seqs:
                    if seq in topic_ledger.acked or seq in topic_ledger.acked_ranges:
                        reason = "acked-not-seen"
                    elif seq in topic_ledger.unconfirmed or seq in topic_ledger.sent:
                        reason = "unconfirmed-not-seen"
                    elif seq in topic_ledger.failed:
                        reason = "failed" if include_failed else None
                    else:
                        reason = "unledgered"
                if reason != run_reason:
                    if run_reason is not None and run_start is not None:
                        gaps.append(SequenceGap(pid, topic, run_start, seq - 1, run_reason))
                    run_start, run_reason = seq, reason
            if run_reason is not None and run_start is not None:
                gaps.append(SequenceGap(pid, topic, run_start, topic_ledger.last_seq, run_reason))
    return gaps


@dataclass(frozen=True)
class DuplicateSequence:
    """One (pid, topic, seq) found at more than one (partition, offset)."""

    pid: str
    topic: str
    seq: int
    locations: tuple[tuple[int, int], ...]


def find_duplicate_sequences(records_seen: Iterable[SeenRecord]) -> list[DuplicateSequence]:
    """Records the producer sent once but the topic holds more than once.

    Reading the same (partition, offset) twice is not a duplicate.
    """
    locations: dict[tuple[str, str, int], set[tuple[int, int]]] = defaultdict(set)
    for record in records_seen:
        locations[(record.pid, record.topic, record.seq)].add((record.partition, record.offset))
    return [
        DuplicateSequence(pid, topic, seq, tuple(sorted(places)))
        for (pid, topic, seq), places in sorted(locations.items())
        if len(places) > 1
    ]


# --- consumer ledger --------------------------------------------------------------------
@dataclass
class ConsumerSession:
    sid: str
    group: str | None = None
    client_id: str | None = None
    host: str | None = None
    started_ms: int | None = None
    ended_ms: int | None = None  # the latest session-end (a checkpoint or close())
    processed: set[tuple[str, int, int]] = field(default_factory=set)  # (topic, partition, offset)
    # From the latest session-end: where the session stopped, and its header counts.
    last_offset: dict[tuple[str, int], int] = field(default_factory=dict)  # (topic, partition) -> offset
    header_problems: dict[str, HeaderProblems] = field(default_factory=dict)

    @property
    def ended(self) -> bool:
        """False for a session that crashed before any checkpoint or close() was ledgered."""
        return self.ended_ms is not None


def summarize_consumer_ledger(
    records: Iterable[LedgerRecord | LedgerDecodeError],
) -> dict[str, ConsumerSession]:
    """Per consumer session: group, the (topic, partition, offset) it marked processed, and
    from its latest session-end the last processed offset per partition and header counts."""
    sessions: dict[str, ConsumerSession] = {}

    def session(sid: str) -> ConsumerSession:
        found = sessions.get(sid)
        if found is None:
            found = sessions[sid] = ConsumerSession(sid)
        return found

    for record in records:
        if isinstance(record, ConsumerBatch):
            current = session(record.sid)
            current.group = record.group if record.group is not None else current.group
            current.processed.update((e.topic, e.partition, e.offset) for e in record.entries)
        elif isinstance(record, ProcessedRanges):
            current = session(record.sid)
            current.group = record.group if record.group is not None else current.group
            current.processed.update(_marks(record))
        elif isinstance(record, SessionStart) and record.kind == "consumer":
            current = session(record.session)
            current.started_ms = record.ts_ms
            current.group = record.group
            current.client_id = record.client_id
            current.host = record.host
        elif isinstance(record, SessionEnd) and record.kind == "consumer":
            current = session(record.session)
            if current.ended_ms is None or record.ts_ms >= current.ended_ms:
                current.ended_ms = record.ts_ms
                current.last_offset = {
                    (topic, partition): offset
                    for topic, offsets in record.last_offset.items()
                    for partition, offset in offsets.items()
                }
                current.header_problems = dict(record.header_problems)
    return sessions


@dataclass(frozen=True)
class Reprocessed:
    """A record that one consumer group marked processed more than once."""

    group: str | None
    topic: str
    partition: int
    offset: int
    times: int
    sessions: tuple[str, ...]


def _marks(record: ProcessedRanges) -> Iterable[tuple[str, int, int]]:
    """A v2 range record as one (topic, partition, offset) mark per offset, in order."""
    for span in record.ranges:
        for offset in range(span.first, span.last + 1):
            yield span.topic, span.partition, offset


def find_reprocessed(records: Iterable[LedgerRecord | LedgerDecodeError]) -> list[Reprocessed]:
    """Records a group processed more than once, across all of its sessions."""
    marks: dict[tuple[str | None, str, int, int], list[str]] = defaultdict(list)
    for record in records:
        if isinstance(record, ConsumerBatch):
            for entry in record.entries:
                marks[(record.group, entry.topic, entry.partition, entry.offset)].append(record.sid)
        elif isinstance(record, ProcessedRanges):
            for topic, partition, offset in _marks(record):
                marks[(record.group, topic, partition, offset)].append(record.sid)
    ordered = sorted(marks.items(), key=lambda item: (item[0][0] or "", item[0][1:]))
    return [
        Reprocessed(group, topic, partition, offset, len(sids), tuple(sorted(set(sids))))
        for (group, topic, partition, offset), sids in ordered
        if len(sids) > 1
    ]


def processed_offsets(
    records: Iterable[LedgerRecord | LedgerDecodeError],
    group: str | None = None,
) -> set[tuple[str, int, int]]:
    """Every (topic, partition, offset) marked processed (by ``group`` when given)."""
    marked: set[tuple[str, int, int]] = set()
    for record in records:
        if group is not None and getattr(record, "group", None) != group:
            continue
        if isinstance(record, ConsumerBatch):
            marked.update((entry.topic, entry.partition, entry.offset) for entry in record.entries)
        elif isinstance(record, ProcessedRanges):
            marked.update(_marks(record))
    return marked
