"""When AuditedProducer (contract v2) ledgers sequences acked, without a broker: the rules
that keep a crash or a failure from ever being ledgered as an ack."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError

from auditor.probes import AuditedProducer, ProducerFailures, ProducerRanges, decode_ledger_record
from tests.probes.fakes import FactoryRecorder

LEDGER = "ledger"
# Every rule holds on both produce() hot paths (native and pure Python).
pytestmark = pytest.mark.usefixtures("hot_path")


def make(factory: FactoryRecorder, **config: Any) -> AuditedProducer:
    return AuditedProducer(
        {"bootstrap.servers": "fake:9092", **config},
        ledger_topic=LEDGER,
        clients_topic="clients",
        producer_factory=factory,
        ledger_flush_interval_s=3600,  # the test drives every resolution itself
    )


def ranges(factory: FactoryRecorder, producer: AuditedProducer) -> list[tuple[int, int, str]]:
    producer._ledger.flush_entries()  # hand the buffered rows to the (fake) ledger producer
    ledger = factory.ledger
    ledger.flush()
    records = [decode_ledger_record(item.value) for item in ledger.delivered if item.topic == LEDGER]
    return [(r.first, r.last, r.status) for rec in records if isinstance(rec, ProducerRanges) for r in rec.ranges]


def test_it_acks_nothing_while_reports_may_still_come_and_everything_once_served() -> None:
    factory = FactoryRecorder()
    producer = make(factory)
    for i in range(3):
        producer.produce("t", b"v%d" % i)
    producer._background_resolve()  # queued, unserved: only the sent tail, unconfirmed
    assert ranges(factory, producer) == [(0, 2, "unconfirmed")]
    factory.producers[0].deliver()  # reports served: the out-queue is empty, no poll running
    producer._background_resolve()
    assert ranges(factory, producer) == [(0, 2, "unconfirmed"), (0, 2, "acked")]
    producer.close()


def test_it_resolves_under_load_once_a_poll_started_after_the_report_deadline() -> None:
    factory = FactoryRecorder()
    producer = make(factory)
    producer._report_bound_s = 0.05  # message.timeout.ms + socket.timeout.ms + slack, shortened
    producer.produce("t", b"a")
    producer.produce("t", b"b")
    producer._resolve()  # snapshot: seqs 0..1; still queued
    producer.produce("t", b"c")  # keeps the queue busy
    producer.poll(0)  # started before the deadline: proves nothing
    producer._resolve()  # snapshot: seqs 0..2
    assert ranges(factory, producer) == []
    time.sleep(0.06)
    producer.produce("t", b"d")  # after both snapshots: not resolved by this poll
    producer.poll(0)
    producer._resolve()
    assert ranges(factory, producer) == [(0, 1, "acked"), (2, 2, "acked")]
    producer.close()


def test_it_never_acks_the_window_a_failure_report_may_belong_to() -> None:
    factory = FactoryRecorder()
    producer = make(factory, retries=0)  # the refusal speaks for the one attempt: "not"
    for i in range(5):
        producer.produce("t", b"v%d" % i, b"k%d" % i)
    inner = factory.producers[0]
    inner.deliver(count=2)
    inner.deliver(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), count=1)  # seq 2; the report names none
    inner.deliver()
    producer.flush()
    ledger = factory.ledger
    records = [decode_ledger_record(item.value) for item in ledger.delivered + ledger.queued if item.topic == LEDGER]
    failures = [f for rec in records if isinstance(rec, ProducerFailures) for f in rec.entries]
    assert [(f.first, f.last, f.audit_id, f.persisted) for f in failures] == [(0, 4, "k2", "not")]
    resolved = [(r.first, r.last, r.status) for rec in records if isinstance(rec, ProducerRanges) for r in rec.ranges]
    assert resolved == [(0, 4, "unconfirmed")]
    producer.close()


def test_it_acks_with_acks_0_nothing_and_keeps_success_reports_when_asked() -> None:
    factory = FactoryRecorder()
    seen: list[Any] = []
    producer = make(factory, acks=0)
    producer.produce("t", b"v")
    producer.flush()
    assert ranges(factory, producer) == [(0, 0, "unconfirmed")]
    producer.close()

    factory = FactoryRecorder()
    producer = AuditedProducer(
        {"bootstrap.servers": "fake:9092", "on_delivery": lambda err, msg: seen.append(err)},
        ledger_topic=LEDGER,
        clients_topic="clients",
        producer_factory=factory,
    )
    producer.produce("t", b"v")
    producer.flush()
    assert seen == [None]  # an application callback without only-error keeps its success reports
    producer.close()


def test_a_poll_that_returns_while_an_earlier_one_still_serves_reports_proves_nothing() -> None:
    """Stop 72: librdkafka hands every queued report to the first of concurrent polls; a later
    poll on another thread finds the queue empty and returns while the first still runs the
    callbacks. The timeout proof took that later poll as one."""
    factory = FactoryRecorder()
    producer = make(factory)
    producer._report_bound_s = 0.05
    producer.produce("t", b"a")
    producer._resolve()  # the snapshot: seq 0, still queued
    time.sleep(0.06)
    serving = threading.Event()
    release = threading.Event()

    def first_poll(*_: float) -> int:
        serving.set()
        release.wait(10)  # it holds the report; its callback has not run yet
        return 0

    worker = threading.Thread(target=producer._serve, args=(first_poll, 0))
    worker.start()
    try:
        assert serving.wait(10)
        producer.poll(0)  # started after the first: found nothing to serve
        producer._resolve()
        assert ranges(factory, producer) == []
    finally:
        release.set()
        worker.join(10)
    producer.poll(0)
    producer._resolve()
    assert ranges(factory, producer) == [(0, 0, "acked")]
    producer.close()
