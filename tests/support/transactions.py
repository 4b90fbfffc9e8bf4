"""Committed offsets and an aborted transaction after them, for the lag readers' tests."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition


def caught_up_before_an_aborted_tail(bootstrap: str, topic: str, aborted_age_ms: int) -> tuple[str, str]:
    """Partition 0 of `topic`: 3 fresh committed records, then a transaction of 2 records
    `aborted_age_ms` old that is aborted (offsets 3, 4; the abort marker at 5). Returns two
    groups: one that committed offset 3 (it has read every committed record) and one at 0.
    The test's truth: what the producers were told (flush, abort_transaction)."""
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(3):
        plain.produce(topic, value=f"r{i}".encode(), partition=0)
    assert plain.flush(30) == 0
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"aborted-tail-{uuid.uuid4().hex[:6]}"})
    txn.init_transactions(30)
    txn.begin_transaction()
    then = int(time.time() * 1000) - aborted_age_ms
    for i in range(2):
        txn.produce(topic, value=f"a{i}".encode(), partition=0, timestamp=then + i)
    assert txn.flush(30) == 0
    txn.abort_transaction(30)
    caught_up, behind = (f"{name}-{uuid.uuid4().hex[:6]}" for name in ("caught-up", "behind"))
    commit_offsets(bootstrap, caught_up, [TopicPartition(topic, 0, 3)])
    commit_offsets(bootstrap, behind, [TopicPartition(topic, 0, 0)])
    return caught_up, behind


def commit_offsets(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    """`group` commits `offsets` without joining (as assign()-only consumers do)."""
    committer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committer.commit(offsets=offsets, asynchronous=False)
    finally:
        committer.close()
