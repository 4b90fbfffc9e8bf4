"""Real-broker helpers for the probe integration tests."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from auditor.probes import LedgerDecodeError, LedgerRecord, decode_ledger_record


def bootstrap_servers() -> str:
    return os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")


def broker_unreachable_reason() -> str | None:
    try:
        AdminClient({"bootstrap.servers": bootstrap_servers()}).list_topics(timeout=5)
    except KafkaException as exc:
        return f"Kafka at {bootstrap_servers()} is unreachable: {exc}"
    return None


def integration_marks() -> list[pytest.MarkDecorator]:
    """Marks for a broker test module: skipped without a broker only outside CI.

    Under CI (env CI set to anything) an unreachable broker fails the tests instead.
    """
    marks = [pytest.mark.integration]
    reason = broker_unreachable_reason()
    if reason is not None and "CI" not in os.environ:
        marks.append(pytest.mark.skip(reason=reason))
    return marks


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


class TopicFactory:
    """Creates uniquely named topics and deletes them all at the end."""

    def __init__(self, admin: AdminClient) -> None:
        self.admin = admin
        self.created: list[str] = []

    def __call__(self, prefix: str = "probe", partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        new = NewTopic(name, num_partitions=partitions, replication_factor=-1, config=config or {})
        self.admin.create_topics([new])[name].result(timeout=30)
        self.created.append(name)
        wait_for(lambda: name in self.admin.list_topics(timeout=5).topics, 20, f"topic {name}")
        return name

    def delete_all(self) -> None:
        if not self.created:
            return
        for future in self.admin.delete_topics(self.created).values():
            try:
                future.result(timeout=30)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise


def read_topic(topic: str, timeout: float = 30, bootstrap: str | None = None) -> list[Message]:
    """Every record of ``topic`` from the beginning to its current end, in partition order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap or bootstrap_servers(),
            "group.id": f"probe-reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        at_end: set[int] = set()
        records: list[Message] = []
        deadline = time.monotonic() + timeout
        while len(at_end) < len(partitions):
            if time.monotonic() > deadline:
                raise AssertionError(f"could not read {topic} to its end within {timeout}s")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise AssertionError(f"reading {topic}: {msg.error()}")
            at_end.discard(msg.partition())
            records.append(msg)
        return sorted(records, key=lambda m: (m.partition(), m.offset()))
    finally:
        consumer.close()


def read_ledger(topic: str) -> list[LedgerRecord]:
    decoded = [decode_ledger_record(msg.value()) for msg in read_topic(topic)]
    errors = [d for d in decoded if isinstance(d, LedgerDecodeError)]
    assert not errors, f"undecodable ledger records in {topic}: {errors}"
    return [d for d in decoded if not isinstance(d, LedgerDecodeError)]


def produce_plain(topic: str, records: Iterable[tuple[bytes, list[tuple[str, bytes]] | None]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap_servers()})
    for value, headers in records:
        producer.produce(topic, value, headers=headers)
    assert producer.flush(30) == 0


@dataclass(frozen=True)
class AuditTopics:
    producer_ledger: str
    consumer_ledger: str
    clients: str
