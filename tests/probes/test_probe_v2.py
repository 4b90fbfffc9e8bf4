"""Contract version 2 against the real broker: the packed header, range-resolved acks, the
consumer's offset ranges, and readers that take records of both versions.

Ground truth is what the clients observed: produce() calls that returned, a full read of
the topic with a plain Consumer, and the offsets it returned.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from auditor.probes import (
    AUDIT,
    AuditedConsumer,
    AuditedProducer,
    AuditedProducerV1,
    ProcessedRanges,
    ProducerFailures,
    ProducerKeys,
    ProducerRanges,
    SessionEnd,
    SessionStart,
    decode_ledger_record,
    parse_audit_headers,
)
from auditor.probes.consumer import offset_ranges
from auditor.probes.headers import decode_audit_header, pack_audit_header
from tests.probes.kafka_helpers import read_topic
from tests.support.marking_consumer import MarkingConsumer
from tests.support.waiting import wait_until


def test_it_packs_and_reads_the_v2_header_with_the_id_only_when_it_differs_from_the_key() -> None:
    session = uuid.uuid4()
    plain = pack_audit_header(session.bytes, 7, 1_700_000_000_123)
    assert len(plain) == 33
    read = decode_audit_header(plain, b"ticket-9")
    assert (read.pid, read.seq, read.ts_ms, read.audit_id, read.valid) == (
        session.hex,
        7,
        1_700_000_000_123,
        "ticket-9",
        True,
    )
    with_id = decode_audit_header(pack_audit_header(session.bytes, 8, 1, b"4711"), b"k")
    assert with_id.audit_id == "4711"
    assert decode_audit_header(plain[:20]).problem is not None
    assert decode_audit_header(b"\x03" + plain[1:]).problem is not None
    # Both versions through one reader; a v2 header wins over stray v1 names.
    v1 = [("audit-id", b"a"), ("audit-pid", session.hex.encode()), ("audit-seq", b"3"), ("audit-ts", b"5")]
    assert parse_audit_headers(v1).seq == 3
    assert parse_audit_headers([*v1, (AUDIT, plain)], b"k").seq == 7
    assert parse_audit_headers([(AUDIT, plain), (AUDIT, plain[:-1] + b"x")]).valid is False


def test_it_turns_marks_into_ranges_keeping_repeats_visible() -> None:
    from confluent_kafka import Message

    msgs = [Message(topic="t", partition=p, offset=o) for p, o in [(0, 1), (0, 2), (0, 3), (1, 9), (0, 4), (0, 2)]]
    assert offset_ranges(msgs, 10, 20) == [
        ("t", 0, 1, 3, 10, 20),
        ("t", 1, 9, 9, 10, 20),
        ("t", 0, 4, 4, 10, 20),
        ("t", 0, 2, 2, 10, 20),
    ]


@pytest.fixture
def topics(kafka_bootstrap: str) -> Iterator[dict[str, str]]:
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    names = {name: f"h13-v2-{name}-{uuid.uuid4().hex[:8]}" for name in ("data", "pledger", "cledger", "clients")}
    for future in admin.create_topics(
        [NewTopic(n, num_partitions=2, replication_factor=1) for n in names.values()]
    ).values():
        future.result(30)
    yield names
    admin.delete_topics(list(names.values()))


def test_it_resolves_acks_in_ranges_and_leaves_failures_unconfirmed(
    kafka_bootstrap: str, topics: dict[str, str], hot_path: str
) -> None:
    producer = AuditedProducer(
        {"bootstrap.servers": kafka_bootstrap, "message.max.bytes": 10_000_000},
        ledger_topic=topics["pledger"],
        clients_topic=topics["clients"],
    )
    assert producer.native is (hot_path == "native")
    for i in range(50):
        producer.produce(topics["data"], b"v%d" % i, b"k%d" % i)
    assert producer.flush(30) == 0
    producer.produce(topics["data"], b"x" * 3_000_000, b"bad-key")  # the broker refuses it (too large)
    for i in range(50, 60):
        producer.produce(topics["data"], b"v%d" % i, b"k%d" % i)
    producer.close(30)

    records = read_topic(topics["data"], bootstrap=kafka_bootstrap)
    seen = {parse_audit_headers(m.headers(), m.key()).seq: m.key() for m in records}
    assert len(records) == 60 and set(seen) == set(range(61)) - {50}
    ledger = [decode_ledger_record(m.value()) for m in read_topic(topics["pledger"], bootstrap=kafka_bootstrap)]
    ranges = [r for rec in ledger if isinstance(rec, ProducerRanges) for r in rec.ranges]
    acked = {s for r in ranges if r.status == "acked" for s in range(r.first, r.last + 1)}
    unconfirmed = {s for r in ranges if r.status == "unconfirmed" for s in range(r.first, r.last + 1)}
    # Every seq of the first flush is acked; the failed one is never acked.
    assert set(range(50)) <= acked
    assert 50 not in acked and 50 in unconfirmed
    failures = [f for rec in ledger if isinstance(rec, ProducerFailures) for f in rec.entries]
    assert [f.audit_id for f in failures] == ["bad-key"] and failures[0].first <= 50 <= failures[0].last
    # the default retries: an earlier attempt of the refused record could have written it
    assert failures[0].persisted == "possibly"


def test_a_failure_report_is_named_by_the_records_own_audit_id_header_not_its_key(
    kafka_bootstrap: str, topics: dict[str, str], hot_path: str
) -> None:
    """Records keyed by customer carry their ticket in an `audit-id` header. A delivery report
    carries no headers, and the failure records named the key (`cust-7`): the item's keys entry
    says TCK-42, so the failure matched no item, and a key equal to another item's id would have
    put it on that one. Ground truth: the delivery errors the application's callbacks saw."""
    seen: dict[str, list[tuple[str, str]]] = {"config": [], "call": []}

    def on_config(err: Any, msg: Any) -> None:
        seen["config"].append((msg.key().decode(), err.name() if err is not None else "ok"))

    def on_call(err: Any, msg: Any) -> None:
        seen["call"].append((msg.key().decode(), err.name() if err is not None else "ok"))

    producer = AuditedProducer(
        {"bootstrap.servers": kafka_bootstrap, "message.max.bytes": 10_000_000, "on_delivery": on_config},
        ledger_topic=topics["pledger"],
        clients_topic=topics["clients"],
    )
    assert producer.native is (hot_path == "native")
    too_large = b"x" * 3_000_000  # the broker refuses it
    producer.produce(topics["data"], too_large, b"cust-7", headers=[("audit-id", b"TCK-42")])
    assert producer.flush(30) == 0
    producer.produce(topics["data"], too_large, b"cust-8", headers={"audit-id": "TCK-43"}, on_delivery=on_call)
    assert producer.flush(30) == 0
    producer.produce(topics["data"], too_large, b"TCK-44", headers={"audit-id": "TCK-44"})  # the key says it
    producer.produce(topics["data"], b"fine", b"cust-9", headers={"audit-id": "TCK-45"})
    producer.close(30)

    # each application callback saw its records' reports (an on_delivery in the config asks for
    # successes too)
    assert sorted(seen["config"]) == [
        ("TCK-44", "MSG_SIZE_TOO_LARGE"),
        ("cust-7", "MSG_SIZE_TOO_LARGE"),
        ("cust-9", "ok"),
    ]
    assert seen["call"] == [("cust-8", "MSG_SIZE_TOO_LARGE")]
    assert [m.key() for m in read_topic(topics["data"], bootstrap=kafka_bootstrap)] == [b"cust-9"]
    ledger = [decode_ledger_record(m.value()) for m in read_topic(topics["pledger"], bootstrap=kafka_bootstrap)]
    failures = [f for rec in ledger if isinstance(rec, ProducerFailures) for f in rec.entries]
    assert sorted(f.audit_id for f in failures) == ["TCK-42", "TCK-43", "TCK-44"]
    # the sequences' ids in the `keys` records: what the failures must match
    named = [k for rec in ledger if isinstance(rec, ProducerKeys) for run in rec.runs for k in run.keys]
    assert named == ["TCK-42", "TCK-43", "TCK-44", "TCK-45"]


