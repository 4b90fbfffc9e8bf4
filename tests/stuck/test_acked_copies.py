"""Stuck verdicts when a probed (contract v1) producer acked several records with the item's
key and the topic no longer holds any of them: the item got as far as the furthest of them.

Ground truth comes from the producer's delivery reports, what the consumer polled, processed
and committed, a full read of the topic and the table; never from the auditor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, TopicPartition
from confluent_kafka.admin import AdminClient

from auditor.lab.cluster import delete_records
from auditor.probes import AuditedConsumerV1
from auditor.probes.producer_v1 import AuditedProducerV1
from tests.support.demo import read_topic
from tests.support.kafka_reads import process_first
from tests.support.stuck import StuckSetup, diagnose_both

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def test_an_item_whose_first_acked_record_was_processed_is_processed_not_updated_though_its_re_send_expired(
    make_stuck: Callable[..., StuckSetup], kafka_admin: AdminClient, spark: Any
) -> None:
    """The application sends the ticket's record, and again (a re-send); a v1 probed producer
    ledgers both acks. The consumer processes the first, its row update is lost (the row stays
    NEW), and it commits past the first only; retention (delete_records) then takes both before
    the group reaches the re-send. The latest ack alone says `expired`; the item reached the
    consumer and was processed."""
    setup = make_stuck(contract=1)
    pipeline = setup.pipeline
    with pipeline.store() as store:
        ticket = store.insert_ticket({}).ticket_id

    delivered: list[tuple[int, int]] = []

    def report(err: KafkaError | None, msg: Message) -> None:
        assert err is None, err
        delivered.append((msg.partition(), msg.offset()))

    producer = AuditedProducerV1(
        {**pipeline.kafka_config, "linger.ms": 0},
        ledger_topic=pipeline.probes.producer_ledger,
        clients_topic=pipeline.probes.clients,
        ledger_flush_interval_s=0.2,
    )
    for _ in range(2):  # the record, then the application's re-send
        producer.produce(pipeline.topic, b"{}", ticket.encode(), on_delivery=report)
        assert producer.flush(30) == 0
    assert producer.close(30) == 0

    consumer = AuditedConsumerV1(
        {**pipeline.kafka_config, "group.id": pipeline.group, "enable.auto.commit": False},
        ledger_topic=pipeline.probes.consumer_ledger,
        clients_topic=pipeline.probes.clients,
        ledger_flush_interval_s=0.2,
    )
    try:
        # processed (the row's update is then lost) and committed past the first record only
        msg = process_first(consumer, pipeline.topic, 0)
        processed = [(msg.partition(), msg.offset(), msg.key().decode())]
    finally:
        consumer.close()
    first, resent = delivered
    delete_records(kafka_admin, [TopicPartition(pipeline.topic, 0, resent[1] + 1)])

    # Ground truth: both records acked on partition 0, the first processed and committed past,
    # the re-send not reached by the group; both gone from the topic now; the row still NEW.
    assert first[0] == resent[0] == 0 and first[1] < resent[1], delivered
    assert processed == [(*first, ticket)]
    assert pipeline.committed_offsets() == {0: first[1] + 1}
    assert first[1] + 1 <= resent[1]
    assert pipeline.watermarks(pipeline.topic) == {0: (resent[1] + 1, resent[1] + 1)}
    assert read_topic(pipeline.bootstrap, pipeline.topic) == []
    assert pipeline.statuses() == {ticket: "NEW"}

    result = diagnose_both(setup, spark)
    items = {item.row.key: item.diagnosis for item in result.items}
    assert set(items) == {ticket}
    # The old code: "acked at .../0@1, deleted by retention or delete-records (log start now 2)
    # before group ... reached it (committed 1)": the latest ack alone.
    assert items[ticket].verdict == "processed-not-updated", items[ticket].reason
    assert f"acked 2 records with this key (0@{first[1]} processed-not-updated, 0@{resent[1]} expired)" in (
        items[ticket].reason
    ), items[ticket].reason
