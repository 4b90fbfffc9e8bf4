"""AuditedProducerV1 without a broker: headers, sequences, callbacks and ledger rows."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message

from auditor.probes import AuditedProducerV1, decode_ledger_record, parse_audit_headers
from auditor.probes.codec import ClientRecord, ProducerBatch, SessionEnd, SessionStart
from tests.probes.fakes import FactoryRecorder, FakeProducer

LEDGER = "ledger-topic"
CLIENTS = "clients-topic"


@pytest.fixture
def factory() -> FactoryRecorder:
    return FactoryRecorder()


@pytest.fixture
def producer(factory: FactoryRecorder) -> Iterator[AuditedProducerV1]:
    audited = make_producer(factory)
    yield audited
    audited.close()


def make_producer(factory: FactoryRecorder, config: dict[str, Any] | None = None, **kwargs: Any) -> AuditedProducerV1:
    return AuditedProducerV1(
        {"bootstrap.servers": "fake:9092", "client.id": "app", **(config or {})},
        ledger_topic=LEDGER,
        clients_topic=CLIENTS,
        producer_factory=factory,
        **kwargs,
    )


def inner(factory: FactoryRecorder) -> FakeProducer:
    return factory.producers[0]


def headers_of(factory: FactoryRecorder) -> list[dict[str, Any]]:
    items = inner(factory).delivered + inner(factory).queued
    return [dict(item.headers or []) for item in items]


def ledger_records(factory: FactoryRecorder, topic: str = LEDGER) -> list[Any]:
    ledger = factory.ledger
    return [decode_ledger_record(item.value) for item in ledger.delivered + ledger.queued if item.topic == topic]


def test_it_stamps_the_four_headers_with_contiguous_sequences_per_topic(
    producer: AuditedProducerV1, factory: FactoryRecorder
) -> None:
    before = time.time_ns() // 1_000_000
    for i in range(3):
        producer.produce("a", b"v", key=f"k{i}".encode())
    producer.produce("b", b"v")
    after = time.time_ns() // 1_000_000
    parsed = [parse_audit_headers(h) for h in headers_of(factory)]
    assert all(p is not None and p.valid for p in parsed)
    assert [(p.seq, p.audit_id) for p in parsed[:3]] == [(0, "k0"), (1, "k1"), (2, "k2")]  # type: ignore[union-attr]
    assert parsed[3].seq == 0  # type: ignore[union-attr]
    assert {p.pid for p in parsed} == {producer.session_id}  # type: ignore[union-attr]
    assert all(before <= p.ts_ms <= after for p in parsed)  # type: ignore[union-attr, operator]
    assert producer.last_sequences() == {"a": 2, "b": 0}


def test_it_chooses_the_audit_id_by_precedence(factory: FactoryRecorder) -> None:
    with make_producer(factory, key_fn=lambda value, key: json.loads(value)["ticket"]) as by_fn:
        by_fn.produce("t", b'{"ticket": 4711}', key=b"ignored", headers=[("audit-id", b"also-ignored")])
    assert headers_of(factory)[0]["audit-id"] == "4711"

    second = FactoryRecorder()
    with make_producer(second) as plain:
        plain.produce("t", b"v", key=b"key", headers={"audit-id": b"explicit"})
        plain.produce("t", b"v", key=b"key")
        plain.produce("t", b"v", key="text-key")
        plain.produce("t", b"v", key=b"")
        plain.produce("t", b"v")
    ids = [h["audit-id"] for h in headers_of(second)]
    assert ids[:3] == [b"explicit", b"key", "text-key"]
    assert all(len(i) == 32 and i != ids[4] for i in ids[3:4]) and len(ids[4]) == 32


def test_it_preserves_user_headers_in_list_or_dict_form(producer: AuditedProducerV1, factory: FactoryRecorder) -> None:
    producer.produce("t", b"v", headers=[("trace", b"1"), ("trace", b"2"), ("audit-seq", b"999")])
    producer.produce("t", b"v", headers={"trace": "x", "audit-pid": b"forged"})
    first, second = (item.headers for item in inner(factory).queued)
    assert first[4:] == [("trace", b"1"), ("trace", b"2")]  # type: ignore[index]
    assert second[4:] == [("trace", "x")]  # type: ignore[index]
    assert [name for name, _ in first[:4]] == ["audit-id", "audit-pid", "audit-seq", "audit-ts"]  # type: ignore[index]
    assert parse_audit_headers(first).seq == 0 and parse_audit_headers(second).pid == producer.session_id  # type: ignore


def test_it_does_not_consume_a_sequence_when_the_queue_is_full(factory: FactoryRecorder) -> None:
    with make_producer(factory, {"queue.buffering.max.messages": 2}) as producer:
        producer.produce("t", b"0")
        producer.produce("t", b"1")
        with pytest.raises(BufferError):
            producer.produce("t", b"2")
        assert producer.last_sequences() == {"t": 1}
        producer.poll(0)
        inner(factory).deliver()
        producer.produce("t", b"2")
        seqs = [parse_audit_headers(h).seq for h in headers_of(factory)]  # type: ignore[union-attr]
        assert seqs == [0, 1, 2]


def test_it_keeps_sequences_contiguous_across_threads(producer: AuditedProducerV1, factory: FactoryRecorder) -> None:
    def send() -> None:
        for _ in range(300):
            producer.produce("t", b"v")

    threads = [threading.Thread(target=send) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seqs = sorted(parse_audit_headers(h).seq for h in headers_of(factory))  # type: ignore[union-attr, type-var]
    assert seqs == list(range(1200))


def test_it_calls_the_application_callbacks_with_the_same_arguments(factory: FactoryRecorder) -> None:
    seen: list[tuple[str, KafkaError | None, Message]] = []
    config_cb = lambda err, msg: seen.append(("config", err, msg))  # noqa: E731
    with make_producer(factory, {"on_delivery": config_cb}) as producer:
        producer.produce("t", b"0", on_delivery=lambda err, msg: seen.append(("per-call", err, msg)))
        producer.produce("t", b"1", callback=lambda err, msg: seen.append(("alias", err, msg)))
        producer.produce("t", b"2")
        inner(factory).deliver()
    assert [(who, err, msg.value(), msg.offset()) for who, err, msg in seen] == [
        ("per-call", None, b"0", 0),
        ("alias", None, b"1", 1),
        ("config", None, b"2", 2),
    ]
    assert "on_delivery" not in inner(factory).config


def test_it_honours_delivery_report_only_error_for_the_application_only(factory: FactoryRecorder) -> None:
    seen: list[KafkaError | None] = []
    with make_producer(
        factory, {"delivery.report.only.error": "true", "on_delivery": lambda e, m: seen.append(e)}
    ) as p:
        p.produce("t", b"ok")
        inner(factory).deliver()
        p.produce("t", b"bad")
        inner(factory).deliver(KafkaError(KafkaError._MSG_TIMED_OUT))
    assert [e.code() for e in seen if e is not None] == [KafkaError._MSG_TIMED_OUT] and len(seen) == 1
    assert "delivery.report.only.error" not in inner(factory).config
    [batch] = [r for r in ledger_records(factory) if isinstance(r, ProducerBatch)]
    assert [e.status for e in batch.entries] == ["acked", "failed"]


def test_it_ledgers_acks_and_failures_then_session_end(factory: FactoryRecorder) -> None:
    # retries=0: a failure's error speaks for the one attempt that may have written it
    producer = make_producer(factory, {"retries": 0})
    producer.produce("t", b"a", key=b"ka", partition=1)
    producer.produce("t", b"b", key=b"kb")
    inner(factory).deliver(count=1)
    inner(factory).deliver(KafkaError(KafkaError._MSG_TIMED_OUT))
    producer.produce("t", b"c", key=b"kc")
    inner(factory).deliver(KafkaError(KafkaError._UNKNOWN_PARTITION))
    producer.close()

    records = ledger_records(factory)
    start, *middle, end = records
    assert start == SessionStart("producer", producer.session_id, "app", start.ts_ms, producer.host, alive_ms=31_000)
    [batch] = middle
    assert isinstance(batch, ProducerBatch) and batch.topic == "t" and batch.client_id == "app"
    assert [(e.seq, e.status, e.partition, e.offset, e.persisted, e.audit_id) for e in batch.entries] == [
        (0, "acked", 1, 0, "persisted", "ka"),
        (1, "failed", 0, -1, "possibly", "kb"),
        (2, "failed", 0, -1, "not", "kc"),
    ]
    assert batch.entries[1].error == "_MSG_TIMED_OUT: Local: Message timed out"
    assert isinstance(end, SessionEnd) and end.last_seq == {"t": 2} and end.closed
    [client] = ledger_records(factory, CLIENTS)
    assert isinstance(client, ClientRecord) and client.session == producer.session_id and client.kind == "producer"
    assert inner(factory).closed and factory.ledger.closed


def test_it_flushes_the_ledger_in_batches_of_the_configured_size(factory: FactoryRecorder) -> None:
    with make_producer(factory, ledger_batch_size=10, ledger_flush_interval_s=3600) as producer:
        for _ in range(25):
            producer.produce("t", b"v")
        inner(factory).deliver()
        batches = [r for r in ledger_records(factory) if isinstance(r, ProducerBatch)]
        assert [len(b.entries) for b in batches] == [10, 10]
        assert producer.stats()["ledger_entries_pending"] == 5
    batches = [r for r in ledger_records(factory) if isinstance(r, ProducerBatch)]
    assert sorted(e.seq for b in batches for e in b.entries) == list(range(25))


def test_it_flushes_the_ledger_on_an_interval(factory: FactoryRecorder) -> None:
    with make_producer(factory, ledger_batch_size=1000, ledger_flush_interval_s=0.05) as producer:
        producer.produce("t", b"v")
        inner(factory).deliver()
        deadline = time.monotonic() + 5
        while not any(isinstance(r, ProducerBatch) for r in ledger_records(factory)):
            assert time.monotonic() < deadline, "the interval flush never happened"
            time.sleep(0.02)


def test_it_writes_a_session_end_on_each_flush_that_has_news(factory: FactoryRecorder) -> None:
    with make_producer(factory) as producer:
        producer.produce("t", b"v")
        assert producer.flush(1) == 0
        producer.flush(1)
        producer.produce("t", b"v")
        producer.flush(1)
    ends = [(r.last_seq, r.closed) for r in ledger_records(factory) if isinstance(r, SessionEnd)]
    assert ends == [({"t": 0}, False), ({"t": 1}, False), ({"t": 1}, True)]


def test_a_v1_session_declares_alive_ms_heartbeats_when_idle_and_closes_with_a_closed_end(
    factory: FactoryRecorder,
) -> None:
    """Liveness as in contract v2: readers tell a v1 session killed with delivery reports it
    never ledgered from one that closed or runs on idle. A heartbeat names no sequence whose
    report may not be ledgered yet: only what an earlier session-end named."""
    producer = make_producer(factory, ledger_flush_interval_s=0.05, ledger_heartbeat_s=0.2)
    producer.produce("t", b"v")
    assert producer.flush(1) == 0
    producer.produce("t", b"v")  # its report not served: sent, not ledgered
    deadline = time.monotonic() + 5
    while sum(isinstance(r, SessionEnd) for r in ledger_records(factory)) < 3:
        assert time.monotonic() < deadline, "no heartbeat while idle"
        time.sleep(0.02)
    inner(factory).deliver()
    producer.close()

    records = ledger_records(factory)
    assert isinstance(records[0], SessionStart) and records[0].alive_ms == 250
    ends = [r for r in records if isinstance(r, SessionEnd)]
    assert all(r.alive_ms == 250 for r in ends)
    checkpoint, *heartbeats, closing = ends
    assert checkpoint.last_seq == {"t": 0} and not checkpoint.closed
    assert len(heartbeats) >= 2 and all(r.last_seq == {"t": 0} and not r.closed for r in heartbeats)
    assert records[-1] is closing and closing.closed and closing.last_seq == {"t": 1}
    [batch] = [r for r in records if isinstance(r, ProducerBatch) and r.entries[0].seq == 1]
    assert records.index(batch) < records.index(closing)


def test_a_v1_close_with_delivery_reports_still_due_claims_no_closed_end(factory: FactoryRecorder) -> None:
    """Reports that come after close() are never ledgered: the session must stay one that
    may have sent records its ledger does not name. Nor may a checkpoint name the send whose
    report is still due (stop 70): it would be a hole judged `never-sent` at once."""
    producer = make_producer(factory)
    producer.produce("t", b"v")
    assert producer.flush(1) == 0  # sequence 0 delivered and ledgered: a checkpoint names it
    producer.produce("t", b"v")
    inner(factory).flush = lambda timeout=None: 1  # type: ignore[method-assign]  # the report never comes in time
    assert producer.close(0.5) == 1
    ends = [r for r in ledger_records(factory) if isinstance(r, SessionEnd)]
    assert ends and not any(r.closed for r in ends), ends
    assert [r.last_seq for r in ends] == [{"t": 0}] * len(ends), ends


def test_a_v1_producer_refuses_a_heartbeat_that_is_not_positive(factory: FactoryRecorder) -> None:
    with pytest.raises(ValueError, match="ledger_heartbeat_s must be > 0, got 0"):
        make_producer(factory, ledger_heartbeat_s=0)
    assert factory.producers == []


def test_it_masks_the_published_and_effective_config(factory: FactoryRecorder) -> None:
    with make_producer(factory, {"sasl.password": "hunter2", "ssl.key.password": "pw"}) as producer:
        assert producer.effective_config()["sasl.password"] == "****"
    [client] = ledger_records(factory, CLIENTS)
    assert client.config == producer.effective_config()
    assert "hunter2" not in json.dumps(client.config)


def test_it_delegates_the_rest_of_the_producer_api(producer: AuditedProducerV1, factory: FactoryRecorder) -> None:
    producer.produce("t", b"v")
    assert len(producer) == 1
    producer.purge()
    assert len(producer) == 0
    assert producer.producer is inner(factory)
    with pytest.raises(AttributeError):
        producer.no_such_method  # noqa: B018
    messages: list[dict[str, Any]] = [{"value": b"1"}, {"value": b"2", "key": b"k", "headers": {"h": b"x"}}]
    assert producer.produce_batch("t", messages) == 2
    assert [parse_audit_headers(h).seq for h in headers_of(factory)[-2:]] == [1, 2]  # type: ignore[union-attr]
