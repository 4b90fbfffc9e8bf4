"""Reading a topic's records in tests, as a plain confluent-kafka consumer does."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import TopicPartition


def consume(consumer: Any, topic: str, partition: int, start: int, count: int) -> list[Any]:
    """`count` records of topic/partition from `start`, by a consumer assigned to it."""
    consumer.assign([TopicPartition(topic, partition, start)])
    got: list[Any] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg)
    assert [m.offset() for m in got] == list(range(start, start + count))
    return got


def process_first(consumer: Any, topic: str, partition: int) -> Any:
    """Assigned to topic/partition from offset 0, the first record a probed `consumer` polls
    within a minute: marked processed (the test's stand-in for an application whose row update
    is then lost) and committed past, synchronously. The consumer is left open."""
    consumer.assign([TopicPartition(topic, partition, 0)])
    deadline = time.monotonic() + 60
    while True:
        assert time.monotonic() < deadline, "the consumer received nothing"
        msg = consumer.poll(0.5)
        if msg is None or msg.error() is not None:
            continue
        consumer.mark_processed(msg)
        consumer.commit(message=msg, asynchronous=False)
        return msg