def test_it_ledgers_the_key_of_every_sequence_so_readers_can_name_a_record_the_topic_lost(
    kafka_bootstrap: str, topics: dict[str, str], hot_path: str
) -> None:
    producer = AuditedProducer(
        {"bootstrap.servers": kafka_bootstrap}, ledger_topic=topics["pledger"], clients_topic=topics["clients"]
    )
    assert producer.native is (hot_path == "native")
    before_ms = time.time_ns() // 1_000_000
    for i in range(300):  # more than one `keys` row (256 ids each)
        producer.produce(topics["data"], b"v%d" % i, b"k%d" % i)
    producer.produce(topics["data"], b"no key")
    producer.produce(topics["data"], b"v", b"kafka-key", headers={"audit-id": "TCK-9"})
    producer.produce(topics["data"], "text value", "text-key")
    after_ms = time.time_ns() // 1_000_000
    producer.close(30)

    # The truth: one thread, so the n-th send is sequence n; its id is the key or the header we gave.
    truth: dict[int, str | None] = {i: f"k{i}" for i in range(300)} | {300: None, 301: "TCK-9", 302: "text-key"}
    assert len(read_topic(topics["data"], bootstrap=kafka_bootstrap)) == 303
    ledger = [decode_ledger_record(m.value()) for m in read_topic(topics["pledger"], bootstrap=kafka_bootstrap)]
    named = {
        run.first + i: key
        for rec in ledger
        if isinstance(rec, ProducerKeys) and rec.pid == producer.session_id
        for run in rec.runs
        for i, key in enumerate(run.keys)
    }
    assert {seq: key for seq, key in named.items() if key is not None} == {
        seq: key for seq, key in truth.items() if key is not None
    }
    assert named.get(300) is None
    assert max(len(run.keys) for rec in ledger if isinstance(rec, ProducerKeys) for run in rec.runs) <= 256
    # Each id's stamp is its send's time (the header's ts: read back from the topic), written as
    # runs of equal stamps.
    stamps = {
        run.first + i: ts
        for rec in ledger
        if isinstance(rec, ProducerKeys) and rec.pid == producer.session_id
        for run in rec.runs
        for i, ts in enumerate(run.stamps)
    }
    header_ts = {
        parsed.seq: parsed.ts_ms
        for parsed in (
            parse_audit_headers(m.headers(), m.key()) for m in read_topic(topics["data"], bootstrap=kafka_bootstrap)
        )
        if parsed is not None
    }
    assert {seq: stamps[seq] for seq in truth if truth[seq] is not None} == {
        seq: header_ts[seq] for seq in truth if truth[seq] is not None
    }
    assert all(before_ms <= ts <= after_ms for ts in stamps.values())
    raw_keys = [
        json.loads(m.value())
        for m in read_topic(topics["pledger"], bootstrap=kafka_bootstrap)
        if json.loads(m.value()).get("type") == "keys"
    ]
    assert raw_keys and all(isinstance(entry[2][0], list) for rec in raw_keys for entry in rec["entries"])


