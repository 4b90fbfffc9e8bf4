"""Decode the audit topics' records (docs/contracts.md, v1 and v2): ``decode_ledger_record``
turns any record of the three audit topics back into a typed value of auditor.probes.codec,
or a ``LedgerDecodeError`` naming what is wrong; it never raises on bad input."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from auditor.probes.codec import (
    LEDGER_VERSIONS,
    PERSISTED_VALUES,
    PRODUCER_STATUSES,
    RANGE_STATUSES,
    ClientRecord,
    ConsumerBatch,
    ConsumerEntry,
    FailureEntry,
    HeaderProblems,
    KeyRun,
    LedgerDecodeError,
    LedgerRecord,
    LostMarks,
    MarksAborted,
    MarksLost,
    OffsetRange,
    ProcessedRanges,
    ProducerBatch,
    ProducerEntry,
    ProducerFailures,
    ProducerKeys,
    ProducerRanges,
    SeqRange,
    SessionEnd,
    SessionStart,
)
from auditor.probes.key_entries import expand_stamp_runs


class _Invalid(Exception):
    pass


def _req(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], nullable: bool = False) -> Any:
    if key not in obj:
        raise _Invalid(f"field {key!r} is missing")
    value = obj[key]
    if value is None and nullable:
        return None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise _Invalid(f"field {key!r} should be {_kind_name(kind)}, got {type(value).__name__}")
    return value


def _opt(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    if obj.get(key) is None:
        return None
    return _req(obj, key, kind)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    if isinstance(kind, tuple):
        return " or ".join(k.__name__ for k in kind)
    return kind.__name__


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(f"{what} should be an integer, got {value!r:.40}")
    return value


def _session_of(obj: Mapping[str, Any]) -> tuple[Literal["producer", "consumer"], str]:
    if "pid" in obj:
        return "producer", _req(obj, "pid", str)
    if "sid" in obj:
        return "consumer", _req(obj, "sid", str)
    raise _Invalid("neither 'pid' (producer) nor 'sid' (consumer) is present")


def _producer_entry(row: Any, index: int) -> ProducerEntry:
    if not isinstance(row, list) or len(row) != 8:
        raise _Invalid(f"entry {index} should be a list of 8 values")
    seq, status, partition, offset, error, persisted, audit_id, ts_ms = row
    where = f"entry {index}"
    if status not in PRODUCER_STATUSES:
        raise _Invalid(f"{where}: status should be one of {list(PRODUCER_STATUSES)}, got {status!r:.40}")
    if persisted not in PERSISTED_VALUES:
        raise _Invalid(f"{where}: persisted should be one of {sorted(PERSISTED_VALUES)}, got {persisted!r:.40}")
    if error is not None and not isinstance(error, str):
        raise _Invalid(f"{where}: error should be a string or null")
    if audit_id is not None and not isinstance(audit_id, str):
        raise _Invalid(f"{where}: audit_id should be a string or null")
    seq = _int(seq, f"{where}: seq")
    if seq < 0:
        raise _Invalid(f"{where}: seq should be >= 0, got {seq}")
    return ProducerEntry(
        seq=seq,
        status=status,
        partition=_int(partition, f"{where}: partition"),
        offset=_int(offset, f"{where}: offset"),
        error=error,
        persisted=persisted,
        audit_id=audit_id,
        ts_ms=_int(ts_ms, f"{where}: ts_ms"),
    )


def _consumer_entry(row: Any, index: int) -> ConsumerEntry:
    if not isinstance(row, list) or len(row) != 5:
        raise _Invalid(f"entry {index} should be a list of 5 values")
    topic, partition, offset, audit_id, ts_ms = row
    where = f"entry {index}"
    if not isinstance(topic, str) or not topic:
        raise _Invalid(f"{where}: topic should be a non-empty string")
    if audit_id is not None and not isinstance(audit_id, str):
        raise _Invalid(f"{where}: audit_id should be a string or null")
    return ConsumerEntry(
        topic=topic,
        partition=_int(partition, f"{where}: partition"),
        offset=_int(offset, f"{where}: offset"),
        audit_id=audit_id,
        ts_ms=_int(ts_ms, f"{where}: ts_ms"),
    )


def _seq_range(row: Any, index: int) -> SeqRange:
    if not isinstance(row, list) or len(row) != 5:
        raise _Invalid(f"range {index} should be a list of 5 values")
    first, last, status, from_ms, to_ms = row
    where = f"range {index}"
    if status not in RANGE_STATUSES:
        raise _Invalid(f"{where}: status should be one of {list(RANGE_STATUSES)}, got {status!r:.40}")
    first = _int(first, f"{where}: first")
    last = _int(last, f"{where}: last")
    if first < 0 or last < first:
        raise _Invalid(f"{where}: should have 0 <= first <= last, got {first}..{last}")
    return SeqRange(first, last, status, _int(from_ms, f"{where}: from_ms"), _int(to_ms, f"{where}: to_ms"))


def _key_run(row: Any, index: int) -> KeyRun:
    if not isinstance(row, list) or len(row) != 3:
        raise _Invalid(f"run {index} should be a list of 3 values")
    first, keys, stamps = row
    first = _int(first, f"run {index}: first")
    if first < 0:
        raise _Invalid(f"run {index}: first should be >= 0, got {first}")
    if not isinstance(keys, list) or not keys:
        raise _Invalid(f"run {index}: keys should be a non-empty list")
    if not all(k is None or isinstance(k, str) for k in keys):
        raise _Invalid(f"run {index}: each key should be a string or null")
    if not isinstance(stamps, list) or not stamps:
        raise _Invalid(f"run {index}: stamps should be a non-empty list")
    if isinstance(stamps[0], list):
        # Runs of equal stamps, [[ts_ms, count], ...] (what probes write).
        runs = []
        for n, pair in enumerate(stamps):
            if not isinstance(pair, list) or len(pair) != 2:
                raise _Invalid(f"run {index}: stamp run {n} should be a list [ts_ms, count]")
            count = _int(pair[1], f"run {index}: stamp run {n}: count")
            if count < 1:
                raise _Invalid(f"run {index}: stamp run {n}: count should be >= 1, got {count}")
            runs.append((_int(pair[0], f"run {index}: stamp run {n}: ts_ms"), count))
        if sum(count for _, count in runs) != len(keys):
            raise _Invalid(f"run {index}: stamp runs should count as many stamps as keys")
        return KeyRun(first, tuple(keys), tuple(expand_stamp_runs(runs)))
    # One stamp per key (probes before the runs form).
    if len(stamps) != len(keys):
        raise _Invalid(f"run {index}: stamps should be a list as long as keys")
    return KeyRun(first, tuple(keys), tuple(_int(ts, f"run {index}: stamp") for ts in stamps))


def _failure_entry(row: Any, index: int) -> FailureEntry:
    if not isinstance(row, list) or len(row) != 7:
        raise _Invalid(f"entry {index} should be a list of 7 values")
    first, last, partition, error, persisted, audit_id, ts_ms = row
    where = f"entry {index}"
    if persisted not in PERSISTED_VALUES:
        raise _Invalid(f"{where}: persisted should be one of {sorted(PERSISTED_VALUES)}, got {persisted!r:.40}")
    if error is not None and not isinstance(error, str):
        raise _Invalid(f"{where}: error should be a string or null")
    if audit_id is not None and not isinstance(audit_id, str):
        raise _Invalid(f"{where}: audit_id should be a string or null")
    first = _int(first, f"{where}: first")
    last = _int(last, f"{where}: last")
    if first < 0 or last < first:
        raise _Invalid(f"{where}: should have 0 <= first <= last, got {first}..{last}")
    return FailureEntry(
        first, last, _int(partition, f"{where}: partition"), error, persisted, audit_id, _int(ts_ms, f"{where}: ts_ms")
    )


def _offset_range(row: Any, index: int) -> OffsetRange:
    if not isinstance(row, list) or len(row) != 6:
        raise _Invalid(f"range {index} should be a list of 6 values")
    topic, partition, first, last, first_ms, last_ms = row
    where = f"range {index}"
    first, last = _offset_span(topic, first, last, where)
    return OffsetRange(
        topic,
        _int(partition, f"{where}: partition"),
        first,
        last,
        _int(first_ms, f"{where}: first_ms"),
        _int(last_ms, f"{where}: last_ms"),
    )


def _offset_span(topic: Any, first: Any, last: Any, where: str) -> tuple[int, int]:
    """A range's offsets (first <= last, from 0) of a named topic."""
    if not isinstance(topic, str) or not topic:
        raise _Invalid(f"{where}: topic should be a non-empty string")
    first = _int(first, f"{where}: first")
    last = _int(last, f"{where}: last")
    if first < 0 or last < first:
        raise _Invalid(f"{where}: should have 0 <= first <= last, got {first}..{last}")
    return first, last


