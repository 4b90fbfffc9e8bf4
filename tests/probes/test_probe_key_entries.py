"""Contract v2's `keys` entries: the probe's encoder (ids as their own JSON text, stamps as
runs of equal values) and the reader of both stamp forms. Expected values are written by hand."""

from __future__ import annotations

import json

import pytest

from auditor.probes import KeyRun, LedgerDecodeError, ProducerKeys, decode_ledger_record
from auditor.probes.codec import MAX_RECORD_BYTES, encode_encoded_batch, producer_keys_header
from auditor.probes.key_entries import KEYS_PER_ROW, key_entries, stamp_changes

T = 1_700_000_000_000


def entries_as_json(first: int, keys: list[object], stamps: list[int]) -> list[list[object]]:
    return [json.loads(entry) for entry in key_entries(first, keys, stamp_changes(first, stamps))]


@pytest.mark.parametrize(
    ("keys", "ids"),
    [
        ([b"a", b"b"], ["a", "b"]),
        (["x", "y"], ["x", "y"]),
        ([b"a", None], ["a", None]),
        (["x", None, b"z"], ["x", None, "z"]),
        ([b'q"', b"back\\"], ['q"', "back\\"]),
        ([b"nul\x00", b"ctl\x01\x1f", b"del\x7f"], ["nul\x00", "ctl\x01\x1f", "del\x7f"]),
        (["é", b"\xc3\xa9", b"\xff"], ["é", "é", "\\xff"]),
        ([b"", b"z"], ["", "z"]),
        ([bytearray(b"ba"), memoryview(b"mv")], ["ba", "mv"]),
        ([12, 3.5], ["12", "3.5"]),
    ],
)
def test_it_writes_each_id_in_its_text_form_whatever_the_key_type(keys: list[object], ids: list[object]) -> None:
    stamps = [T] * len(keys)
    assert entries_as_json(7, keys, stamps) == [[7, ids, [[T, len(keys)]]]]


def test_it_leaves_out_entries_without_any_id_and_keeps_positions() -> None:
    keys: list[object] = [None] * KEYS_PER_ROW + [b"k"] + [None] * 3
    stamps = [T] * len(keys)
    assert entries_as_json(100, keys, stamps) == [[100 + KEYS_PER_ROW, ["k", None, None, None], [[T, 4]]]]


def test_it_writes_stamps_as_runs_of_equal_values_in_order() -> None:
    keys = [b"k%d" % i for i in range(6)]
    # Threads take their stamp before the lock: one may land out of order.
    stamps = [T, T, T + 1, T, T + 5, T + 5]
    assert entries_as_json(0, keys, stamps) == [
        [0, ["k0", "k1", "k2", "k3", "k4", "k5"], [[T, 2], [T + 1, 1], [T, 1], [T + 5, 2]]]
    ]


def test_it_cuts_entries_at_the_row_size() -> None:
    keys = [b"k%d" % i for i in range(KEYS_PER_ROW + 2)]
    stamps = [T] * KEYS_PER_ROW + [T + 1, T + 2]
    got = entries_as_json(5, keys, stamps)
    assert [(e[0], len(e[1]), e[2]) for e in got] == [(5, 256, [[T, 256]]), (261, 2, [[T + 1, 1], [T + 2, 1]])]


def test_it_takes_the_stamp_changes_the_producer_keeps_across_rows_and_batches() -> None:
    keys = [b"k%d" % i for i in range(KEYS_PER_ROW + 4)]
    # A batch from seq 1000: the first change is the previous batch's last stamp, then the
    # producer saw T + 1 from seq 1000 (same seq: the later counts) and T + 2 from 1000 + 257.
    changes = [(1000, T), (1000, T + 1), (1000 + KEYS_PER_ROW + 1, T + 2)]
    got = [json.loads(entry) for entry in key_entries(1000, keys, changes)]
    assert [(e[0], e[2]) for e in got] == [
        (1000, [[T + 1, KEYS_PER_ROW]]),
        (1000 + KEYS_PER_ROW, [[T + 1, 1], [T + 2, 3]]),
    ]
    # No change in the batch: every send has the previous batch's last stamp.
    assert [json.loads(e)[2] for e in key_entries(7, [b"a", b"b"], [(3, T)])] == [[[T, 2]]]


def test_it_reads_stamps_as_runs_and_as_one_per_id() -> None:
    header = {"v": 2, "type": "keys", "pid": "p" * 32, "client_id": "app", "topic": "t"}
    runs = {**header, "entries": [[0, ["a", None, "c"], [[T, 2], [T + 3, 1]]]]}
    full = {**header, "entries": [[3, ["d", "e"], [T + 4, T + 5]]]}
    assert decode_ledger_record(json.dumps(runs).encode()) == ProducerKeys(
        "p" * 32, "app", "t", (KeyRun(0, ("a", None, "c"), (T, T, T + 3)),)
    )
    assert decode_ledger_record(json.dumps(full).encode()) == ProducerKeys(
        "p" * 32, "app", "t", (KeyRun(3, ("d", "e"), (T + 4, T + 5)),)
    )


@pytest.mark.parametrize(
    ("stamps", "reason"),
    [
        ([[T, 2]], "should count as many stamps as keys"),
        ([[T, 1], [T, 3]], "should count as many stamps as keys"),
        ([[T, 0], [T, 3]], "count should be >= 1"),
        ([[T, 3, 1]], "should be a list [ts_ms, count]"),
        ([[T, "3"]], "count should be an integer"),
        ([T, T], "should be a list as long as keys"),
        ([], "stamps should be a non-empty list"),
    ],
)
def test_it_rejects_stamps_that_do_not_fit_the_ids(stamps: list[object], reason: str) -> None:
    record = {"v": 2, "type": "keys", "pid": "p", "client_id": None, "topic": "t", "entries": [[0, ["a"] * 3, stamps]]}
    decoded = decode_ledger_record(json.dumps(record).encode())
    assert isinstance(decoded, LedgerDecodeError)
    assert reason in decoded.reason


def test_it_packs_encoded_entries_into_records_by_count_and_by_size() -> None:
    header = producer_keys_header("p" * 32, "app", "t")
    small = [b'[%d,["k"],[[1,1]]]' % i for i in range(5)]
    by_count = encode_encoded_batch(header, small, max_entries=2)
    assert [len(json.loads(r)["entries"]) for r in by_count] == [2, 2, 1]
    assert json.loads(by_count[0]) == {**header, "entries": [[0, ["k"], [[1, 1]]], [1, ["k"], [[1, 1]]]]}

    big = b'[0,["' + b"x" * (MAX_RECORD_BYTES // 3) + b'"],[[1,1]]]'
    by_size = encode_encoded_batch(header, [big, big, big, big], max_entries=1000)
    assert [len(json.loads(r)["entries"]) for r in by_size] == [2, 2]
    assert all(len(r) <= MAX_RECORD_BYTES for r in by_size)
    huge = b'[0,["' + b"x" * MAX_RECORD_BYTES + b'"],[[1,1]]]'
    assert [len(json.loads(r)["entries"]) for r in encode_encoded_batch(header, [small[0], huge, small[1]])] == [
        1,
        1,
        1,
    ]
