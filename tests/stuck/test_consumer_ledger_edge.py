"""A record still in the topic whose processed mark went with the consumer ledger's oldest
records is not called skipped because its producer's clock runs ahead.

The record's timestamp is its producer's clock, the consumer ledger's edge (the timestamp of its
oldest record left) its consumer's. A producer 30 s ahead stamps a record after the edge that the
consumer processed, and marked, before it: the mark is gone with the ledger's deleted records,
and the ledger no longer speaks for the record. Real Kafka and PostgreSQL; ground truth from what
the test's consumer did, the ledger as read before and after the deletion, and the table.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer, TopicPartition

from auditor.lab.cluster import delete_records
from auditor.probes import ProcessedRanges, decode_ledger_record
from auditor.stuck.service import diagnose_rule
from tests.support.demo import read_topic
from tests.support.kafka_reads import consume
from tests.support.lost_marks import hand_driven_consumer, ledgered_offsets
from tests.support.stuck import StuckSetup
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

PRODUCER_AHEAD_MS = 30_000  # the producer's clock, ahead of the consumer's


def _ledger_offsets_marking(bootstrap: str, ledger: str, topic: str, offset: int) -> list[int]:
    """Offsets of the consumer-ledger records that mark `topic`/0@`offset` processed."""
    return [
        record.offset
        for record in read_topic(bootstrap, ledger)
        if isinstance(mark := decode_ledger_record(record.value), ProcessedRanges)
        and any(r.topic == topic and r.partition == 0 and r.first <= offset <= r.last for r in mark.ranges)
    ]


def test_a_record_stamped_by_a_clock_ahead_just_past_the_consumer_ledgers_edge_is_not_called_skipped(
    make_stuck: Callable[..., StuckSetup], kafka_admin
) -> None:
    setup = make_stuck(partitions=1)
    pipeline = setup.pipeline
    ledger = pipeline.probes.consumer_ledger
    with pipeline.store() as store:
        first, ahead = (store.insert_ticket({}).ticket_id for _ in range(2))

    # offset 0: `first`, stamped now; offset 1: `ahead`, stamped by a producer 30 s ahead
    producer = Producer({"bootstrap.servers": pipeline.bootstrap, "linger.ms": 0})
    stamped_ms = int(time.time() * 1000) + PRODUCER_AHEAD_MS
    producer.produce(pipeline.topic, b"{}", first.encode())
    producer.produce(pipeline.topic, b"{}", ahead.encode(), timestamp=stamped_ms)
    assert producer.flush(30) == 0

    consumer = hand_driven_consumer(pipeline)
    try:
        got = consume(consumer, pipeline.topic, 0, 0, 2)
        # `ahead` is processed first (its row update is lost: it stays NEW) ...
        consumer.mark_processed(got[1])
        wait_until(lambda: (0, 1) in ledgered_offsets(pipeline.bootstrap, ledger, pipeline.topic), 15, "its mark")
        time.sleep(1.0)  # (the next ledger record is stamped later)
        # ... then `first`, done; the group commits past both
        edge_from_ms = int(time.time() * 1000)
        with pipeline.store() as store:
            assert store.mark_done(first).value == "applied"
        consumer.mark_processed(got[0])
        wait_until(lambda: (0, 0) in ledgered_offsets(pipeline.bootstrap, ledger, pipeline.topic), 15, "its mark")
        edge_to_ms = int(time.time() * 1000)
        consumer.commit(offsets=[TopicPartition(pipeline.topic, 0, 2)], asynchronous=False)
    finally:
        consumer.close()

    # Retention of the consumer ledger, standing in: every record before the one marking `first`.
    (ahead_mark,) = _ledger_offsets_marking(pipeline.bootstrap, ledger, pipeline.topic, 1)
    (first_mark,) = _ledger_offsets_marking(pipeline.bootstrap, ledger, pipeline.topic, 0)
    assert ahead_mark < first_mark
    delete_records(kafka_admin, [TopicPartition(ledger, 0, first_mark)])

    # Ground truth: `ahead` was processed (the test marked it, the ledger held its mark) and its
    # row stays NEW; its mark is gone now, the ledger's edge (its oldest record, written between
    # edge_from_ms and edge_to_ms) is before the record's timestamp, by less than 60 s.
    assert (0, 1) not in ledgered_offsets(pipeline.bootstrap, ledger, pipeline.topic)
    assert (0, 0) in ledgered_offsets(pipeline.bootstrap, ledger, pipeline.topic)
    assert pipeline.statuses() == {first: "DONE", ahead: "NEW"}
    assert pipeline.committed_offsets() == {0: 2}
    assert edge_to_ms <= stamped_ms < edge_from_ms + 60_000

    result = diagnose_rule(setup.rule, setup.options())

    # The old code: "group ... committed past it (...: committed 2 > offset 1) but no consumer
    # processed it: the offset was committed before processing" (skipped), a false alarm.
    (item,) = result.items
    assert item.row.key == ahead
    assert item.diagnosis.verdict == "unknown", item.diagnosis.reason
    assert "the consumer ledger no longer holds marks that old" in item.diagnosis.reason
