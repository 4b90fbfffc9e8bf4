"""The real broker: idempotent produce/consume and transactions seen by read_committed."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer

pytestmark = pytest.mark.integration


def consume_all(bootstrap: str, topic: str, isolation: str, expected_at_least: int = 0) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    eof = False
    for _ in range(200):
        msg = consumer.poll(0.5)
        if msg is None:
            if eof and len(values) >= expected_at_least:
                break
            continue
        if msg.error():
            eof = msg.error().code() == msg.error()._PARTITION_EOF
            continue
        values.append(msg.value())
    consumer.close()
    return values


def test_it_round_trips_through_an_idempotent_producer(kafka_bootstrap, make_topic):
    topic = make_topic("roundtrip")
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for i in range(20):
        producer.produce(topic, value=f"m{i}".encode())
    assert producer.flush(30) == 0
    assert consume_all(kafka_bootstrap, topic, "read_committed", 20) == [f"m{i}".encode() for i in range(20)]


def test_it_hides_aborted_transactions_from_read_committed(kafka_bootstrap, make_topic):
    topic = make_topic("txn")
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"committed-1")
    producer.produce(topic, value=b"committed-2")
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"aborted-1")
    producer.flush(30)
    producer.abort_transaction(30)

    assert consume_all(kafka_bootstrap, topic, "read_committed", 2) == [b"committed-1", b"committed-2"]
    assert consume_all(kafka_bootstrap, topic, "read_uncommitted", 3) == [b"committed-1", b"committed-2", b"aborted-1"]
