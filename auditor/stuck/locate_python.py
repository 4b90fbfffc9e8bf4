"""The stuck locate's Python engine: confluent-kafka consumers stream the planned ranges of
the topic and both ledgers, and keep only what concerns the stuck keys, so memory follows the
stuck items, never the topic (auditor/stuck/locate.py chooses the engine)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from confluent_kafka import Message

from auditor.lib.record_keys import record_key_of
from auditor.probes.codec import (
    ACKED_RANGE,
    NOT_PERSISTED,
    SENT,
    ConsumerBatch,
    MarksLost,
    ProcessedRanges,
    ProducerBatch,
    ProducerFailures,
    ProducerKeys,
    ProducerRanges,
    SeqRange,
    SessionStart,
    delivery_status,
)
from auditor.probes.codec_decode import decode_ledger_record
from auditor.probes.headers import (
    AUDIT,
    AUDIT_ID,
    AUDIT_PID,
    AUDIT_V2,
    AUDIT_V2_SIZE,
    AUDIT_VERSION,
    RESERVED_HEADER_NAMES,
    audit_position,
    decode_audit_id,
)
from auditor.probes.message import record_headers, record_position  # read_ranges() yields records only
from auditor.stuck.evidence import LedgerEntry, LocatedRecord, PartitionState, ProcessedMark, RecordState
from auditor.stuck.kafka_view import client_settings
from auditor.stuck.locate_request import LocateError, LocateRequest, LocateResult
from auditor.stuck.untraced import SessionTrails
from spark_jobs import kafka_reads
from spark_jobs.binding import parse_record_key
from spark_jobs.kafka_offsets import KafkaReadError

# a record's audit id and producer session, as its probe ledgered them (None: not carried)
Audited = tuple[str | None, str | None]


def read_ranges(
    bootstrap: str,
    config: dict[str, str],
    topic: str,
    ranges: dict[int, tuple[int, int]],
    isolation: str = "read_uncommitted",
    idle_timeout_s: float = 30.0,
) -> Iterator[Message]:
    """kafka_reads.read_ranges, its failures LocateError."""
    return kafka_reads.read_ranges(
        bootstrap, config, topic, ranges, isolation, idle_timeout_s, error=LocateError, group_prefix="auditor-stuck"
    )


def _timestamp(msg: Message) -> int | None:
    kind, value = msg.timestamp()
    return value if kind != 0 and value >= 0 else None


def _locate_records(request: LocateRequest, bootstrap: str, config: dict[str, str], result: LocateResult) -> None:
    spec = parse_record_key(request.record_key, "stuck rule")
    keys = set(request.keys)
    plan = request.plan

    def match(msg: Message, state: RecordState, key: str | None = None) -> LocatedRecord | None:
        key = record_key_of(msg, spec) if key is None else key
        if key is None or key not in keys:
            return None
        session, seq = audit_position(record_headers(msg))  # either contract version
        _topic, partition, offset = record_position(msg)
        return LocatedRecord(key, partition, offset, _timestamp(msg), state, session, seq)

    committed_positions: set[tuple[int, int]] = set()
    counts: dict[int, int] = {}
    starts = {p: request.start(s) for p, s in plan.partitions.items()}
    committed_ranges = {p: (starts[p], s.stable) for p, s in plan.partitions.items()}
    seen = result.v2_seen
    for msg in read_ranges(bootstrap, config, plan.topic, committed_ranges, "read_committed"):
        audited = _note_headers(msg, seen, result)
        partition = record_position(msg)[1]
        counts[partition] = counts.get(partition, 0) + 1
        result.records_scanned += 1
        key = record_key_of(msg, spec)
        if key is None:
            continue
        result.keyed_records += 1
        _note_miskeyed(msg, key, audited, result)
        found = match(msg, "committed", key)
        if found is not None:
            committed_positions.add((found.partition, found.offset))
            result.records.setdefault(found.key, []).append(found)
    _locate_uncommitted(
        plan.partitions, starts, counts, committed_positions, match, bootstrap, config, plan.topic, result
    )


def _note_headers(msg: Message, seen: dict[str, set[int]], unprobed: LocateResult | None = None) -> Audited:
    """Remember the (session, seq) of a record with a valid version-2 header and, in
    `unprobed` (a committed read's result), the latest timestamp of a record without any
    audit header: one pass over its headers. Returns the record's audit id and producer
    session as its probe ledgered them (either contract; None where it carries none)."""
    audited = False
    audit_id: str | None = None
    pid: str | None = None
    for name, value in record_headers(msg):
        if name == AUDIT:
            if value is not None and len(value) >= AUDIT_V2_SIZE and value[0] == AUDIT_VERSION:
                _, session, seq, _ = AUDIT_V2.unpack_from(value)
                seen.setdefault(session.hex(), set()).add(seq)
                raw = value[AUDIT_V2_SIZE:] or msg.key()
                return (decode_audit_id(raw) if raw else None), session.hex()
            return None, None
        if name == AUDIT_ID and audit_id is None and value:
            audit_id = decode_audit_id(value)
        elif name == AUDIT_PID and pid is None and value:
            pid = decode_audit_id(value)
        audited = audited or name in RESERVED_HEADER_NAMES
    if audited or unprobed is None:
        return audit_id, pid
    ts = _timestamp(msg)
    if ts is not None and (unprobed.unprobed_record_ms is None or ts > unprobed.unprobed_record_ms):
        unprobed.unprobed_record_ms = ts
    return None, None


def _note_miskeyed(msg: Message, key: str, audited: Audited, result: LocateResult) -> None:
    """Remember the latest record whose audit id is not its binding key `key`: its producer
    ledgered it (and the session's other records) under ids no stuck item has."""
    audit_id, session = audited
    if audit_id is None or audit_id == key:
        return
    ts = _timestamp(msg)
    if ts is not None and (result.miskeyed_record_ms is None or ts > result.miskeyed_record_ms):
        result.miskeyed_record_ms, result.miskeyed_session = ts, session


def unattributed_until(
    ranges: dict[str, list[SeqRange]],
    failures: dict[str, int],
    seen: dict[str, set[int]],
    seen_intervals: dict[str, list[tuple[int, int]]] | None = None,
    keyed: dict[str, list[tuple[int, int]]] | None = None,
) -> int | None:
    """The latest ``to_ms`` of a v2 range holding a sequence absent from the topic (not read
    now, nor in ``seen_intervals``: what reconciliation runs read) that no failure explains
    and whose key no ``keys`` record names (``keyed``: per session, spans of sequences with a
    key: such a sequence is ledgered under its key); None when every such sequence is
    accounted for.

    A failure report that says not persisted is one record of its session that is certainly
    absent: a session whose absent sequences are no more than those failures is explained.
    """
    latest: int | None = None
    for session, session_ranges in ranges.items():
        found = seen.get(session, set())
        spans = (seen_intervals or {}).get(session, []) + (keyed or {}).get(session, [])
        absent: set[int] = set()
        for r in session_ranges:
            absent.update(
                s
                for s in range(r.first, r.last + 1)
                if s not in found and not any(start <= s <= end for start, end in spans)
            )
        if len(absent) <= failures.get(session, 0):
            continue
        for r in session_ranges:
            if any(s in absent for s in range(r.first, r.last + 1)):
                latest = r.to_ms if latest is None else max(latest, r.to_ms)
    return latest


def uncommitted_ranges(
    partitions: dict[int, PartitionState], starts: dict[int, int], counts: dict[int, int]
) -> dict[int, tuple[int, int]]:
    """Ranges to read again with read_uncommitted: whole partitions (from their start) with
    offset holes below the last stable offset (markers or aborted records), else only the
    open-transaction tail."""
    ranges: dict[int, tuple[int, int]] = {}
    for p, state in partitions.items():
        start = starts.get(p, state.low)
        if counts.get(p, 0) < state.stable - start:
            ranges[p] = (start, state.high)
        elif state.stable < state.high:
            ranges[p] = (state.stable, state.high)
    return ranges


def _locate_uncommitted(
    partitions: dict[int, PartitionState],
    starts: dict[int, int],
    counts: dict[int, int],
    committed_positions: set[tuple[int, int]],
    match: Any,
    bootstrap: str,
    config: dict[str, str],
    topic: str,
    result: LocateResult,
) -> None:
    ranges = uncommitted_ranges(partitions, starts, counts)
    for msg in read_ranges(bootstrap, config, topic, ranges, "read_uncommitted"):
        _topic, partition, offset = record_position(msg)
        if (partition, offset) in committed_positions:
            continue
        _note_headers(msg, result.v2_seen)
        state = "open" if offset >= partitions[partition].stable else "aborted"
        found = match(msg, state)
        if found is not None:
            result.records.setdefault(found.key, []).append(found)


def _locate_producer_ledger(
    request: LocateRequest, bootstrap: str, config: dict[str, str], result: LocateResult
) -> None:
    ledger = request.plan.producer_ledger
    if ledger is None:
        return
    keys = set(request.keys)
    ranges: dict[str, list[SeqRange]] = {}
    failures: dict[str, int] = {}
    keyed: dict[str, list[tuple[int, int]]] = {}
    hits: list[tuple[str, int, str, int, int]] = []  # session, seq, key, from_ms, to_ms
    # producer session → (first, last, when the ledger record said so) of its acked ranges
    acked_at: dict[str, list[tuple[int, int, int]]] = {}
    started: dict[str, int] = {}  # producer session → its session-start's time
    first_ms: dict[str, int] = {}  # producer session → its earliest entry of the topic
    trails = SessionTrails()  # every session's last ledger record, whatever its topics

    def entered(session: str, ts_ms: int) -> None:
        first_ms[session] = min(ts_ms, first_ms.get(session, ts_ms))

    for msg in read_ranges(bootstrap, config, ledger.topic, ledger.ranges):
        record = decode_ledger_record(msg.value())
        written_ms = _timestamp(msg)
        trails.note(record, written_ms)
        if isinstance(record, SessionStart) and record.kind == "producer":
            started[record.session] = min(record.ts_ms, started.get(record.session, record.ts_ms))
            continue
        if isinstance(record, ProducerKeys) and record.topic == request.plan.topic:
            spans = keyed.setdefault(record.pid, [])
            for run in record.runs:
                spans.extend(key_spans(run.first, run.keys))
                hits.extend(
                    (record.pid, run.first + i, k, run.stamps[i], run.stamps[i])
                    for i, k in enumerate(run.keys)
                    if k is not None and k in keys
                )
            continue
        if isinstance(record, ProducerRanges) and record.topic == request.plan.topic:
            result.ledger_entries_for_topic += sum(r.last - r.first + 1 for r in record.ranges)
            ranges.setdefault(record.pid, []).extend(record.ranges)
            for r in record.ranges:
                entered(record.pid, r.from_ms)
                if r.status == "acked" and written_ms is not None:
                    acked_at.setdefault(record.pid, []).append((r.first, r.last, written_ms))
            continue
        if isinstance(record, ProducerFailures) and record.topic == request.plan.topic:
            failures[record.pid] = failures.get(record.pid, 0) + sum(
                1 for f in record.entries if f.persisted == NOT_PERSISTED
            )
            for f in record.entries:
                entered(record.pid, f.ts_ms)
                if f.audit_id is not None and f.audit_id in keys:
                    result.ledger_entries.setdefault(f.audit_id, []).append(
                        LedgerEntry(
                            f.audit_id, record.pid, f.first, "failed", f.partition, -1, f.error, f.persisted, f.ts_ms
                        )
                    )
            continue
        if not isinstance(record, ProducerBatch) or record.topic != request.plan.topic:
            continue
        result.ledger_entries_for_topic += len(record.entries)
        for e in record.entries:
            entered(record.pid, e.ts_ms)
            if e.audit_id is not None and e.audit_id in keys:
                result.ledger_entries.setdefault(e.audit_id, []).append(
                    LedgerEntry(
                        e.audit_id,
                        record.pid,
                        e.seq,
                        delivery_status(e.status, e.offset),
                        e.partition,
                        e.offset,
                        e.error,
                        e.persisted,
                        e.ts_ms,
                    )
                )
    for session, seq, key, from_ms, to_ms in hits:
        status = range_status(ranges.get(session, []), seq)
        if status is not None:
            acked_by = [at for first, last, at in acked_at.get(session, []) if first <= seq <= last]
            result.ledger_entries.setdefault(key, []).append(
                LedgerEntry(
                    key,
                    session,
                    seq,
                    status,
                    -1,
                    -1,
                    None,
                    None,
                    from_ms,
                    to_ms,
                    min(acked_by) if status == ACKED_RANGE and acked_by else None,
                )
            )
    result.unattributed_to_ms = unattributed_until(ranges, failures, result.v2_seen, request.seen_intervals, keyed)
    result.ledger_covers_from_ms = ledger_covers_from(started, first_ms)
    result.untraced_sessions = trails.untraced()


def ledger_covers_from(started: dict[str, int], first_ms: dict[str, int]) -> int | None:
    """From when the producer ledger speaks for the topic: the earliest start of a probed
    producer session that ledgered records of it (its first entry where its session-start
    is not in the ledger read). None when no session ledgered any."""
    return min((min(started.get(session, first), first) for session, first in first_ms.items()), default=None)


def key_spans(first: int, keys: tuple[str | None, ...]) -> list[tuple[int, int]]:
    """The spans of sequences ``first``... whose key is known (None: a record without key)."""
    spans: list[tuple[int, int]] = []
    start = None
    for i, key in enumerate(keys):
        if key is not None and start is None:
            start = i
        elif key is None and start is not None:
            spans.append((first + start, first + i - 1))
            start = None
    if start is not None:
        spans.append((first + start, first + len(keys) - 1))
    return spans


def range_status(ranges: list[SeqRange], seq: int) -> str | None:
    """A v2 sequence's status from its session's ranges, the strongest: acked-range (a range
    resolved it acked) > sent (only unconfirmed ranges: acks=0 or the unresolved tail); None
    when no range holds it yet."""
    status = None
    for r in ranges:
        if r.first <= seq <= r.last:
            if r.status == "acked":
                return ACKED_RANGE
            status = SENT
    return status


def mark_positions(result: LocateResult) -> set[tuple[int, int]]:
    """(partition, offset) whose processed marks matter: the records found, and acked offsets."""
    positions = {(r.partition, r.offset) for records in result.records.values() for r in records}
    for entries in result.ledger_entries.values():
        positions.update((e.partition, e.offset) for e in entries if e.status == "acked" and e.offset >= 0)
    return positions


def _locate_marks(
    request: LocateRequest,
    bootstrap: str,
    config: dict[str, str],
    result: LocateResult,
    positions: set[tuple[int, int]] | None = None,
) -> None:
    ledger = request.plan.consumer_ledger
    if ledger is None or not request.groups:
        return
    groups = set(request.groups)
    topic = request.plan.topic
    lows = {p: s.low for p, s in request.plan.partitions.items()}
    if positions is None:
        positions = mark_positions(result)
    for msg in read_ranges(bootstrap, config, ledger.topic, ledger.ranges):
        record = decode_ledger_record(msg.value())
        if isinstance(record, ProcessedRanges) and record.group in groups:
            _range_marks(record, topic, lows, positions, result)
            continue
        if isinstance(record, MarksLost) and record.group in groups:
            for lost in record.ranges:
                if lost.topic == topic and lost.first <= lost.last:
                    result.add_lost_marks(record.group, lost.partition, lost.first, lost.last, record.reason)
            continue
        if not isinstance(record, ConsumerBatch) or record.group not in groups:
            continue
        group = record.group
        for e in record.entries:
            if e.topic != topic:
                continue
            result.group_marks[group] = result.group_marks.get(group, 0) + 1
            _first_mark(result, group, e.partition, e.offset, e.ts_ms)
            if e.offset < lows.get(e.partition, 0):
                if e.ts_ms > result.last_mark_below_low_ms.get(group, -1):
                    result.last_mark_below_low_ms[group] = e.ts_ms
                key = (group, e.partition)
                result.max_mark_below_low[key] = max(result.max_mark_below_low.get(key, -1), e.offset)
            if (e.partition, e.offset) in positions:
                result.add_mark(ProcessedMark(group, e.partition, e.offset, record.sid, e.ts_ms))


def _first_mark(result: LocateResult, group: str, partition: int, offset: int, ts_ms: int) -> None:
    key = (group, partition)
    if offset < result.first_mark.get(key, offset + 1):
        result.first_mark[key] = offset
    if ts_ms < result.first_mark_ms.get(group, ts_ms + 1):
        result.first_mark_ms[group] = ts_ms


def _range_marks(
    record: ProcessedRanges,
    topic: str,
    lows: dict[int, int],
    positions: set[tuple[int, int]],
    result: LocateResult,
) -> None:
    """v2 marks: ranges of consecutive processed offsets, read like one mark per offset."""
    group = str(record.group)
    for r in record.ranges:
        if r.topic != topic:
            continue
        result.group_marks[group] = result.group_marks.get(group, 0) + r.last - r.first + 1
        _first_mark(result, group, r.partition, r.first, r.first_ms)
        low = lows.get(r.partition, 0)
        if r.first < low:
            if r.last_ms > result.last_mark_below_low_ms.get(group, -1):
                result.last_mark_below_low_ms[group] = r.last_ms
            key = (group, r.partition)
            result.max_mark_below_low[key] = max(result.max_mark_below_low.get(key, -1), min(r.last, low - 1))
        for partition, offset in positions:
            if partition == r.partition and r.first <= offset <= r.last:
                result.add_mark(ProcessedMark(group, partition, offset, record.sid, r.first_ms))


def locate_with_python(request: LocateRequest) -> LocateResult:
    bootstrap, config = client_settings(request.kafka_config)
    result = LocateResult(engine="python", records={k: list(v) for k, v in request.known.items()})
    started = time.monotonic()
    try:
        _locate_records(request, bootstrap, config, result)
        result.timings["topic"] = round(time.monotonic() - started, 3)
        _locate_producer_ledger(request, bootstrap, config, result)
        result.timings["producer_ledger"] = round(time.monotonic() - started - result.timings["topic"], 3)
        _locate_marks(request, bootstrap, config, result)
    except KafkaReadError as exc:
        raise LocateError(str(exc)) from exc
    result.timings["total"] = round(time.monotonic() - started, 3)
    return result


def read_marks(request: LocateRequest, positions: set[tuple[int, int]]) -> LocateResult:
    """The processed marks at `positions` in the request's consumer ledger ranges (its topic
    ranges are not read): a look at a ledger's tail."""
    bootstrap, config = client_settings(request.kafka_config)
    result = LocateResult(engine="python")
    try:
        _locate_marks(request, bootstrap, config, result, positions)
    except KafkaReadError as exc:
        raise LocateError(str(exc)) from exc
    return result
