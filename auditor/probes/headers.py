"""The record audit headers (docs/contracts.md): names, parsing and id helpers.

Two versions are read: version 2, one binary ``audit`` header (``AUDIT_V2``: a version
byte, the session id's 16 bytes, the sequence and the produce time as unsigned 64-bit
big-endian integers, then the audit-id only when it differs from the record key), and
version 1, the four text headers ``audit-id``/``audit-pid``/``audit-seq``/``audit-ts``.
A record with an ``audit`` header is read as version 2.

Parsing never raises: a record written by someone else's producer, by an old
client or by a buggy one must not take the consumer down. The result tells
"missing" (no audit header at all) apart from "malformed" (some audit headers,
but not a complete valid set).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeGuard

AUDIT_ID = "audit-id"
AUDIT_PID = "audit-pid"
AUDIT_SEQ = "audit-seq"
AUDIT_TS = "audit-ts"
AUDIT_HEADER_NAMES: frozenset[str] = frozenset({AUDIT_ID, AUDIT_PID, AUDIT_SEQ, AUDIT_TS})
# Contract version 2: one binary header.
AUDIT = "audit"
AUDIT_VERSION = 2
AUDIT_V2 = struct.Struct(">B16sQQ")  # version, session id (16 bytes), seq, produce time (ms)
AUDIT_V2_SIZE = AUDIT_V2.size  # 33; an audit-id follows when it differs from the record key
# Every header name a producer reserves (user-supplied ones are dropped or taken as the id).
RESERVED_HEADER_NAMES: frozenset[str] = AUDIT_HEADER_NAMES | {AUDIT}

HeaderValue = bytes | str | None
HeadersInput = Iterable[tuple[str | bytes, HeaderValue]] | Mapping[str | bytes, HeaderValue] | None

_HEX_DIGITS = b"0123456789abcdef"
_UUID_VERSION_4 = bytes((b & 0x0F) | 0x40 for b in range(256))
_UUID_VARIANT_RFC4122 = bytes((b & 0x3F) | 0x80 for b in range(256))


@dataclass(frozen=True, slots=True)
class AuditHeaders:
    """Audit headers read from one record.

    ``problem`` is None when all four headers are present and valid; otherwise it
    names what is wrong and the fields hold whatever could be read.
    """

    audit_id: str | None
    pid: str | None
    seq: int | None
    ts_ms: int | None
    problem: str | None = None
    version: int = 1

    @property
    def valid(self) -> bool:
        return self.problem is None


def decode_audit_id(raw: bytes | str) -> str:
    """The text form of an audit id, the same everywhere (headers and ledgers).

    Keys are usually UTF-8; binary keys are kept readable and stable with
    backslash escapes so ledgers (JSON) and topic readers agree on the id.
    """
    if isinstance(raw, str):
        return raw
    return raw.decode("utf-8", "backslashreplace")


def new_uuid4_batch(count: int) -> list[str]:
    """``count`` random UUID4s as 32 hex digits (``uuid.uuid4().hex`` form).

    One os.urandom call and C-level bit fixing for the whole batch: about a tenth
    of the cost of ``uuid.uuid4().hex`` per id, which matters on the produce path.
    """
    raw = bytearray(os.urandom(16 * count))
    raw[6::16] = raw[6::16].translate(_UUID_VERSION_4)
    raw[8::16] = raw[8::16].translate(_UUID_VARIANT_RFC4122)
    text = raw.hex()
    return [text[start : start + 32] for start in range(0, 32 * count, 32)]


def _as_name(name: object) -> str | None:
    if isinstance(name, str):
        return name
    if isinstance(name, bytes):
        try:
            return name.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def _as_bytes(value: object) -> bytes | None:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return None


def _parse_decimal(raw: bytes | None) -> int | None:
    if raw is None or not raw or len(raw) > 20 or not raw.isdigit():
        return None
    return int(raw)


def _is_session_id(raw: bytes | None) -> TypeGuard[bytes]:
    return raw is not None and len(raw) == 32 and not raw.translate(None, _HEX_DIGITS)


def _iter_pairs(
    headers: Iterable[tuple[str | bytes, HeaderValue]] | Mapping[str | bytes, HeaderValue],
) -> Iterable[tuple[object, object]]:
    if isinstance(headers, Mapping):
        return headers.items()
    return headers


def pack_audit_header(session: bytes, seq: int, ts_ms: int, audit_id: bytes | None = None) -> bytes:
    """The version-2 ``audit`` header value (``session``: the 16 bytes of the session id)."""
    value = AUDIT_V2.pack(AUDIT_VERSION, session, seq, ts_ms)
    return value + audit_id if audit_id else value


def decode_audit_header(value: bytes | None, key: bytes | str | None = None) -> AuditHeaders:
    """Read one version-2 ``audit`` header value; never raises.

    The audit-id is the bytes after the fixed part, else the record ``key`` (None for a
    record without either: (session, seq) then identify it).
    """
    if not isinstance(value, bytes) or len(value) < AUDIT_V2_SIZE:
        size = len(value) if isinstance(value, bytes) else 0
        return AuditHeaders(
            None, None, None, None, f"{AUDIT} header has {size} bytes, at least {AUDIT_V2_SIZE} expected", 2
        )
    version, session, seq, ts_ms = AUDIT_V2.unpack_from(value)
    if version != AUDIT_VERSION:
        return AuditHeaders(None, None, None, None, f"{AUDIT} header has unknown version {version}", version)
    raw_id = value[AUDIT_V2_SIZE:] or key
    audit_id = decode_audit_id(raw_id) if raw_id else None
    return AuditHeaders(audit_id, session.hex(), seq, ts_ms, None, 2)


def parse_audit_headers(headers: HeadersInput, key: bytes | str | None = None) -> AuditHeaders | None:
    """Read the audit headers of one record, either contract version; never raises.

    Returns None when the record carries none of the audit headers (missing),
    an ``AuditHeaders`` with ``problem`` set when they are incomplete, duplicated
    with different values or badly formed (malformed), else a valid result.
    ``headers`` is what ``Message.headers()`` returns (list of pairs or None) or a dict;
    ``key`` is the record key (a version-2 header names the audit-id only when it differs).
    """
    if not headers:
        return None
    found: dict[str, bytes | None] = {}
    problems: list[str] = []
    try:
        for pair in _iter_pairs(headers):
            try:
                raw_name, raw_value = pair
            except (TypeError, ValueError):
                continue
            name = _as_name(raw_name)
            if name not in RESERVED_HEADER_NAMES:
                continue
            value = _as_bytes(raw_value)
            if name in found and found[name] != value:
                problems.append(f"{name} appears more than once with different values")
            found[name] = value
    except TypeError:
        return None
    if not found:
        return None
    if AUDIT in found:
        parsed = decode_audit_header(found[AUDIT], key)
        if problems and parsed.valid:
            return AuditHeaders(parsed.audit_id, parsed.pid, parsed.seq, parsed.ts_ms, "; ".join(problems), 2)
        return parsed

    raw_id = found.get(AUDIT_ID)
    raw_pid = found.get(AUDIT_PID)
    raw_seq = found.get(AUDIT_SEQ)
    raw_ts = found.get(AUDIT_TS)
    audit_id = decode_audit_id(raw_id) if raw_id else None
    pid = raw_pid.decode("ascii") if _is_session_id(raw_pid) else None
    seq = _parse_decimal(raw_seq)
    ts_ms = _parse_decimal(raw_ts)

    absent = [n for n in (AUDIT_ID, AUDIT_PID, AUDIT_SEQ, AUDIT_TS) if n not in found]
    if absent:
        problems.append("missing " + ", ".join(absent))
    if AUDIT_ID in found and audit_id is None:
        problems.append(f"{AUDIT_ID} is empty")
    if AUDIT_PID in found and pid is None:
        problems.append(f"{AUDIT_PID} is not 32 lowercase hex digits: {raw_pid!r:.60}")
    if AUDIT_SEQ in found and seq is None:
        problems.append(f"{AUDIT_SEQ} is not a decimal integer: {raw_seq!r:.60}")
    if AUDIT_TS in found and ts_ms is None:
        problems.append(f"{AUDIT_TS} is not a decimal integer: {raw_ts!r:.60}")
    return AuditHeaders(audit_id, pid, seq, ts_ms, "; ".join(problems) if problems else None)


def audit_position(headers: HeadersInput) -> tuple[str | None, int | None]:
    """(session, seq) of a record, either version; (None, None) when not valid."""
    parsed = parse_audit_headers(headers)
    if parsed is None or not parsed.valid:
        return None, None
    return parsed.pid, parsed.seq


def fast_audit_id(headers: list[tuple[str, bytes | None]] | None) -> tuple[int, bytes | str | None]:
    """Classify a consumed record's headers cheaply: (status, audit id).

    status is 0 valid, 1 missing, 2 malformed; the id is raw bytes on the fast
    path, text on the slow one (``decode_audit_id`` accepts both). The fast path
    matches the layout AuditedProducer writes (its four headers first, in
    contract order) and agrees with ``parse_audit_headers`` on everything else
    by falling back to it.
    """
    if headers is None:
        return 1, None
    try:
        h0, h1, h2, h3 = headers[0], headers[1], headers[2], headers[3]
        if (
            h0[0] == AUDIT_ID
            and h1[0] == AUDIT_PID
            and h2[0] == AUDIT_SEQ
            and h3[0] == AUDIT_TS
            and h0[1]
            # ignores: a value may be None; len() and the methods then raise, caught below.
            and len(h1[1]) == 32  # type: ignore[arg-type]
            and not h1[1].translate(None, _HEX_DIGITS)  # type: ignore[union-attr]
            and 0 < len(h2[1]) <= 20  # type: ignore[arg-type]
            and h2[1].isdigit()  # type: ignore[union-attr]
            and 0 < len(h3[1]) <= 20  # type: ignore[arg-type]
            and h3[1].isdigit()  # type: ignore[union-attr]
        ):
            if len(headers) == 4:
                return 0, h0[1]
            for name, _ in headers[4:]:
                if name in AUDIT_HEADER_NAMES:
                    break
            else:
                return 0, h0[1]
    except (IndexError, TypeError, AttributeError, ValueError):
        pass
    parsed = parse_audit_headers(headers)
    if parsed is None:
        return 1, None
    return (0 if parsed.valid else 2), parsed.audit_id
