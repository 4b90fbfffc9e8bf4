"""The entries of contract v2's ``keys`` records (docs/contracts.md), encoded straight to
JSON text: ``[first_seq, [id|null, ...], [[ts_ms, count], ...]]``.

This runs on the producer's background flush, which shares the process (and the GIL) with
the application's produce() loop, so its cost per key is part of the probe's. Measured with
300k 13-byte keys (``benchmarks/probe_overhead.py --keys``): building rows of Python lists
and encoding them with ``json`` cost ~0.4 us per key, half of it writing a 13-digit stamp per
key. Here the ids of a row are one ``bytes.join`` and a few scans of it when they
need no JSON escaping (the common case: text keys), and the stamps, equal for hundreds
of consecutive sends, are kept as the points where they changed and written as runs of
equal values.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

# Keys per entry, and the most bytes an entry's ids take: a record holds whole entries (one
# larger than codec.MAX_RECORD_BYTES is a record of its own), so 256 keys of 5 KB made a record
# over the ledger producer's message.max.bytes, which refused it. Fewer ids go in an entry
# whose ids are larger (halved until they fit or one id is left).
KEYS_PER_ROW = 256
MAX_ENTRY_ID_BYTES = 256 * 1024

_dumps = json.JSONEncoder(separators=(",", ":")).encode
# What a JSON string must escape besides quotes and backslashes.
_CONTROL_BYTES = bytes(range(0x20))


def key_entries(first: int, keys: Sequence[Any], stamps: Sequence[tuple[int, int]]) -> list[bytes]:
    """``keys`` (record keys or audit ids: bytes, str, other, None) of sequences ``first``...
    as the JSON (ASCII bytes) of ``keys`` entries of at most KEYS_PER_ROW ids in their text
    form (``decode_audit_id``'s); entries whose ids are all null are left out (readers: no
    key known). ``stamps``: (seq, ts_ms) where the produce time changed, in ascending
    seq, the first at or before ``first`` (of several for one seq, the last counts)."""
    entries: list[bytes] = []
    changes = len(stamps)
    at = 0  # index of the change in force at the row's first seq
    for start, chunk, ids in _id_chunks(keys):
        position, end = first + start, first + start + len(chunk)
        runs: list[bytes] = []
        last_ts, count = -1, 0
        while position < end:
            while at + 1 < changes and stamps[at + 1][0] <= position:
                at += 1
            ts = stamps[at][1]
            upto = min(end, stamps[at + 1][0]) if at + 1 < changes else end
            if ts == last_ts:
                count += upto - position
            else:
                if count:
                    runs.append(b"[%d,%d]" % (last_ts, count))
                last_ts, count = ts, upto - position
            position = upto
        runs.append(b"[%d,%d]" % (last_ts, count))
        entries.append(b"[%d,%b,[%b]]" % (first + start, ids, b",".join(runs)))
    return entries


def _id_chunks(keys: Sequence[Any]) -> Iterator[tuple[int, Sequence[Any], bytes]]:
    """(start, keys, their ids' JSON) of each entry, in order: KEYS_PER_ROW keys, fewer where
    their ids take more than MAX_ENTRY_ID_BYTES; chunks whose ids are all null left out."""
    for start in range(0, len(keys), KEYS_PER_ROW):
        pending: list[tuple[int, Sequence[Any]]] = [(start, keys[start : start + KEYS_PER_ROW])]
        while pending:
            begin, chunk = pending.pop()
            ids = ids_json(chunk)
            if ids is None:
                continue
            if len(ids) > MAX_ENTRY_ID_BYTES and len(chunk) > 1:
                half = len(chunk) // 2
                pending.append((begin + half, chunk[half:]))
                pending.append((begin, chunk[:half]))  # popped first: the entries stay in order
                continue
            yield begin, chunk, ids


def stamp_changes(first: int, stamps: Sequence[int]) -> list[tuple[int, int]]:
    """The changes ``key_entries`` takes, from one stamp per sequence from ``first`` on."""
    changes: list[tuple[int, int]] = []
    for offset, ts in enumerate(stamps):
        if not changes or changes[-1][1] != ts:
            changes.append((first + offset, ts))
    return changes


def ids_json(chunk: Sequence[Any]) -> bytes | None:
    """The JSON array (ASCII bytes) of the ids' text forms; None when every one is null."""
    if chunk[0] is None and chunk.count(None) == len(chunk):  # a producer without keys
        return None
    try:
        # TypeError unless every key is bytes-like (the common case), then unless every key
        # is a str (whose text form is itself).
        joined = b'","'.join(chunk)
    except TypeError:
        try:
            joined = '","'.join(chunk).encode("utf-8", "surrogatepass")
        except TypeError:
            texts = id_texts(chunk)
            return None if texts.count(None) == len(texts) else _dumps(texts).encode("ascii")
    # The joined keys are their own JSON text when they are ASCII (the encoder's ensure_ascii)
    # with nothing to escape: no quote but the separators', no backslash, no control byte.
    if (
        joined.isascii()
        and joined.count(b'"') == 2 * (len(chunk) - 1)
        and b"\\" not in joined
        and len(joined.translate(None, _CONTROL_BYTES)) == len(joined)
    ):
        return b'["' + joined + b'"]'
    return _dumps(id_texts(chunk)).encode("ascii")


def id_texts(chunk: Sequence[Any]) -> list[str | None]:
    """Each id in its text form (``decode_audit_id``'s: bytes decoded as UTF-8 with
    backslash escapes), None for a record without key and id."""
    return [
        None
        if k is None
        else k
        if k.__class__ is str
        else k.decode("utf-8", "backslashreplace")
        if k.__class__ is bytes
        else _id_text(k)
        for k in chunk
    ]


def _id_text(value: Any) -> str | None:
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value).decode("utf-8", "backslashreplace") or None
    return str(value) or None


def expand_stamp_runs(runs: Sequence[Sequence[int]]) -> list[int]:
    """The stamp of each id, from runs of equal stamps."""
    return [ts for ts, count in runs for _ in range(count)]