def test_it_returns_from_poll_once_messages_were_delivered_though_successes_are_not_reported(
    kafka_bootstrap: str, topics: dict[str, str]
) -> None:
    producer = AuditedProducer(
        {"bootstrap.servers": kafka_bootstrap, "linger.ms": 50},
        ledger_topic=topics["pledger"],
        clients_topic=topics["clients"],
    )
    try:
        for i in range(1000):
            producer.produce(topics["data"], b"v%d" % i, b"k%d" % i)
        queued = len(producer)
        assert queued > 0
        # A plain producer's poll(10) returns with its first delivery reports; so must this one
        # (librdkafka still wakes a poll when only errors are reported: no slicing needed).
        started = time.monotonic()
        served = producer.poll(10)
        assert time.monotonic() - started < 5
        assert 0 < served <= queued and len(producer) <= queued - served
        # Without a timeout too (it would otherwise wait for a failure that never comes).
        while len(producer):
            producer.poll()
        # Nothing queued: it waits its timeout, as a plain producer does.
        started = time.monotonic()
        assert producer.poll(0.3) == 0
        assert time.monotonic() - started >= 0.25
    finally:
        producer.close(30)
    assert len(read_topic(topics["data"], bootstrap=kafka_bootstrap)) == 1000


def test_it_leaves_the_unresolved_tail_unconfirmed_when_the_producer_never_flushes(
    kafka_bootstrap: str, topics: dict[str, str]
) -> None:
    # A broker that never answers: every send stays unresolved, as at a crash.
    producer = AuditedProducer(
        {"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": 600000},
        ledger_topic=topics["pledger"],
        clients_topic=topics["clients"],
        ledger_config={"bootstrap.servers": kafka_bootstrap},
        ledger_flush_interval_s=0.2,
    )
    for i in range(5):
        producer.produce(topics["data"], b"v%d" % i, b"k%d" % i)

    time.sleep(1.5)  # background flushes write the tail; nothing is resolved
    producer._ledger.flush(10)
    ledger = [decode_ledger_record(m.value()) for m in read_topic(topics["pledger"], bootstrap=kafka_bootstrap)]
    ranges = [r for rec in ledger if isinstance(rec, ProducerRanges) for r in rec.ranges]
    assert ranges and all(r.status == "unconfirmed" for r in ranges)
    assert {s for r in ranges for s in range(r.first, r.last + 1)} == set(range(5))
    # What a crash leaves names the keys of those sends too.
    runs = [run for rec in ledger if isinstance(rec, ProducerKeys) for run in rec.runs]
    assert {run.first + i: k for run in runs for i, k in enumerate(run.keys)} == {i: f"k{i}" for i in range(5)}
    producer.purge()
    producer._producer.flush(1)
    producer._ledger.close(5)


def test_an_idle_session_writes_a_heartbeat_within_its_declared_alive_ms_and_close_writes_a_closed_end(
    kafka_bootstrap: str, topics: dict[str, str]
) -> None:
    """Readers tell a session killed with records it never ledgered from one that closed, or
    that runs on idle: every record declares alive_ms (heartbeat + flush interval), an idle
    session's ledger is never silent longer, and close() writes a closed session-end last."""
    producer = AuditedProducer(
        {"bootstrap.servers": kafka_bootstrap},
        ledger_topic=topics["pledger"],
        clients_topic=topics["clients"],
        ledger_flush_interval_s=0.2,
        ledger_heartbeat_s=1.0,
    )
    producer.produce(topics["data"], b"v", b"k")
    assert producer.flush(30) == 0
    flushed_at = time.time_ns() // 1_000_000
    time.sleep(3.5)  # idle: nothing to ledger but heartbeats
    idle_until = time.time_ns() // 1_000_000
    producer.close(30)

    stamped = [
        (m.timestamp()[1], decode_ledger_record(m.value()))
        for m in read_topic(topics["pledger"], bootstrap=kafka_bootstrap)
    ]
    records = [r for _, r in stamped]
    start = records[0]
    assert isinstance(start, SessionStart) and start.alive_ms == 1200
    ends = [(ts, r) for ts, r in stamped if isinstance(r, SessionEnd)]
    assert all(r.alive_ms == 1200 and r.last_seq == {topics["data"]: 0} for _, r in ends)
    idle = [ts for ts, r in ends if flushed_at < ts <= idle_until and not r.closed]
    assert len(idle) >= 2, ends  # heartbeats while idle, none of them a close
    gaps = [b - a for a, b in zip([flushed_at, *idle], [*idle, idle_until], strict=True)]
    assert max(gaps) <= 1200 + 500, gaps  # the declared bound, and the flush's own run time
    last = records[-1]
    assert isinstance(last, SessionEnd) and last.closed
    assert sum(isinstance(r, SessionEnd) and r.closed for r in records) == 1


def _produce(
    producer_class: type[AuditedProducer] | type[AuditedProducerV1],
    config: dict[str, Any],
    topics: dict[str, str],
    records: list[tuple[bytes, bytes]],
    **produce: Any,
) -> None:
    """(value, key) records to the data topic through a probed producer of `producer_class`, flushed."""
    with producer_class(config, ledger_topic=topics["pledger"], clients_topic=topics["clients"]) as producer:
        for value, key in records:
            producer.produce(topics["data"], value, key, **produce)


def _marked_offsets(topics: dict[str, str], bootstrap: str) -> list[tuple[int, int]]:
    """(partition, offset) of every mark the consumer ledger holds, a repeated mark as often as written."""
    return [
        (r.partition, offset)
        for m in read_topic(topics["cledger"], bootstrap=bootstrap)
        if isinstance(rec := decode_ledger_record(m.value()), ProcessedRanges)
        for r in rec.ranges
        for offset in range(r.first, r.last + 1)
    ]


