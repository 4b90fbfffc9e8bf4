"""Encode and decode the audit topics' records (docs/contracts.md, v1 and v2).

Encoders take plain tuples (what the probes buffer on their hot paths) and
return compact JSON bytes. ``decode_ledger_record`` turns any record of the
three audit topics back into a typed value, or a ``LedgerDecodeError`` naming
what is wrong; it never raises on bad input.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from auditor.probes.config import mask_config
from auditor.probes.key_entries import expand_stamp_runs

# `v` is the version of a record's shape: the record types of contract version 1 (batch,
# processed, session-start, session-end, clients) keep v=1, also when v2 probes write them;
# the types v2 added (ranges, failures, processed-ranges) carry v=2. Readers accept both.
LEDGER_VERSION = 1
LEDGER_V2 = 2
LEDGER_VERSIONS = (1, 2)
CLIENT_RECORD_VERSION = LEDGER_VERSION
ACKED = "acked"
FAILED = "failed"
# Sent with acks=0: the broker never confirms, so the record may or may not be in the log.
UNCONFIRMED = "unconfirmed"
PRODUCER_STATUSES = (ACKED, FAILED, UNCONFIRMED)
RANGE_STATUSES = (ACKED, UNCONFIRMED)
# How readers name a sequence known from a v2 range record, once expanded per seq: broker
# confirmed, position unknown (ACKED_RANGE); sent, never confirmed (SENT: acks=0, or the
# unresolved tail a checkpoint wrote, which a crash leaves as it is).
ACKED_RANGE = "acked-range"
SENT = "sent"
PERSISTED = "persisted"
POSSIBLY_PERSISTED = "possibly"
NOT_PERSISTED = "not"
PERSISTED_VALUES = frozenset({PERSISTED, POSSIBLY_PERSISTED, NOT_PERSISTED})

# Kafka's default max message size is ~1 MB; stay well below it per ledger record.
MAX_RECORD_BYTES = 512 * 1024

_dumps = json.JSONEncoder(separators=(",", ":")).encode

# --- buffered entry shapes (hot path) --------------------------------------------
# The probes buffer each entry as a tuple that already is the contract's JSON row,
# so a batch is encoded by one C-level json call with no per-entry Python work.
# producer row: (seq, "acked"|"failed"|"unconfirmed", partition, offset, error|None, persisted, audit_id|None, ts_ms)
# consumer row: (topic, partition, offset, audit_id|None, ts_ms)
ProducerRow = tuple[int, str, int, int, str | None, str, str | None, int]
ConsumerRow = tuple[str, int, int, str | None, int]
# v2 producer range row: (first_seq, last_seq, "acked"|"unconfirmed", from_ms, to_ms)
RangeRow = tuple[int, int, str, int, int]
# v2 consumer range row: (topic, partition, first_offset, last_offset, first_ms, last_ms)
ProcessedRangeRow = tuple[str, int, int, int, int, int]


# --- typed decoded records --------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ProducerEntry:
    seq: int
    status: Literal["acked", "failed", "unconfirmed"]
    partition: int
    offset: int
    error: str | None
    persisted: str
    audit_id: str | None
    ts_ms: int


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    pid: str
    client_id: str | None
    topic: str
    entries: tuple[ProducerEntry, ...]


@dataclass(frozen=True, slots=True)
class SeqRange:
    """v2: sequences ``first``..``last`` of one session and topic were resolved: ``acked``
    (no delivery error was reported for any of them; a ``failed`` entry of the same session
    and seq overrides) or ``unconfirmed`` (sent, never confirmed: acks=0, or the unresolved
    tail at a checkpoint). Each was produced between ``from_ms`` and ``to_ms``."""

    first: int
    last: int
    status: Literal["acked", "unconfirmed"]
    from_ms: int
    to_ms: int


@dataclass(frozen=True, slots=True)
class ProducerRanges:
    pid: str
    client_id: str | None
    topic: str
    ranges: tuple[SeqRange, ...]


@dataclass(frozen=True, slots=True)
class KeyRun:
    """v2: the audit ids of sequences ``first``, ``first``+1, ... of one session and topic, in
    order (None: a record without key and audit id), and when each was produced (``stamps``,
    epoch ms: the header's ts)."""

    first: int
    keys: tuple[str | None, ...]
    stamps: tuple[int, ...]

    @property
    def last(self) -> int:
        return self.first + len(self.keys) - 1


@dataclass(frozen=True, slots=True)
class ProducerKeys:
    pid: str
    client_id: str | None
    topic: str
    runs: tuple[KeyRun, ...]


@dataclass(frozen=True, slots=True)
class FailureEntry:
    """v2: a failure report. It carries no headers, so its sequence is one of
    ``first``..``last`` (the sequences unresolved when it came), all of which are ledgered
    ``unconfirmed``; ``audit_id`` is from the report's key (or the key function)."""

    first: int
    last: int
    partition: int
    error: str | None
    persisted: str
    audit_id: str | None
    ts_ms: int


@dataclass(frozen=True, slots=True)
class ProducerFailures:
    pid: str
    client_id: str | None
    topic: str
    entries: tuple[FailureEntry, ...]


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """v2: offsets ``first``..``last`` of one partition were marked processed, the first
    mark at ``first_ms``, the last at ``last_ms``."""

    topic: str
    partition: int
    first: int
    last: int
    first_ms: int
    last_ms: int


@dataclass(frozen=True, slots=True)
class ProcessedRanges:
    sid: str
    group: str | None
    ranges: tuple[OffsetRange, ...]


@dataclass(frozen=True, slots=True)
class ConsumerEntry:
    topic: str
    partition: int
    offset: int
    audit_id: str | None
    ts_ms: int


@dataclass(frozen=True, slots=True)
class ConsumerBatch:
    sid: str
    group: str | None
    entries: tuple[ConsumerEntry, ...]


@dataclass(frozen=True, slots=True)
class SessionStart:
    """A probe session began. ``kind`` is "producer" (``pid``) or "consumer" (``sid``)."""

    kind: Literal["producer", "consumer"]
    session: str
    client_id: str | None
    ts_ms: int
    host: str | None
    group: str | None = None


@dataclass(frozen=True, slots=True)
class HeaderProblems:
    """Records of one topic a consumer received without audit headers (missing) or with
    audit headers it could not decode (malformed)."""

    missing: int = 0
    malformed: int = 0


@dataclass(frozen=True, slots=True)
class SessionEnd:
    """A probe session checkpointed or closed.

    Producers: ``last_seq`` per topic. Consumers: ``last_offset`` per topic and partition
    (the offset of the last record marked processed) and ``header_problems`` per topic
    (counts since the session started). Both are empty in records of older probes.
    """

    kind: Literal["producer", "consumer"]
    session: str
    ts_ms: int
    last_seq: Mapping[str, int] = field(default_factory=dict)
    group: str | None = None
    last_offset: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    header_problems: Mapping[str, HeaderProblems] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClientRecord:
    kind: Literal["producer", "consumer"]
    session: str
    client_id: str | None
    group: str | None
    library: str
    library_version: str
    config: Mapping[str, Any]
    host: str | None
    ts_ms: int


@dataclass(frozen=True, slots=True)
class LedgerDecodeError:
    """A ledger record that could not be decoded; ``reason`` says why."""

    reason: str
    raw: bytes | None = None

    def __bool__(self) -> bool:  # lets callers write `if not result: ...`
        return False


LedgerRecord = (
    ProducerBatch
    | ConsumerBatch
    | ProducerRanges
    | ProducerKeys
    | ProducerFailures
    | ProcessedRanges
    | SessionStart
    | SessionEnd
    | ClientRecord
)


def delivery_status(status: str, offset: int) -> str:
    """A producer entry's status as every reader must take it.

    An ``acked`` entry without an offset is ``unconfirmed``: probes written before that
    status existed ledgered acks=0 sends as acked with an invalid offset, and the broker
    never confirmed those.
    """
    return UNCONFIRMED if status == ACKED and offset < 0 else status


# --- encoders -----------------------------------------------------------------------
def encode_batch(header: Mapping[str, Any], rows: Sequence[Sequence[Any]], max_entries: int = 1000) -> list[bytes]:
    """Records of ``header`` plus ``"entries"``: chunks of at most ``max_entries``
    rows and at most MAX_RECORD_BYTES each (a chunk too large is halved)."""
    out: list[bytes] = []
    step = max(1, max_entries)
    record = dict(header)
    for start in range(0, len(rows), step):
        _encode_chunk(record, rows[start : start + step], out)
    return out


def _encode_chunk(record: dict[str, Any], rows: Sequence[Sequence[Any]], out: list[bytes]) -> None:
    record["entries"] = rows
    encoded = _dumps(record).encode("ascii")
    if len(encoded) <= MAX_RECORD_BYTES or len(rows) <= 1:
        out.append(encoded)
        return
    # Split in as many parts as the size says (with room for uneven rows), so big batches
    # (`keys` rows are large) are encoded about twice, not once per halving.
    parts = min(len(rows), -(-len(encoded) * 5 // (MAX_RECORD_BYTES * 4)))
    step = -(-len(rows) // parts)
    for start in range(0, len(rows), step):
        _encode_chunk(record, rows[start : start + step], out)


def encode_encoded_batch(header: Mapping[str, Any], entries: Sequence[bytes], max_entries: int = 1000) -> list[bytes]:
    """Like ``encode_batch`` for entries already encoded (JSON, ASCII bytes): records of at
    most ``max_entries`` entries and at most MAX_RECORD_BYTES each (an entry larger than
    that is a record of its own), with nothing encoded twice."""
    body = _dumps(dict(header)).encode("ascii")
    head = body[:-1] + (b"," if len(body) > 2 else b"") + b'"entries":['
    out: list[bytes] = []
    chunk: list[bytes] = []
    size = len(head) + 2
    limit = max(1, max_entries)
    for entry in entries:
        if chunk and (len(chunk) >= limit or size + len(entry) + 1 > MAX_RECORD_BYTES):
            out.append(head + b",".join(chunk) + b"]}")
            chunk, size = [], len(head) + 2
        chunk.append(entry)
        size += len(entry) + 1
    if chunk:
        out.append(head + b",".join(chunk) + b"]}")
    return out


def producer_batch_header(pid: str, client_id: str | None, topic: str) -> dict[str, Any]:
    return {"v": LEDGER_VERSION, "type": "batch", "pid": pid, "client_id": client_id, "topic": topic}


def consumer_batch_header(sid: str, group: str | None) -> dict[str, Any]:
    return {"v": LEDGER_VERSION, "type": "processed", "sid": sid, "group": group}


def producer_ranges_header(pid: str, client_id: str | None, topic: str) -> dict[str, Any]:
    return {"v": LEDGER_V2, "type": "ranges", "pid": pid, "client_id": client_id, "topic": topic}


def producer_keys_header(pid: str, client_id: str | None, topic: str) -> dict[str, Any]:
    return {"v": LEDGER_V2, "type": "keys", "pid": pid, "client_id": client_id, "topic": topic}


def producer_failures_header(pid: str, client_id: str | None, topic: str) -> dict[str, Any]:
    return {"v": LEDGER_V2, "type": "failures", "pid": pid, "client_id": client_id, "topic": topic}


def processed_ranges_header(sid: str, group: str | None) -> dict[str, Any]:
    return {"v": LEDGER_V2, "type": "processed-ranges", "sid": sid, "group": group}


def encode_producer_batch(
    pid: str,
    client_id: str | None,
    topic: str,
    rows: Sequence[ProducerRow],
    max_entries: int = 1000,
) -> list[bytes]:
    """Producer ledger ("batch") records for one topic's entries, in the given order."""
    return encode_batch(producer_batch_header(pid, client_id, topic), rows, max_entries)


def encode_consumer_batch(
    sid: str,
    group: str | None,
    rows: Sequence[ConsumerRow],
    max_entries: int = 1000,
) -> list[bytes]:
    """Consumer ledger ("processed") records for marks, in the given order."""
    return encode_batch(consumer_batch_header(sid, group), rows, max_entries)


def encode_session_start(
    kind: Literal["producer", "consumer"],
    session: str,
    client_id: str | None,
    ts_ms: int,
    host: str | None,
    group: str | None = None,
) -> bytes:
    record: dict[str, Any] = {"v": LEDGER_VERSION, "type": "session-start"}
    if kind == "producer":
        record["pid"] = session
    else:
        record["sid"] = session
        record["group"] = group
    record.update({"client_id": client_id, "ts": ts_ms, "host": host})
    return _dumps(record).encode("ascii")


def encode_session_end(
    kind: Literal["producer", "consumer"],
    session: str,
    ts_ms: int,
    last_seq: Mapping[str, int] | None = None,
    group: str | None = None,
    last_offset: Mapping[str, Mapping[int, int]] | None = None,
    header_problems: Mapping[str, HeaderProblems] | None = None,
) -> bytes:
    """A ``session-end``: producers carry ``last_seq``; consumers ``last_offset`` and
    ``header_problems`` (JSON object keys are strings, so partitions become decimal text)."""
    if kind == "producer":
        record: dict[str, Any] = {
            "v": LEDGER_VERSION,
            "type": "session-end",
            "pid": session,
            "ts": ts_ms,
            "last_seq": dict(last_seq or {}),
        }
    else:
        record = {
            "v": LEDGER_VERSION,
            "type": "session-end",
            "sid": session,
            "group": group,
            "ts": ts_ms,
            "last_offset": {
                topic: {str(partition): offset for partition, offset in sorted(offsets.items())}
                for topic, offsets in sorted((last_offset or {}).items())
            },
            "header_problems": {
                topic: {"missing": counts.missing, "malformed": counts.malformed}
                for topic, counts in sorted((header_problems or {}).items())
            },
        }
    return _dumps(record).encode("ascii")


def encode_client_record(
    kind: Literal["producer", "consumer"],
    session: str,
    client_id: str | None,
    group: str | None,
    library_version: str,
    config: Mapping[str, Any],
    host: str | None,
    ts_ms: int,
) -> bytes:
    """The ``_audit.clients`` record; ``config`` is masked here whatever the caller did."""
    record = {
        "v": CLIENT_RECORD_VERSION,
        "kind": kind,
        "session": session,
        "client_id": client_id,
        "group": group,
        "library": "librdkafka",
        "library_version": library_version,
        "config": mask_config(config),
        "host": host,
        "ts": ts_ms,
    }
    return _dumps(record).encode("ascii")


# --- decoders -------------------------------------------------------------------------
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
    if not isinstance(topic, str) or not topic:
        raise _Invalid(f"{where}: topic should be a non-empty string")
    first = _int(first, f"{where}: first")
    last = _int(last, f"{where}: last")
    if first < 0 or last < first:
        raise _Invalid(f"{where}: should have 0 <= first <= last, got {first}..{last}")
    return OffsetRange(
        topic,
        _int(partition, f"{where}: partition"),
        first,
        last,
        _int(first_ms, f"{where}: first_ms"),
        _int(last_ms, f"{where}: last_ms"),
    )


# type → (record class, its field of rows, row parser): the batch records share their envelope
# (producer: pid, client_id, topic; consumer: sid, group) and differ in their rows.
_PRODUCER_RECORDS: dict[str, tuple[Callable[..., LedgerRecord], str, Callable[[Any, int], Any]]] = {
    "batch": (ProducerBatch, "entries", _producer_entry),
    "ranges": (ProducerRanges, "ranges", _seq_range),
    "keys": (ProducerKeys, "runs", _key_run),
    "failures": (ProducerFailures, "entries", _failure_entry),
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
    if record_type == "session-start":
        kind, session = _session_of(obj)
        return SessionStart(
            kind=kind,
            session=session,
            client_id=_opt(obj, "client_id", str),
            ts_ms=_req(obj, "ts", int),
            host=_opt(obj, "host", str),
            group=_opt(obj, "group", str),
        )
    if record_type == "session-end":
        kind, session = _session_of(obj)
        last_seq: dict[str, int] = {}
        if kind == "producer":
            raw_last = _req(obj, "last_seq", dict)
            for topic, seq in raw_last.items():
                last_seq[topic] = _int(seq, f"last_seq[{topic!r}]")
            return SessionEnd(kind, session, _req(obj, "ts", int), last_seq, _opt(obj, "group", str))
        return SessionEnd(
            kind=kind,
            session=session,
            ts_ms=_req(obj, "ts", int),
            group=_opt(obj, "group", str),
            last_offset=_last_offsets(_opt(obj, "last_offset", dict) or {}),
            header_problems=_header_problems(_opt(obj, "header_problems", dict) or {}),
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
