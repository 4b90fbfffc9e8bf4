"""Ledger encoding and decoding (docs/contracts.md, v1)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from auditor.probes import (
    ClientRecord,
    ConsumerBatch,
    ConsumerEntry,
    HeaderProblems,
    LedgerDecodeError,
    ProducerBatch,
    ProducerEntry,
    SessionEnd,
    SessionStart,
    decode_ledger_record,
    decode_ledger_records,
    delivery_status,
    encode_client_record,
    encode_consumer_batch,
    encode_producer_batch,
    encode_session_end,
    encode_session_start,
)
from auditor.probes.codec import MAX_RECORD_BYTES

PID = "a" * 32


def test_it_round_trips_a_producer_batch_in_contract_shape() -> None:
    rows = [
        (0, "acked", 2, 41, None, "persisted", "ticket-1", 1700000000001),
        (1, "failed", -1, -1, "_MSG_TIMED_OUT: Local: Message timed out", "possibly", "tïcket-2", 1700000000002),
    ]
    [raw] = encode_producer_batch(PID, "app", "tickets", rows)
    as_json = json.loads(raw)
    assert as_json == {
        "v": 1,
        "type": "batch",
        "pid": PID,
        "client_id": "app",
        "topic": "tickets",
        "entries": [list(row) for row in rows],
    }
    assert raw == json.dumps(as_json, separators=(",", ":")).encode()  # compact, non-ASCII escaped
    assert decode_ledger_record(raw) == ProducerBatch(
        PID,
        "app",
        "tickets",
        (
            ProducerEntry(0, "acked", 2, 41, None, "persisted", "ticket-1", 1700000000001),
            ProducerEntry(1, "failed", -1, -1, "_MSG_TIMED_OUT: Local: Message timed out", "possibly", "tïcket-2",
                          1700000000002),
        ),
    )  # fmt: skip


def test_it_round_trips_a_consumer_batch() -> None:
    rows = [("tickets", 0, 5, "ticket-1", 1700000000000), ("tickets", 1, 9, None, 1700000000001)]
    [raw] = encode_consumer_batch("s" * 32, "processor", rows)
    assert json.loads(raw)["entries"] == [list(row) for row in rows]
    assert decode_ledger_record(raw) == ConsumerBatch(
        "s" * 32,
        "processor",
        (
            ConsumerEntry("tickets", 0, 5, "ticket-1", 1700000000000),
            ConsumerEntry("tickets", 1, 9, None, 1700000000001),
        ),
    )


def test_it_round_trips_session_records_of_both_kinds() -> None:
    start = encode_session_start("producer", PID, "app", 10, "host-1")
    assert json.loads(start) == {"v": 1, "type": "session-start", "pid": PID, "client_id": "app", "ts": 10,
                                 "host": "host-1"}  # fmt: skip
    assert decode_ledger_record(start) == SessionStart("producer", PID, "app", 10, "host-1")
    end = encode_session_end("producer", PID, 11, {"tickets": 99})
    assert json.loads(end) == {"v": 1, "type": "session-end", "pid": PID, "ts": 11, "last_seq": {"tickets": 99}}
    assert decode_ledger_record(end) == SessionEnd("producer", PID, 11, {"tickets": 99})
    consumer_start = encode_session_start("consumer", "s" * 32, "app", 12, "h", group="g")
    assert decode_ledger_record(consumer_start) == SessionStart("consumer", "s" * 32, "app", 12, "h", "g")
    consumer_end = encode_session_end("consumer", "s" * 32, 13, group="g")
    assert decode_ledger_record(consumer_end) == SessionEnd("consumer", "s" * 32, 13, {}, "g")
    closed = encode_session_end("consumer", "s" * 32, 14, group="g", closed=True)
    assert json.loads(closed)["closed"] is True and "closed" not in json.loads(consumer_end)
    assert decode_ledger_record(closed) == SessionEnd("consumer", "s" * 32, 14, {}, "g", closed=True)


def test_it_round_trips_an_unconfirmed_acks_0_entry() -> None:
    [raw] = encode_producer_batch(PID, "app", "tickets", [(0, "unconfirmed", 3, -1, None, "possibly", "t-1", 7)])
    assert json.loads(raw)["entries"] == [[0, "unconfirmed", 3, -1, None, "possibly", "t-1", 7]]
    assert decode_ledger_record(raw) == ProducerBatch(
        PID, "app", "tickets", (ProducerEntry(0, "unconfirmed", 3, -1, None, "possibly", "t-1", 7),)
    )


def test_it_reads_an_ack_without_an_offset_as_unconfirmed() -> None:
    assert delivery_status("acked", -1001) == "unconfirmed"
    assert delivery_status("acked", -1) == "unconfirmed"
    assert delivery_status("acked", 0) == "acked"
    assert delivery_status("failed", -1) == "failed"
    assert delivery_status("unconfirmed", -1) == "unconfirmed"


def test_it_writes_where_a_consumer_session_ended_and_its_header_counts() -> None:
    raw = encode_session_end(
        "consumer",
        "s" * 32,
        13,
        group="g",
        last_offset={"tickets": {1: 9, 0: 41}, "audit": {2: 0}},
        header_problems={"tickets": HeaderProblems(missing=3, malformed=1)},
    )
    assert raw == (
        b'{"v":1,"type":"session-end","sid":"' + b"s" * 32 + b'","group":"g","ts":13,'
        b'"last_offset":{"audit":{"2":0},"tickets":{"0":41,"1":9}},'
        b'"header_problems":{"tickets":{"missing":3,"malformed":1}}}'
    )
    assert decode_ledger_record(raw) == SessionEnd(
        "consumer",
        "s" * 32,
        13,
        group="g",
        last_offset={"tickets": {0: 41, 1: 9}, "audit": {2: 0}},
        header_problems={"tickets": HeaderProblems(3, 1)},
    )


def test_a_producer_session_end_says_a_ledger_record_of_the_session_was_lost() -> None:
    raw = encode_session_end("producer", PID, 17, {"tickets": 4}, alive_ms=31000, ledger_lost=True)
    assert raw.endswith(b'"last_seq":{"tickets":4},"alive_ms":31000,"ledger_lost":true}')
    end = decode_ledger_record(raw)
    assert isinstance(end, SessionEnd) and end.ledger_lost and not end.closed and end.last_seq == {"tickets": 4}
    plain = decode_ledger_record(encode_session_end("producer", PID, 17, {"tickets": 4}))
    assert isinstance(plain, SessionEnd) and not plain.ledger_lost


def test_it_reads_consumer_session_ends_of_older_probes_as_empty() -> None:
    old = b'{"v":1,"type":"session-end","sid":"s","group":"g","ts":13}'
    assert decode_ledger_record(old) == SessionEnd("consumer", "s", 13, group="g")


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b'{"v":1,"type":"session-end","sid":"s","ts":1,"last_offset":{"t":{"x":1}}}', "partition should be decimal"),
        (b'{"v":1,"type":"session-end","sid":"s","ts":1,"last_offset":{"t":{"0":"1"}}}', "last_offset['t'][0]"),
        (b'{"v":1,"type":"session-end","sid":"s","ts":1,"last_offset":{"t":5}}', "last_offset['t'] should be"),
        (b'{"v":1,"type":"session-end","sid":"s","ts":1,"header_problems":{"t":{"missing":-1}}}', ">= 0"),
        (b'{"v":1,"type":"session-end","sid":"s","ts":1,"header_problems":{"t":{"malformed":"2"}}}', "malformed"),
        (b'{"v":1,"type":"session-end","sid":"s","ts":1,"header_problems":[1]}', "should be dict"),
    ],
)
def test_it_rejects_bad_consumer_session_ends(raw: bytes, reason: str) -> None:
    result = decode_ledger_record(raw)
    assert isinstance(result, LedgerDecodeError) and reason in result.reason


def test_it_masks_the_config_of_a_client_record_whatever_the_caller_passes() -> None:
    raw = encode_client_record(
        "consumer", "s" * 32, "app", "g", "2.16.0", {"bootstrap.servers": "b:9092", "sasl.password": "hunter2"}, "h", 5
    )
    assert b"hunter2" not in raw
    record = decode_ledger_record(raw)
    assert isinstance(record, ClientRecord)
    assert record.config == {"bootstrap.servers": "b:9092", "sasl.password": "****"}
    assert (record.kind, record.group, record.library, record.library_version) == ("consumer", "g", "librdkafka",
                                                                                    "2.16.0")  # fmt: skip


def test_it_splits_batches_by_count_and_by_size() -> None:
    rows = [(seq, "acked", 0, seq, None, "persisted", f"id-{seq}", 1) for seq in range(25)]
    records = encode_producer_batch(PID, None, "t", rows, max_entries=10)
    assert [len(json.loads(r)["entries"]) for r in records] == [10, 10, 5]

    big_id = "x" * 100_000
    big_rows = [(seq, "acked", 0, seq, None, "persisted", big_id, 1) for seq in range(12)]
    records = encode_producer_batch(PID, None, "t", big_rows, max_entries=1000)
    assert len(records) > 1
    assert all(len(r) <= MAX_RECORD_BYTES for r in records)
    assert [e[0] for r in records for e in json.loads(r)["entries"]] == list(range(12))


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, "empty record value"),
        (b"", "empty record value"),
        (b"{not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[1,2]", "should be a JSON object"),
        (b'{"v":3,"type":"batch"}', "unsupported version"),
        (b'{"type":"batch"}', "unsupported version"),
        (b'{"v":1,"type":"mystery"}', "unknown record type"),
        (b'{"v":1,"type":"batch","pid":"p","topic":"t"}', "field 'entries' is missing"),
        (b'{"v":1,"type":"batch","pid":"p","topic":"t","entries":[[0,"acked"]]}', "entry 0 should be a list of 8"),
        (b'{"v":1,"type":"batch","pid":"p","topic":"t","entries":[[0,"lost",0,0,null,"persisted","a",1]]}',
         "status should be"),
        (b'{"v":1,"type":"batch","pid":"p","topic":"t","entries":[[0,"acked",0,0,null,"maybe","a",1]]}',
         "persisted should be"),
        (b'{"v":1,"type":"batch","pid":"p","topic":"t","entries":[[true,"acked",0,0,null,"persisted","a",1]]}',
         "seq should be an integer"),
        (b'{"v":1,"type":"batch","pid":"p","topic":"t","entries":[[-3,"acked",0,0,null,"persisted","a",1]]}',
         "seq should be >= 0"),
        (b'{"v":1,"type":"batch","pid":7,"topic":"t","entries":[]}', "field 'pid' should be str"),
        (b'{"v":1,"type":"processed","sid":"s","entries":[["",0,0,null,1]]}', "topic should be a non-empty"),
        (b'{"v":1,"type":"session-end","ts":1}', "neither 'pid'"),
        (b'{"v":1,"type":"session-end","pid":"p","ts":1,"last_seq":{"t":"9"}}', "last_seq['t']"),
        (b'{"v":1,"kind":"robot","session":"s"}', "client record kind"),
        (b"[" * 100_000 + b"]" * 100_000, "not JSON"),
    ],
)  # fmt: skip
def test_it_returns_a_typed_error_for_malformed_records(raw: Any, reason: str) -> None:
    result = decode_ledger_record(raw)
    assert isinstance(result, LedgerDecodeError)
    assert reason in result.reason
    assert not result


def test_it_decodes_many_and_keeps_errors_apart() -> None:
    good = encode_session_start("producer", PID, None, 1, None)
    records, errors = decode_ledger_records([good, b"junk", good.decode()])
    assert len(records) == 2 and len(errors) == 1
    assert errors[0].raw == b"junk"