def test_it_ledgers_processed_offset_ranges_and_reads_v1_and_v2_records(
    kafka_bootstrap: str, topics: dict[str, str]
) -> None:
    config = {"bootstrap.servers": kafka_bootstrap}
    _produce(AuditedProducerV1, config, topics, [(b"old%d" % i, b"o%d" % i) for i in range(20)])
    _produce(AuditedProducer, config, topics, [(b"new%d" % i, b"n%d" % i) for i in range(20)])
    consumer = AuditedConsumer(
        {**config, "group.id": uuid.uuid4().hex, "enable.auto.commit": False},
        ledger_topic=topics["cledger"],
        clients_topic=topics["clients"],
    )
    consumer.assign([TopicPartition(topics["data"], p, OFFSET_BEGINNING) for p in range(2)])
    polled: list[tuple[int, int]] = []
    versions: set[int] = set()
    while len(polled) < 40:
        msg = consumer.poll(1.0)
        if msg is None or msg.error() is not None:
            continue
        polled.append((msg.partition(), msg.offset()))
        versions.add(parse_audit_headers(msg.headers(), msg.key()).version)
        consumer.mark_processed(msg)
    consumer.close()
    assert versions == {1, 2}
    marked = set(_marked_offsets(topics, kafka_bootstrap))
    assert marked == set(polled)


def test_it_ledgers_one_range_per_run_of_marks_across_batches_and_the_last_marks_of_an_idle_consumer(
    kafka_bootstrap: str, topics: dict[str, str], hot_path: str
) -> None:
    with AuditedProducer(
        {"bootstrap.servers": kafka_bootstrap}, ledger_topic=topics["pledger"], clients_topic=topics["clients"]
    ) as producer:
        for i in range(700):
            producer.produce(topics["data"], b"v%d" % i, b"k%d" % i)
    consumer = AuditedConsumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False},
        ledger_topic=topics["cledger"],
        clients_topic=topics["clients"],
        ledger_flush_interval_s=0.2,
    )
    assert consumer.native is (hot_path == "native")
    consumer.assign([TopicPartition(topics["data"], p, OFFSET_BEGINNING) for p in range(2)])
    polled: list[tuple[int, int]] = []
    while len(polled) < 700:
        msg = consumer.poll(1.0)
        if msg is None or msg.error() is not None:
            continue
        polled.append((msg.partition(), msg.offset()))
        consumer.mark_processed(msg)
    # Marked again after a seek back: a range of its own (the truth keeps both).
    again = [(p, o) for p, o in polled if p == polled[0][0]][:5]
    consumer.seek(TopicPartition(topics["data"], again[0][0], again[0][1]))
    while len(polled) < 705:
        msg = consumer.poll(1.0)
        if msg is None or msg.error() is not None:
            continue
        polled.append((msg.partition(), msg.offset()))
        consumer.mark_processed(msg)
    # Runs of the marking order, by hand: a mark continues a run when it is the next offset
    # of the same partition.
    runs: list[list[int]] = []
    for partition, offset in polled:
        if runs and runs[-1][0] == partition and runs[-1][2] == offset - 1:
            runs[-1][2] = offset
        else:
            runs.append([partition, offset, offset])

    def ledgered() -> list[tuple[int, int, int]]:
        ledger = [decode_ledger_record(m.value()) for m in read_topic(topics["cledger"], bootstrap=kafka_bootstrap)]
        return [
            (r.partition, r.first, r.last) for rec in ledger if isinstance(rec, ProcessedRanges) for r in rec.ranges
        ]

    # idle: the background flush (every 0.2 s) writes the marks held, fewer than a batch
    wait_until(lambda: len(ledgered()) >= len(runs), 10, "the consumer ledger's ranges")
    assert ledgered() == [tuple(run) for run in runs]

    def ends() -> list[SessionEnd]:
        ledger = [decode_ledger_record(m.value()) for m in read_topic(topics["cledger"], bootstrap=kafka_bootstrap)]
        return [rec for rec in ledger if isinstance(rec, SessionEnd) and rec.session == consumer.session_id]

    # the running session's checkpoints are no close; close()'s last record is, after every mark: a
    # session whose ledger ends without it died with the marks it had not written yet
    wait_until(lambda: bool(ends()), 10, "a checkpoint of the running session")
    assert not any(end.closed for end in ends())
    consumer.close()
    assert ends()[-1].closed and sum(end.closed for end in ends()) == 1


def test_it_dates_the_first_range_after_an_idle_spell_no_earlier_than_its_record_was_produced(
    kafka_bootstrap: str, topics: dict[str, str], hot_path: str
) -> None:
    """Readers take a range's first_ms as its marks' time: a mark dated before its record
    existed is taken for one of a truncated log's lost records."""
    marking = MarkingConsumer(kafka_bootstrap, topics, ledger_flush_interval_s=0.2)
    assert marking.consumer.native is (hot_path == "native")

    marking.produce(0, b"before the idle spell")
    first = marking.poll_and_mark()
    time.sleep(3.0)  # idle: no marks, the background flush ticks every 0.2 s
    second_record = marking.produce(1, b"after the idle spell")
    produced_ms = second_record.timestamp()[1]  # CreateTime, the producer's clock at produce()
    time.sleep(1.0)  # the record waits in the topic a little before the application polls it
    second = marking.poll_and_mark()
    marked_by_ms = time.time_ns() // 1_000_000
    assert second == (1, second_record.offset())

    wait_until(lambda: {first, second} <= set(marking.ranges()), 10, "both marks in the consumer ledger")
    marking.close()
    first_ms, last_ms = marking.ranges()[second]
    # a lower bound of the mark's time, not older than the record it marks
    assert produced_ms <= first_ms <= marked_by_ms
    assert first_ms <= last_ms


