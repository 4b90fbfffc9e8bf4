"""Committed offsets while a transaction holds new ones for the group (exactly-once consumers).

The auditor reads a group's committed offsets as a read_committed consumer reads where to
resume (require_stable, KIP-447): offsets sent to an open transaction are neither the group's
position yet nor forgotten; the answer waits for the transaction's end (asked again), and a
transaction that stays open past the read's deadline is an error naming it as a cause, never
the offsets from before it presented as current."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from spark_jobs.group_offsets import committed_offsets
from spark_jobs.kafka_offsets import KafkaReadError
from spark_jobs.kafka_security import admin_config

pytestmark = pytest.mark.integration


def _open_transaction(bootstrap: str, topic: str, group: str, offsets: dict[int, int]) -> tuple[Producer, Consumer]:
    """A transactional producer whose open transaction holds `offsets` for `group`; the group
    first committed offset 1 on every partition outside any transaction."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, p, 1) for p in offsets], asynchronous=False)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{group}-tx"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"v", b"k", partition=0)
    producer.send_offsets_to_transaction(
        [TopicPartition(topic, p, o) for p, o in offsets.items()], consumer.consumer_group_metadata(), 30
    )
    return producer, consumer


@pytest.mark.parametrize("outcome", ["commit", "abort"])
def test_offsets_an_open_transaction_holds_are_read_once_it_ends(
    make_topic: Callable[..., str], kafka_bootstrap: str, outcome: str
) -> None:
    topic = make_topic("txn-offsets", partitions=2)
    group = f"txn-offsets-{uuid.uuid4().hex[:8]}"
    sent = {0: 5, 1: 7}
    producer, consumer = _open_transaction(kafka_bootstrap, topic, group, sent)
    answer: dict[str, object] = {}

    def read() -> None:
        rows = committed_offsets(admin_config(kafka_bootstrap), [group], topic, [0, 1], timeout_s=5.0)
        answer["rows"], answer["at"] = rows, time.monotonic()

    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(2)
    ended = time.monotonic()
    if outcome == "commit":
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)
    reader.join(60)
    consumer.close()

    # truth: the transaction's offsets when the client's commit returned, the earlier ones when it aborted
    expected = sent if outcome == "commit" else {0: 1, 1: 1}
    assert answer["rows"] == [(group, p, o) for p, o in sorted(expected.items())]
    assert answer["at"] >= ended  # type: ignore[operator]


def test_a_transaction_open_past_the_deadline_is_a_named_error(
    make_topic: Callable[..., str], kafka_bootstrap: str
) -> None:
    topic = make_topic("txn-offsets-open", partitions=2)
    group = f"txn-offsets-open-{uuid.uuid4().hex[:8]}"
    producer, consumer = _open_transaction(kafka_bootstrap, topic, group, {0: 5, 1: 7})
    try:
        with pytest.raises(KafkaReadError) as raised:
            committed_offsets(admin_config(kafka_bootstrap), [group], topic, [0, 1], timeout_s=2.0, failover_s=3.0)
    finally:
        producer.abort_transaction(30)
        consumer.close()
    message = str(raised.value)
    assert group in message and "UNSTABLE_OFFSET_COMMIT" in message and "transaction holds" in message, message
