"""The canary record's value: session id, partition, per-partition sequence, send time.

Compact JSON, e.g. ``{"v":1,"session":"9f..","partition":2,"seq":41,"ts":1718000000123.456}``
(``ts``: epoch milliseconds with microsecond precision). Decoding never raises: a record
that is not a canary record is reported as None and counted, never fatal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TypeGuard

PAYLOAD_VERSION = 1


@dataclass(frozen=True, slots=True)
class CanaryRecord:
    session: str
    partition: int
    seq: int
    sent_ms: float


def encode_record(record: CanaryRecord) -> bytes:
    return json.dumps(
        {
            "v": PAYLOAD_VERSION,
            "session": record.session,
            "partition": record.partition,
            "seq": record.seq,
            "ts": round(record.sent_ms, 3),
        },
        separators=(",", ":"),
    ).encode()


def _is_count(x: object) -> TypeGuard[int]:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def decode_record(value: bytes | None) -> CanaryRecord | None:
    if not value:
        return None
    try:
        data = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or data.get("v") != PAYLOAD_VERSION:
        return None
    session, partition, seq, ts = data.get("session"), data.get("partition"), data.get("seq"), data.get("ts")
    if not isinstance(session, str) or not session:
        return None
    if not (_is_count(partition) and _is_count(seq)):
        return None
    if not isinstance(ts, int | float) or isinstance(ts, bool):
        return None
    return CanaryRecord(session=session, partition=partition, seq=seq, sent_ms=float(ts))