def test_it_dates_a_mark_made_right_after_its_record_was_produced_no_earlier_than_the_record(
    kafka_bootstrap: str, topics: dict[str, str], hot_path: str
) -> None:
    """After an idle spell, a record produced and marked within one flush interval: its range
    must not be dated at the flush tick before the record existed (a rebuild run would drop
    the mark as maybe one of a truncated log's records, and call the record unprocessed)."""
    # the flush interval wide, so the record below falls between two ticks
    marking = MarkingConsumer(kafka_bootstrap, topics, ledger_flush_interval_s=4.0)
    assert marking.consumer.native is (hot_path == "native")

    marking.produce(0, b"before")
    first = marking.poll_and_mark()
    # The flush tick that writes this mark has just passed: the next one is about 4 s away.
    wait_until(lambda: first in marking.ranges(), 15, "the first mark in the consumer ledger")
    tick_seen_ms = time.time_ns() // 1_000_000
    record = marking.produce(1, b"right after a tick")
    produced_ms = record.timestamp()[1]  # CreateTime, the producer's clock at produce()
    second = marking.poll_and_mark()
    marked_by_ms = time.time_ns() // 1_000_000
    assert second == (1, record.offset())
    # The premise (no tick between the record and its mark) holds when this was quick.
    assert marked_by_ms - tick_seen_ms < 2_500, "too slow to land between two flush ticks"
    wait_until(lambda: second in marking.ranges(), 15, "the second mark in the consumer ledger")
    marking.close()
    first_ms, last_ms = marking.ranges()[second]
    assert produced_ms <= first_ms <= marked_by_ms
    assert first_ms <= last_ms


