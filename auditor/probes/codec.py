"""Encode the audit topics' records (docs/contracts.md, v1 and v2), and the typed values
they decode to.

Encoders take plain tuples (what the probes buffer on their hot paths) and return compact
JSON bytes. ``codec_decode.decode_ledger_record`` turns any record of the three audit topics
back into one of the typed values here, or a ``LedgerDecodeError`` naming what is wrong.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from auditor.probes.config import mask_config

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
    ``unconfirmed``; ``audit_id`` is the record's own ``audit-id`` header, else the key
    function's id, else the report's key."""

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
class LostMarks:
    """Offsets ``first``..``last`` of one partition were marked processed, and the ledger
    record that carried the marks was never written."""

    topic: str
    partition: int
    first: int
    last: int


@dataclass(frozen=True, slots=True)
class MarksLost:
    """v2 ``marks-lost``: a consumer session's processed marks its ledger could not write
    (docs/contracts.md); written once the ledger takes records again."""

    sid: str
    group: str | None
    ts_ms: int
    reason: str | None
    ranges: tuple[LostMarks, ...]


@dataclass(frozen=True, slots=True)
class MarksAborted:
    """v2 ``marks-aborted``: a consumer session's processed marks of records whose offsets a
    probed transactional producer sent to a transaction that then aborted (docs/contracts.md).
    The marks were never written as ``processed-ranges``: what the application did with those
    records was discarded with the transaction. ``producer``: that producer's session."""

    sid: str
    group: str | None
    ts_ms: int
    producer: str | None
    ranges: tuple[LostMarks, ...]


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
    # contract-v2 producers: the session writes a ledger record at least this often while it
    # runs (a heartbeat when idle), so a silence longer than this means it stopped
    alive_ms: int | None = None


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
    # contract-v2 producers: as in SessionStart; `closed` (producers, and consumers since stop
    # 76): written by close(), after every other ledger record of the session (a checkpoint or a
    # heartbeat is no close)
    alive_ms: int | None = None
    closed: bool = False
    # producers: a ledger record of the session was not written before this one; `last_seq` is
    # the last checkpoint's, and the sequences past it may have been named in the record lost
    ledger_lost: bool = False


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
    | MarksLost
    | MarksAborted
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


def encode_marks_lost(
    sid: str, group: str | None, ts_ms: int, ranges: Sequence[tuple[str, int, int, int]], reason: str | None
) -> bytes:
    """A ``marks-lost`` record: (topic, partition, first, last) of marks never written."""
    return _encode_marks_record("marks-lost", sid, group, ts_ms, ranges, "reason", reason)


def encode_marks_aborted(
    sid: str, group: str | None, ts_ms: int, producer: str, ranges: Sequence[tuple[str, int, int, int]]
) -> bytes:
    """A ``marks-aborted`` record: (topic, partition, first, last) of marks whose transaction aborted."""
    return _encode_marks_record("marks-aborted", sid, group, ts_ms, ranges, "producer", producer)


def _encode_marks_record(
    record_type: str,
    sid: str,
    group: str | None,
    ts_ms: int,
    ranges: Sequence[tuple[str, int, int, int]],
    field: str,
    value: str | None,
) -> bytes:
    """A consumer session's record naming marks by offset range, with its one field of its own."""
    record = {
        "v": LEDGER_V2,
        "type": record_type,
        "sid": sid,
        "group": group,
        "ts": ts_ms,
        field: value,
        "entries": [list(r) for r in ranges],
    }
    return json.dumps(record, separators=(",", ":")).encode()


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
    alive_ms: int | None = None,
) -> bytes:
    record: dict[str, Any] = {"v": LEDGER_VERSION, "type": "session-start"}
    if kind == "producer":
        record["pid"] = session
    else:
        record["sid"] = session
        record["group"] = group
    record.update({"client_id": client_id, "ts": ts_ms, "host": host})
    if alive_ms is not None:
        record["alive_ms"] = alive_ms
    return _dumps(record).encode("ascii")


def encode_session_end(
    kind: Literal["producer", "consumer"],
    session: str,
    ts_ms: int,
    last_seq: Mapping[str, int] | None = None,
    group: str | None = None,
    last_offset: Mapping[str, Mapping[int, int]] | None = None,
    header_problems: Mapping[str, HeaderProblems] | None = None,
    *,
    alive_ms: int | None = None,
    closed: bool = False,
    ledger_lost: bool = False,
) -> bytes:
    """A ``session-end``: producers carry ``last_seq`` (contract-v2 ones also ``alive_ms``,
    ``closed`` when close() wrote it, and ``ledger_lost`` once a ledger record of the session
    was not written); consumers ``last_offset`` and ``header_problems`` (JSON object keys are
    strings, so partitions become decimal text), and since stop 76 ``closed`` when close()
    wrote it after every mark of the session was written."""
    if kind == "producer":
        record: dict[str, Any] = {
            "v": LEDGER_VERSION,
            "type": "session-end",
            "pid": session,
            "ts": ts_ms,
            "last_seq": dict(last_seq or {}),
        }
        if alive_ms is not None:
            record["alive_ms"] = alive_ms
        if closed:
            record["closed"] = True
        if ledger_lost:
            record["ledger_lost"] = True
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
        if closed:
            record["closed"] = True
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