def _lost_marks(row: Any, index: int) -> LostMarks:
    if not isinstance(row, list) or len(row) != 4:
        raise _Invalid(f"lost range {index} should be a list of 4 values")
    topic, partition, first, last = row
    where = f"lost range {index}"
    first, last = _offset_span(topic, first, last, where)
    return LostMarks(topic, _int(partition, f"{where}: partition"), first, last)


# type → (record class, its field of rows, row parser): the batch records share their envelope
# (producer: pid, client_id, topic; consumer: sid, group) and differ in their rows.
_PRODUCER_RECORDS: dict[str, tuple[Callable[..., LedgerRecord], str, Callable[[Any, int], Any]]] = {
    "batch": (ProducerBatch, "entries", _producer_entry),
    "ranges": (ProducerRanges, "ranges", _seq_range),
    "keys": (ProducerKeys, "runs", _key_run),
    "failures": (ProducerFailures, "entries", _failure_entry),
}
# Consumer records naming marks by offset range (marks-lost, marks-aborted): their class and
# the one field of their own.
_MARKS_RECORDS: dict[str, tuple[Callable[..., LedgerRecord], str]] = {
    "marks-lost": (MarksLost, "reason"),
    "marks-aborted": (MarksAborted, "producer"),
}
_CONSUMER_RECORDS: dict[str, tuple[Callable[..., LedgerRecord], str, Callable[[Any, int], Any]]] = {
    "processed": (ConsumerBatch, "entries", _consumer_entry),
    "processed-ranges": (ProcessedRanges, "ranges", _offset_range),
}


