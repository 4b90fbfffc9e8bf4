"""AuditedConsumerV1 without a broker: header statistics, processed marks, commit order."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from auditor.probes import AuditedConsumerV1, decode_ledger_record
from auditor.probes.codec import ClientRecord, ConsumerBatch, SessionEnd, SessionStart
from tests.probes.fakes import FactoryRecorder, FakeConsumer

PID = "0123456789abcdef0123456789abcdef"
LEDGER = "consumer-ledger"
CLIENTS = "clients"


def record(offset: int, headers: Any = "audited", audit_id: bytes = b"id") -> Message:
    if headers == "audited":
        headers = [("audit-id", audit_id + b"%d" % offset), ("audit-pid", PID.encode()), ("audit-seq", b"%d" % offset),
                   ("audit-ts", b"1700000000000")]  # fmt: skip
    return Message(topic="t", partition=0, offset=offset, value=b"v", headers=headers)


class Harness:
    def __init__(self, messages: list[Message], **kwargs: Any) -> None:
        self.producers = FactoryRecorder()
        self.inner: FakeConsumer | None = None

        def consumer_factory(config: dict[str, Any]) -> FakeConsumer:
            self.inner = FakeConsumer(config, list(messages))
            return self.inner

        self.consumer = AuditedConsumerV1(
            {"bootstrap.servers": "fake:9092", "group.id": "processor", "sasl.password": "pw"},
            ledger_topic=LEDGER,
            clients_topic=CLIENTS,
            consumer_factory=consumer_factory,
            producer_factory=self.producers,
            **kwargs,
        )

    def ledger(self, topic: str = LEDGER) -> list[Any]:
        ledger = self.producers.ledger
        return [decode_ledger_record(i.value) for i in ledger.delivered + ledger.queued if i.topic == topic]

    def marks(self) -> list[tuple[str, int, int, str | None]]:
        return [
            (e.topic, e.partition, e.offset, e.audit_id)
            for r in self.ledger()
            if isinstance(r, ConsumerBatch)
            for e in r.entries
        ]


@pytest.fixture
def harness() -> Iterator[Harness]:
    h = Harness([record(0), record(1), record(2)])
    yield h
    h.consumer.close()


def test_it_marks_processed_records_in_the_ledger(harness: Harness) -> None:
    consumer = harness.consumer
    first = consumer.poll(1)
    second = consumer.poll(1)
    consumer.mark_processed(second)  # type: ignore[arg-type]
    consumer.mark_processed(first)  # type: ignore[arg-type]  (not the last polled: headers re-read)
    consumer.close()
    start, *_ = harness.ledger()
    assert start == SessionStart("consumer", consumer.session_id, "rdkafka", start.ts_ms, consumer.host, "processor")
    assert harness.marks() == [("t", 0, 1, "id1"), ("t", 0, 0, "id0")]
    assert isinstance(harness.ledger()[-1], SessionEnd)
    assert consumer.stats()["processed"] == 2 and consumer.stats()["received"] == 2


def test_it_marks_only_when_the_processing_block_succeeds(harness: Harness) -> None:
    consumer = harness.consumer
    for _ in range(3):
        msg = consumer.poll(1)
        assert msg is not None
        try:
            with consumer.processing(msg) as same:
                assert same is msg
                if msg.offset() == 1:
                    raise ValueError("handler failed")
        except ValueError:
            pass
    consumer.flush_ledger(1)
    assert [m[2] for m in harness.marks()] == [0, 2]
    assert consumer.stats()["processed"] == 2


def test_it_counts_missing_and_malformed_headers_without_raising() -> None:
    messages = [
        record(0),
        record(1, headers=None),
        record(2, headers=[("trace", b"x")]),
        record(3, headers=[("audit-id", b"x"), ("audit-seq", b"nope")]),
        record(4, headers=[("audit-id", b"x"), ("audit-pid", b"not-hex"), ("audit-seq", b"1"), ("audit-ts", b"1")]),
        Message(topic="t", partition=0, error=KafkaError(KafkaError._PARTITION_EOF)),
        record(5, headers=[("trace", b"x"), ("audit-ts", b"1"), ("audit-seq", b"1"), ("audit-pid", PID.encode()),
                           ("audit-id", b"reordered")]),
    ]  # fmt: skip
    h = Harness(messages)
    got = [h.consumer.poll(0) for _ in range(len(messages))]
    for msg in got:
        if msg is not None and msg.error() is None:
            h.consumer.mark_processed(msg)
    h.consumer.close()
    stats = h.consumer.stats()
    counts = {k: stats[k] for k in ("received", "processed", "missing_headers", "malformed_headers")}
    assert counts == {"received": 6, "processed": 6, "missing_headers": 2, "malformed_headers": 2}
    # A malformed set still yields its audit-id when one is there.
    assert [m[3] for m in h.marks()] == ["id0", None, None, "x", "x", "reordered"]


def test_it_ignores_marks_of_events(harness: Harness) -> None:
    harness.consumer.mark_processed(Message(topic="t", partition=0, error=KafkaError(KafkaError._PARTITION_EOF)))
    harness.consumer.flush_ledger(1)
    assert harness.marks() == [] and harness.consumer.stats()["processed"] == 0


def test_it_inspects_records_from_consume_too() -> None:
    h = Harness([record(0), record(1, headers=None)])
    assert len(h.consumer.consume(10, 0)) == 2
    assert (h.consumer.stats()["received"], h.consumer.stats()["missing_headers"]) == (2, 1)
    h.consumer.close()


def test_it_writes_marks_before_committing(harness: Harness) -> None:
    consumer = harness.consumer
    msg = consumer.poll(1)
    consumer.mark_processed(msg)  # type: ignore[arg-type]
    ledger = harness.producers.ledger
    assert not any(i.topic == LEDGER and b"processed" in i.value for i in ledger.delivered + ledger.queued)
    consumer.commit(message=msg, asynchronous=False)
    assert harness.marks() == [("t", 0, 0, "id0")]
    assert harness.inner is not None
    # the commit names the session in its metadata (stop 72, docs/contracts.md): the message's
    # position, as librdkafka commits it, with the metadata
    name, kwargs = harness.inner.calls[-1]
    assert (name, kwargs["asynchronous"]) == ("commit", False)
    [position] = kwargs["offsets"]
    assert (position.topic, position.partition, position.offset) == ("t", 0, 1)
    assert position.metadata == f"audit:v2:{consumer.session_id}"
    # the application left enable.auto.offset.store on: an explicit store is refused, as
    # librdkafka refuses it (the probe stores in its place, with the metadata)
    with pytest.raises(KafkaException):
        consumer.store_offsets(message=msg)
    assert harness.inner.config["enable.auto.offset.store"] is False


def test_it_publishes_a_masked_config(harness: Harness) -> None:
    [client] = harness.ledger(CLIENTS)
    assert isinstance(client, ClientRecord)
    assert (client.kind, client.group, client.config["sasl.password"]) == ("consumer", "processor", "****")
    assert harness.consumer.effective_config() == client.config


def test_it_delegates_assignment_calls(harness: Harness) -> None:
    harness.consumer.subscribe(["t"])
    harness.consumer.assign([])
    assert harness.consumer.assignment() == []
    assert harness.inner is not None
    assert [name for name, _ in harness.inner.calls] == ["subscribe", "assign"]


@pytest.mark.parametrize("native", [True, False])
def test_the_probes_rebalance_callbacks_store_the_handed_positions_then_call_the_applications(native: bool) -> None:
    h = Harness([record(0), record(1)], native=native)
    consumer, inner = h.consumer, h.inner
    assert inner is not None
    seen: list[tuple[Any, list[str], list[int]]] = []

    def on_revoke(given: Any, partitions: list[TopicPartition]) -> None:
        stored = [tp.offset for name, kwargs in inner.calls if name == "store_offsets" for tp in kwargs["offsets"]]
        seen.append((given, [tp.topic for tp in partitions], stored))

    consumer.subscribe(["t"], on_revoke=on_revoke)
    name, (topics, callbacks) = inner.calls[-1]
    # the probe's own three, whatever the application gave (confluent-kafka assigns and
    # unassigns after a callback that did not)
    assert (name, topics, set(callbacks)) == ("subscribe", ["t"], {"on_assign", "on_revoke", "on_lost"})
    consumer.poll(1)
    consumer.poll(1)
    callbacks["on_revoke"](inner, [TopicPartition("t", 0)])
    # the position after the last record handed was stored before the application's callback ran
    # (the first poll stores too since stop 77: a poll stores what it handed when 50 ms passed
    # since its last store, and none had)
    assert [(given, topics, stored[-1]) for given, topics, stored in seen] == [(consumer, ["t"], 2)]
    # lost partitions go to the application's on_revoke when it gave no on_lost, as confluent-kafka sends them
    callbacks["on_lost"](inner, [TopicPartition("t", 0)])
    assert len(seen) == 2 and seen[1][0] is consumer
    callbacks["on_assign"](inner, [TopicPartition("t", 0)])  # none given: only the store
    assert len(seen) == 2
    consumer.close()


@pytest.mark.parametrize("refused", ["never", "once", "always"])
def test_a_v2_consumers_close_says_closed_only_when_every_mark_is_written_or_named_lost(refused: str) -> None:
    """A reader takes a consumer session whose ledger ends without a `closed` session-end for one
    that died with marks it had not written: the end may say `closed` only when every mark of the
    session was written or named in a written `marks-lost` record."""
    from auditor.probes import AuditedConsumer, MarksLost

    producers = FactoryRecorder()
    consumer = AuditedConsumer(
        {"bootstrap.servers": "fake:9092", "group.id": "processor"},
        ledger_topic=LEDGER,
        clients_topic=CLIENTS,
        consumer_factory=lambda config: FakeConsumer(config, [record(0), record(1)]),
        producer_factory=producers,
        ledger_flush_interval_s=60,
    )
    for _ in range(2):
        msg = consumer.poll(1)
        assert msg is not None
        consumer.mark_processed(msg)
    fake, flush = producers.ledger, producers.ledger.flush

    def refusing(timeout: float | None = None) -> int:  # the broker refuses the ledger's records
        if refused == "once":
            fake.flush = flush  # type: ignore[method-assign]
        fake.deliver(KafkaError(KafkaError.NOT_ENOUGH_REPLICAS))
        return 0

    if refused != "never":
        fake.flush = refusing  # type: ignore[method-assign]
    consumer.flush_ledger()
    consumer.close()
    records = [decode_ledger_record(i.value) for i in fake.delivered + fake.queued if i.topic == LEDGER]
    ends = [r for r in records if isinstance(r, SessionEnd)]
    assert ends and ends[-1].closed is (refused != "always")
    assert sum(end.closed for end in ends) == (0 if refused == "always" else 1)
    # refused once: the marks are named in a marks-lost record, written before the closed end
    assert any(isinstance(r, MarksLost) for r in records) is (refused != "never")