def test_it_names_the_marks_its_ledger_could_not_write_once_the_ledger_takes_records_again(
    kafka_bootstrap: str, topics: dict[str, str], hot_path: str
) -> None:
    """Readers must not call a record unprocessed whose mark the ledger lost: the probe names
    such marks. Ground truth: the offsets the test marked, and what the real consumer ledger
    holds (the broker refuses its records while the topic's max.message.bytes is tiny)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    from auditor.probes import MarksLost

    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(9):
        producer.produce(topics["data"], b"v%d" % i, partition=0)
    assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})

    def set_ledger_max_bytes(value: str | None) -> None:
        op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
        entry = ConfigEntry("max.message.bytes", value or "", incremental_operation=op)
        resource = ConfigResource(ConfigResource.Type.TOPIC, topics["cledger"], incremental_configs=[entry])
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(30)
        time.sleep(2.0)  # the brokers apply a topic's dynamic config within moments

    consumer = AuditedConsumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False},
        ledger_topic=topics["cledger"],
        clients_topic=topics["clients"],
        ledger_flush_interval_s=0.2,
        ledger_flush_timeout_s=5.0,
    )
    assert consumer.native is (hot_path == "native")
    consumer.assign([TopicPartition(topics["data"], 0, OFFSET_BEGINNING)])
    marked: list[int] = []

    def mark(count: int) -> None:
        goal = len(marked) + count
        while len(marked) < goal:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                consumer.mark_processed(msg)
                marked.append(cast(int, msg.offset()))

    def ledger() -> list[Any]:
        return [decode_ledger_record(m.value()) for m in read_topic(topics["cledger"], bootstrap=kafka_bootstrap)]

    def ledgered_marks() -> set[int]:
        return {
            offset
            for rec in ledger()
            if isinstance(rec, ProcessedRanges)
            for r in rec.ranges
            for offset in range(r.first, r.last + 1)
        }

    try:
        mark(3)
        wait_until(lambda: ledgered_marks() == {0, 1, 2}, 10, "the first marks in the ledger")
        set_ledger_max_bytes("64")
        mark(3)
        wait_until(lambda: consumer.stats()["ledger_records_failed"] > 0, 10, "a ledger record refused")
        started = time.monotonic()
        consumer.commit(offsets=[TopicPartition(topics["data"], 0, 6)], asynchronous=False)
        assert time.monotonic() - started < 5.0  # the probe does not hold the commit up
        set_ledger_max_bytes(None)
        wait_until(lambda: any(isinstance(rec, MarksLost) for rec in ledger()), 15, "a marks-lost record in the ledger")
    finally:
        consumer.close()
    records = ledger()
    lost = {
        (r.topic, r.partition, offset)
        for rec in records
        if isinstance(rec, MarksLost)
        for r in rec.ranges
        for offset in range(r.first, r.last + 1)
    }
    unwritten = {(topics["data"], 0, offset) for offset in marked} - {
        (topics["data"], 0, offset) for offset in ledgered_marks()
    }
    assert marked == [0, 1, 2, 3, 4, 5]
    assert unwritten  # the broker did refuse marks
    assert lost == unwritten
    assert {rec.sid for rec in records if isinstance(rec, MarksLost)} == {consumer.session_id}


def test_it_summarizes_v2_ledgers_and_finds_their_gaps_beside_v1_ones() -> None:
    from auditor.probes import (
        SeenRecord,
        find_reprocessed,
        find_sequence_gaps,
        processed_offsets,
        summarize_producer_ledger,
    )
    from auditor.probes.codec import (
        LEDGER_V2,
        FailureEntry,
        OffsetRange,
        ProducerBatch,
        ProducerEntry,
        SeqRange,
        SessionEnd,
    )

    v2 = "2" * 32
    records = [
        ProducerRanges(v2, "app", "t", (SeqRange(0, 9, "unconfirmed", 1, 9),)),  # the tail, then resolved:
        ProducerRanges(v2, "app", "t", (SeqRange(0, 5, "acked", 1, 5), SeqRange(6, 7, "unconfirmed", 1, 9))),
        ProducerFailures(v2, "app", "t", (FailureEntry(6, 9, 0, "too large", "not", "k7", 9),)),
        SessionEnd("producer", v2, 10, {"t": 9}),  # 8..9 never resolved: a crash
        ProducerBatch("1" * 32, "app", "t", (ProducerEntry(0, "acked", 0, 40, None, "persisted", "a", 1),)),
    ]
    sessions = summarize_producer_ledger(records)
    ledger = sessions[v2].topics["t"]
    assert sorted(ledger.acked_ranges) == list(range(6)) and sorted(ledger.sent) == [6, 7, 8, 9]
    assert [f.audit_id for f in ledger.failures] == ["k7"] and sessions[v2].last_seq("t") == 9
    seen = [SeenRecord(v2, "t", seq) for seq in (0, 1, 2, 3, 5, 8)]
    gaps = find_sequence_gaps(seen, sessions)
    assert [(g.pid, g.first, g.last, g.reason) for g in gaps] == [
        ("1" * 32, 0, 0, "acked-not-seen"),
        (v2, 4, 4, "acked-not-seen"),
        (v2, 6, 7, "unconfirmed-not-seen"),
        (v2, 9, 9, "unconfirmed-not-seen"),
    ]
    marks = [
        ProcessedRanges("c", "g", (OffsetRange("t", 0, 0, 4, 1, 2), OffsetRange("t", 0, 3, 3, 2, 2))),
    ]
    assert processed_offsets(marks, "g") == {("t", 0, o) for o in range(5)}
    assert [(r.offset, r.times) for r in find_reprocessed(marks)] == [(3, 2)]
    assert LEDGER_V2 == 2


def test_it_says_once_that_per_call_callbacks_see_failures_only_by_default(
    kafka_bootstrap: str, topics: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    reports: list[Any] = []
    producer = AuditedProducer(
        {"bootstrap.servers": kafka_bootstrap}, ledger_topic=topics["pledger"], clients_topic=topics["clients"]
    )
    with caplog.at_level("WARNING", logger="auditor.probes.producer"):
        for i in range(3):
            producer.produce(topics["data"], b"v", b"k%d" % i, on_delivery=lambda err, msg: reports.append(err))
        assert producer.flush(30) == 0
    producer.close(30)
    warnings = [r.getMessage() for r in caplog.records if "failures only" in r.getMessage()]
    assert len(warnings) == 1 and "delivery_reports='all'" in warnings[0]
    assert reports == []  # all three were delivered: the callback saw no success

    every = AuditedProducer(
        {"bootstrap.servers": kafka_bootstrap},
        ledger_topic=topics["pledger"],
        clients_topic=topics["clients"],
        delivery_reports="all",
    )
    caplog.clear()
    with caplog.at_level("WARNING", logger="auditor.probes.producer"):
        every.produce(topics["data"], b"v", b"k9", on_delivery=lambda err, msg: reports.append(err))
        assert every.flush(30) == 0
    every.close(30)
    assert reports == [None] and not [r for r in caplog.records if "failures only" in r.getMessage()]


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_flush_and_close_with_a_timeout_return_within_it_when_the_ledger_cannot_be_written(
    kafka_bootstrap: str, topics: dict[str, str], version: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The ledger's writes wait: its topic does not exist and the broker creates none (as when
    # the brokers that would take its acks=all writes are down). The application's own record
    # is delivered; a flush(2) must not hold the application for ledger_flush_timeout_s.
    cls = AuditedProducer if version == "v2" else AuditedProducerV1
    producer = cls(
        {"bootstrap.servers": kafka_bootstrap},
        ledger_topic=f"_audit.absent-{uuid.uuid4().hex[:8]}",
        clients_topic=topics["clients"],
        ledger_flush_timeout_s=20,
    )
    producer.produce(topics["data"], b"v", b"k")
    started = time.monotonic()
    assert producer.flush(2) == 0
    flushed_s = time.monotonic() - started
    started = time.monotonic()
    producer.close(2)
    closed_s = time.monotonic() - started
    assert flushed_s < 4 and closed_s < 4, (flushed_s, closed_s)  # was ~20 s each: ledger_flush_timeout_s
    assert [m.key() for m in read_topic(topics["data"], bootstrap=kafka_bootstrap)] == [b"k"]
    assert "not yet written" in caplog.text  # the ledger's lag is said, not hidden


def test_a_flush_that_may_not_wait_logs_no_ledger_lag_and_the_ledger_is_written_after(
    kafka_bootstrap: str, topics: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    # An application that calls flush(0) after each send asks not to wait: the ledger's records
    # are on their way (the background flush writes them), not an error to log on every call.
    producer = AuditedProducer(
        {"bootstrap.servers": kafka_bootstrap},
        ledger_topic=topics["pledger"],
        clients_topic=topics["clients"],
        ledger_flush_interval_s=0.2,
    )
    with caplog.at_level("WARNING", logger="auditor.probes"):
        for i in range(20):
            producer.produce(topics["data"], b"v", b"k%d" % i)
            producer.flush(0)
    assert "not yet written" not in caplog.text
    producer.close(30)
    ledger = [decode_ledger_record(m.value()) for m in read_topic(topics["pledger"], bootstrap=kafka_bootstrap)]
    ranges = [r for rec in ledger if isinstance(rec, ProducerRanges) for r in rec.ranges]
    assert {s for r in ranges if r.status == "acked" for s in range(r.first, r.last + 1)} == set(range(20))
    last = ledger[-1]
    assert isinstance(last, SessionEnd) and last.closed


def test_rebalance_callbacks_get_the_audited_consumer_and_a_commit_in_on_revoke_writes_the_marks_first(
    kafka_bootstrap: str, topics: dict[str, str]
) -> None:
    config = {"bootstrap.servers": kafka_bootstrap}
    _produce(AuditedProducer, config, topics, [(b"v%d" % i, b"k%d" % i) for i in range(6)], partition=0)
    consumer = AuditedConsumer(
        {**config, "group.id": uuid.uuid4().hex, "enable.auto.commit": False, "auto.offset.reset": "earliest"},
        ledger_topic=topics["cledger"],
        clients_topic=topics["clients"],
        ledger_flush_interval_s=600,  # no background flush: only the probe's commit writes the marks
    )
    given: list[Any] = []
    ledger_at_revoke: list[int] = []

    def on_assign(c: Any, partitions: list[TopicPartition]) -> None:
        given.append(c)

    def on_revoke(c: Any, partitions: list[TopicPartition]) -> None:
        given.append(c)
        c.commit(asynchronous=False)  # what was processed, before the partitions go
        ledger_at_revoke.append(len(_marked_offsets(topics, kafka_bootstrap)))

    consumer.subscribe([topics["data"]], on_assign=on_assign, on_revoke=on_revoke)
    polled = 0
    deadline = time.monotonic() + 60
    while polled < 6:
        assert time.monotonic() < deadline, f"polled {polled} of 6"
        msg = consumer.poll(1.0)
        if msg is None or msg.error() is not None:
            continue
        consumer.mark_processed(msg)
        polled += 1
    consumer.unsubscribe()  # the partitions are revoked: on_revoke commits
    consumer.close()
    assert given and all(c is consumer for c in given)
    # the commit in on_revoke went through the probe: the six marks were in the ledger when it returned
    assert ledger_at_revoke[:1] == [6]


@pytest.mark.parametrize("ending", ["flush", "close"])
def test_a_checkpoint_names_no_send_that_raced_the_flush_past_its_unresolved_tail(
    kafka_bootstrap: str, topics: dict[str, str], ending: str
) -> None:
    """A send of another thread that lands between flush()'s (or close()'s) unresolved tail and
    its session-end has no ledger entry yet; a session-end naming it makes it a hole that
    readers judge `never-sent` at once. The race is made deterministic: the send is made from
    the step that follows the tail (the keys). Ground truth: the produce() calls that returned."""
    producer = AuditedProducer(
        {"bootstrap.servers": kafka_bootstrap},
        ledger_topic=topics["pledger"],
        clients_topic=topics["clients"],
        ledger_flush_interval_s=600.0,
    )
    for i in range(5):
        producer.produce(topics["data"], b"v%d" % i, b"k%d" % i)
    write_keys = producer._write_keys
    raced: list[int] = []

    def keys_after_a_racing_send() -> None:
        if not raced:
            producer.produce(topics["data"], b"late", b"late")  # returned: sequence 5 was sent
            raced.append(5)
        write_keys()

    producer._write_keys = keys_after_a_racing_send  # type: ignore[method-assign]
    if ending == "flush":
        assert producer.flush(30) == 0
        producer._write_keys = write_keys  # type: ignore[method-assign]
    producer.close(30)
    assert raced == [5]

    ledger = [decode_ledger_record(m.value()) for m in read_topic(topics["pledger"], bootstrap=kafka_bootstrap)]
    covered: set[int] = set()
    ends = []
    for record in ledger:  # one session: its records are in one partition, in order
        if isinstance(record, ProducerRanges):
            covered |= {s for r in record.ranges for s in range(r.first, r.last + 1)}
        elif isinstance(record, SessionEnd) and topics["data"] in record.last_seq:
            ends.append(record.last_seq[topics["data"]])
            assert set(range(ends[-1] + 1)) <= covered, (ends[-1], sorted(covered))
    # The raced send is ledgered by the close after flush(); one racing close() itself is not
    # (the application sent it into a closing producer), and the closing end does not name it.
    assert covered == set(range(6 if ending == "flush" else 5))
    assert ends[-1] == max(covered)


def test_keys_of_several_kilobytes_are_ledgered_in_entries_the_ledger_producer_takes(
    kafka_bootstrap: str, topics: dict[str, str]
) -> None:
    """256 keys of 5 KB: one `keys` entry of them (1.3 MB) was over the ledger producer's
    message.max.bytes, whose produce() raised out of the application's flush(). Ground truth:
    the produce() calls that returned and a full read of the topic."""
    keys = [b"%03d-" % i + b"k" * 5_000 for i in range(256)]
    producer = AuditedProducer(
        {"bootstrap.servers": kafka_bootstrap, "linger.ms": 5},
        ledger_topic=topics["pledger"],
        clients_topic=topics["clients"],
        ledger_flush_interval_s=600.0,
    )
    for key in keys:
        producer.produce(topics["data"], b"v", key)
    assert producer.flush(30) == 0
    producer.close(30)
    assert sorted(m.key() for m in read_topic(topics["data"], bootstrap=kafka_bootstrap)) == keys

    ledger = [decode_ledger_record(m.value()) for m in read_topic(topics["pledger"], bootstrap=kafka_bootstrap)]
    named = {
        run.first + i: k
        for rec in ledger
        if isinstance(rec, ProducerKeys)
        for run in rec.runs
        for i, k in enumerate(run.keys)
    }
    assert named == {seq: key.decode() for seq, key in enumerate(keys)}


def test_a_v1_ledger_write_the_client_refuses_never_costs_the_application_a_delivery_report(
    kafka_bootstrap: str, topics: dict[str, str]
) -> None:
    """The ledger producer refuses each ledger record (over its message.max.bytes, raised by
    produce() itself) while the v1 probe writes them from inside its delivery callback: the
    exception skipped the application's callbacks of the rest of that report batch and came
    out of flush(). Ground truth: the application's own delivery callbacks."""
    reports: list[tuple[bytes, Any]] = []
    producer = AuditedProducerV1(
        {"bootstrap.servers": kafka_bootstrap, "linger.ms": 50},
        ledger_topic=topics["pledger"],
        clients_topic=topics["clients"],
        ledger_batch_size=1,  # each report's row is written from inside the delivery callback
        ledger_config={"message.max.bytes": 4_000},
    )
    keys = [b"%02d-" % i + b"k" * 5_000 for i in range(20)]
    for key in keys:
        producer.produce(topics["data"], b"v", key, on_delivery=lambda err, msg: reports.append((msg.key(), err)))
    assert producer.flush(30) == 0
    producer.close(30)
    assert sorted(key for key, _ in reports) == keys  # each once
    assert all(err is None for _, err in reports)
    assert sorted(m.key() for m in read_topic(topics["data"], bootstrap=kafka_bootstrap)) == keys