def _last_offsets(raw: Mapping[str, Any]) -> dict[str, dict[int, int]]:
    result: dict[str, dict[int, int]] = {}
    for topic, partitions in raw.items():
        if not isinstance(partitions, dict):
            raise _Invalid(f"last_offset[{topic!r}] should be an object of partition: offset")
        offsets: dict[int, int] = {}
        for partition, offset in partitions.items():
            if not (isinstance(partition, str) and partition.isdecimal()):
                raise _Invalid(f"last_offset[{topic!r}]: partition should be decimal text, got {partition!r:.20}")
            offsets[int(partition)] = _int(offset, f"last_offset[{topic!r}][{partition}]")
        result[topic] = offsets
    return result


def _header_problems(raw: Mapping[str, Any]) -> dict[str, HeaderProblems]:
    result: dict[str, HeaderProblems] = {}
    for topic, counts in raw.items():
        if not isinstance(counts, dict):
            raise _Invalid(f"header_problems[{topic!r}] should be an object with 'missing' and 'malformed'")
        missing = _int(counts.get("missing", 0), f"header_problems[{topic!r}].missing")
        malformed = _int(counts.get("malformed", 0), f"header_problems[{topic!r}].malformed")
        if missing < 0 or malformed < 0:
            raise _Invalid(f"header_problems[{topic!r}]: counts should be >= 0")
        result[topic] = HeaderProblems(missing, malformed)
    return result


