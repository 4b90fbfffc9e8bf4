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