def test_a_poll_stopped_by_a_raising_callback_proves_nothing_and_the_failure_it_left_is_never_acked(
    kafka_bootstrap: str, topics: dict[str, str], probe_topic: Any, hot_path: str
) -> None:
    """Stop 72: a delivery callback that raises stops confluent-kafka's poll() with the other
    reports left queued. The timeout proof (a poll that started past message.timeout.ms +
    socket.timeout.ms + slack after a snapshot has completed) took that poll as one, ledgered
    the failed send still queued `acked`, and its failure came later."""
    small = probe_topic("h72-small", 1, {"max.message.bytes": "2000"})

    def raise_on_success(err: Any, msg: Any) -> None:
        if err is None:
            raise RuntimeError("the application's callback raised")

    producer = AuditedProducer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "message.timeout.ms": 1000,  # the report bound, shortened: 1.01 s + slack
            "socket.timeout.ms": 10,
            "linger.ms": 0,
            "on_delivery": raise_on_success,
        },
        ledger_topic=topics["pledger"],
        clients_topic=topics["clients"],
        ledger_flush_interval_s=3600,  # the test drives every resolution itself
    )
    assert producer._report_bound_s is not None
    producer.produce(topics["data"], b"ok", b"k0", 0)
    time.sleep(0.5)  # its success report comes first
    producer.produce(small, b"x" * 5000, b"k1")  # the broker refuses it: too large
    producer._resolve()  # the snapshot: both sequences
    time.sleep(producer._report_bound_s + 1.5)  # both reports are queued long before
    with pytest.raises(RuntimeError):
        producer.poll(0)  # served the success, raised: the failure is still queued
    producer._resolve()
    producer.poll(0)  # the failure report
    producer.close(30)

    ledger = [decode_ledger_record(m.value()) for m in read_topic(topics["pledger"], bootstrap=kafka_bootstrap)]
    ranges = [r for rec in ledger if isinstance(rec, ProducerRanges) and rec.topic == small for r in rec.ranges]
    failures = [f for rec in ledger if isinstance(rec, ProducerFailures) and rec.topic == small for f in rec.entries]
    assert [(f.first, f.last, f.audit_id) for f in failures] == [(0, 0, "k1")]
    assert ranges and all(r.status == "unconfirmed" for r in ranges)


