"""The lint's partition reader (clients topic, lag probe) against the real broker: a read that
meets the end of the log before the end it planned is incomplete, never taken as whole."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from auditor.lint.observed import _PartitionReader, _reader

pytestmark = pytest.mark.integration


def _topic_of_five(make_topic: Callable[..., str], kafka_bootstrap: str) -> str:
    topic = make_topic("lint-reader", partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(5):
        producer.produce(topic, f"v{i}".encode(), f"k{i}".encode(), partition=0)
    assert producer.flush(30) == 0  # offsets 0-4, from the delivery reports' count
    return topic


def test_a_read_that_meets_the_log_end_before_its_planned_end_is_incomplete(
    make_topic: Callable[..., str], kafka_bootstrap: str
) -> None:
    topic = _topic_of_five(make_topic, kafka_bootstrap)
    consumer = _reader({"bootstrap.servers": kafka_bootstrap})
    try:
        # planned to offset 8 (as after a leader change whose new leader's high watermark lags,
        # or a truncation): the broker's end of log at 5 comes first
        reader = _PartitionReader(consumer, {(topic, 0): (0, 8)})
        started = time.monotonic()
        offsets = [m.offset() for m in reader.messages(started + 3.0)]
    finally:
        consumer.close()
    assert offsets == [0, 1, 2, 3, 4]
    assert reader.complete is False
    assert time.monotonic() - started >= 2.5  # it waited for the planned end until the deadline


def test_a_read_that_reaches_its_planned_end_is_complete(make_topic: Callable[..., str], kafka_bootstrap: str) -> None:
    topic = _topic_of_five(make_topic, kafka_bootstrap)
    consumer = _reader({"bootstrap.servers": kafka_bootstrap})
    try:
        reader = _PartitionReader(consumer, {(topic, 0): (1, 5)})
        offsets = [m.offset() for m in reader.messages(time.monotonic() + 20.0)]
    finally:
        consumer.close()
    assert offsets == [1, 2, 3, 4]
    assert reader.complete is True