def _decode_object(obj: Mapping[str, Any]) -> LedgerRecord:
    version = obj.get("v")
    if version not in LEDGER_VERSIONS or isinstance(version, bool):
        raise _Invalid(f"unsupported version v={version!r:.20} (this reader knows v={list(LEDGER_VERSIONS)})")
    record_type = obj.get("type")
    if record_type is None and "kind" in obj:
        kind = obj["kind"]
        if kind not in ("producer", "consumer"):
            raise _Invalid(f"client record kind should be 'producer' or 'consumer', got {kind!r:.40}")
        return ClientRecord(
            kind=kind,
            session=_req(obj, "session", str),
            client_id=_opt(obj, "client_id", str),
            group=_opt(obj, "group", str),
            library=_req(obj, "library", str),
            library_version=_req(obj, "library_version", str),
            config=_req(obj, "config", dict),
            host=_opt(obj, "host", str),
            ts_ms=_req(obj, "ts", int),
        )
    if record_type in _PRODUCER_RECORDS:
        producer_cls, field, parse_row = _PRODUCER_RECORDS[record_type]
        rows = _req(obj, "entries", list)
        return producer_cls(
            pid=_req(obj, "pid", str),
            client_id=_opt(obj, "client_id", str),
            topic=_req(obj, "topic", str),
            **{field: tuple(parse_row(row, i) for i, row in enumerate(rows))},
        )
    if record_type in _CONSUMER_RECORDS:
        consumer_cls, field, parse_row = _CONSUMER_RECORDS[record_type]
        rows = _req(obj, "entries", list)
        return consumer_cls(
            sid=_req(obj, "sid", str),
            group=_opt(obj, "group", str),
            **{field: tuple(parse_row(row, i) for i, row in enumerate(rows))},
        )
    if record_type in _MARKS_RECORDS:
        marks_cls, field = _MARKS_RECORDS[record_type]
        rows = _req(obj, "entries", list)
        return marks_cls(
            sid=_req(obj, "sid", str),
            group=_opt(obj, "group", str),
            ts_ms=_req(obj, "ts", int),
            ranges=tuple(_lost_marks(row, i) for i, row in enumerate(rows)),
            **{field: _opt(obj, field, str)},
        )
    if record_type == "session-start":
        kind, session = _session_of(obj)
        return SessionStart(
            kind=kind,
            session=session,
            client_id=_opt(obj, "client_id", str),
            ts_ms=_req(obj, "ts", int),
            host=_opt(obj, "host", str),
            group=_opt(obj, "group", str),
            alive_ms=_opt(obj, "alive_ms", int),
        )
    if record_type == "session-end":
        kind, session = _session_of(obj)
        last_seq: dict[str, int] = {}
        if kind == "producer":
            raw_last = _req(obj, "last_seq", dict)
            for topic, seq in raw_last.items():
                last_seq[topic] = _int(seq, f"last_seq[{topic!r}]")
            return SessionEnd(
                kind,
                session,
                _req(obj, "ts", int),
                last_seq,
                _opt(obj, "group", str),
                alive_ms=_opt(obj, "alive_ms", int),
                closed=_opt(obj, "closed", bool) is True,
                ledger_lost=_opt(obj, "ledger_lost", bool) is True,
            )
        return SessionEnd(
            kind=kind,
            session=session,
            ts_ms=_req(obj, "ts", int),
            group=_opt(obj, "group", str),
            last_offset=_last_offsets(_opt(obj, "last_offset", dict) or {}),
            header_problems=_header_problems(_opt(obj, "header_problems", dict) or {}),
            closed=_opt(obj, "closed", bool) is True,
        )
    raise _Invalid(f"unknown record type {record_type!r:.40}")


def decode_ledger_record(raw: bytes | str | None) -> LedgerRecord | LedgerDecodeError:
    """Decode one record value of an audit topic; bad input gives a LedgerDecodeError."""
    raw_bytes = raw.encode("utf-8") if isinstance(raw, str) else raw
    if not raw_bytes:
        return LedgerDecodeError("empty record value", raw_bytes)
    try:
        obj = json.loads(raw_bytes)
    except (ValueError, UnicodeDecodeError) as exc:
        return LedgerDecodeError(f"not JSON: {exc}", raw_bytes)
    except RecursionError:
        return LedgerDecodeError("not JSON: nested too deeply", raw_bytes)
    if not isinstance(obj, dict):
        return LedgerDecodeError(f"should be a JSON object, got {type(obj).__name__}", raw_bytes)
    try:
        return _decode_object(obj)
    except _Invalid as exc:
        return LedgerDecodeError(str(exc), raw_bytes)


def decode_ledger_records(
    raws: Iterable[bytes | str | None],
) -> tuple[list[LedgerRecord], list[LedgerDecodeError]]:
    """Decode many records, keeping good ones and collecting the errors separately."""
    good: list[LedgerRecord] = []
    bad: list[LedgerDecodeError] = []
    for raw in raws:
        result = decode_ledger_record(raw)
        if isinstance(result, LedgerDecodeError):
            bad.append(result)
        else:
            good.append(result)
    return good, bad