def test_it_reads_acks_and_the_report_bound_as_librdkafka_applies_the_config(
    kafka_bootstrap: str, topics: dict[str, str]
) -> None:
    """Stop 72: acks and the timeouts were read from the top level, the first alias first. But
    confluent-kafka applies a nested `default.topic.config` after every other key, and of two
    aliases librdkafka runs with the later: `{"default.topic.config": {"acks": 0}}` sends
    fire-and-forget, and was ledgered acked."""
    acks_zero_configs: list[dict[str, Any]] = [
        {"default.topic.config": {"acks": 0}},
        {"acks": 1, "request.required.acks": 0},
    ]
    for config in acks_zero_configs:
        producer = AuditedProducer(
            {"bootstrap.servers": kafka_bootstrap, **config},
            ledger_topic=topics["pledger"],
            clients_topic=topics["clients"],
        )
        for i in range(3):
            producer.produce(topics["data"], b"v%d" % i, b"k%d" % i)
        assert producer.flush(30) == 0
        producer.close(30)
        ledger = [decode_ledger_record(m.value()) for m in read_topic(topics["pledger"], bootstrap=kafka_bootstrap)]
        ranges = [
            (r.first, r.last, r.status)
            for rec in ledger
            if isinstance(rec, ProducerRanges) and rec.pid == producer.session_id
            for r in rec.ranges
        ]
        assert ranges and all(status == "unconfirmed" for _, _, status in ranges), (config, ranges)

    timeouts: list[tuple[dict[str, Any], float]] = [
        ({"message.timeout.ms": 500, "delivery.timeout.ms": 3000}, 3.0),  # the later alias
        ({"delivery.timeout.ms": 3000, "message.timeout.ms": 500}, 0.5),
        ({"default.topic.config": {"message.timeout.ms": 2000}, "message.timeout.ms": 500}, 2.0),
    ]
    for config, message_timeout_s in timeouts:
        producer = AuditedProducer(
            {"bootstrap.servers": kafka_bootstrap, "socket.timeout.ms": 10, **config},
            ledger_topic=topics["pledger"],
            clients_topic=topics["clients"],
        )
        assert producer._report_bound_s == pytest.approx(message_timeout_s + 0.01 + 5.0), config
        producer.close(30)


@pytest.mark.parametrize("version", [1, 2])
def test_a_session_whose_ledger_lost_a_record_is_never_ledgered_closed_nor_names_the_sequences_it_held(
    kafka_bootstrap: str, topics: dict[str, str], probe_topic: Any, version: int
) -> None:
    """Stop 72: the ledger topic refused the batch holding the session-start, ranges and keys (a
    3000-byte key, max.message.bytes=1500); only the closing `session-end` landed, naming
    sequences 0-1 and `closed`: readers judged them never-sent."""
    ledger_topic = probe_topic("h72-pledger", 1, {"max.message.bytes": "1500"})
    producer_class = AuditedProducer if version == 2 else AuditedProducerV1
    producer = producer_class(
        {"bootstrap.servers": kafka_bootstrap}, ledger_topic=ledger_topic, clients_topic=topics["clients"]
    )
    producer.produce(topics["data"], b"v", os.urandom(1500).hex().encode())  # 3000 bytes, incompressible
    producer.produce(topics["data"], b"v", b"k2")
    assert producer.flush(30) == 0
    producer.close(30)
    assert producer.stats()["ledger_records_failed"] + producer.stats()["ledger_records_dropped"] > 0

    ledger = [decode_ledger_record(m.value()) for m in read_topic(ledger_topic, bootstrap=kafka_bootstrap)]
    ends = [rec for rec in ledger if isinstance(rec, SessionEnd) and rec.session == producer.session_id]
    assert ends  # the session still says it ended (readers: it may have sent unledgered records)
    assert not any(end.closed for end in ends)
    assert all(topics["data"] not in end.last_seq for end in ends)
