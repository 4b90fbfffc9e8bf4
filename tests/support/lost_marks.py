"""A real consumer ledger that refuses the probe's records for a while, so that an
AuditedConsumer loses processed marks and later names them in a `marks-lost` record
(docs/contracts.md). The broker refuses them through the ledger topic's max.message.bytes,
as tests/probes/test_probe_v2.py does."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Message, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from auditor.probes import AuditedConsumer, MarksLost, ProcessedRanges, decode_ledger_record
from tests.probes.kafka_helpers import read_topic
from tests.support.demo import DemoPipeline
from tests.support.waiting import wait_until


def set_max_message_bytes(bootstrap: str, topic: str, value: str | None) -> None:
    """The topic's max.message.bytes set to `value` (None: back to the broker's default)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    entry = ConfigEntry("max.message.bytes", value or "", incremental_operation=op)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    time.sleep(2.0)  # the brokers apply a topic's dynamic config within moments


def ledger_records(bootstrap: str, ledger_topic: str) -> list[Any]:
    return [decode_ledger_record(m.value()) for m in read_topic(ledger_topic, bootstrap=bootstrap)]


def ledgered_offsets(bootstrap: str, ledger_topic: str, topic: str) -> set[tuple[int, int]]:
    """(partition, offset) of `topic` whose v2 processed marks the ledger holds."""
    return {
        (r.partition, offset)
        for rec in ledger_records(bootstrap, ledger_topic)
        if isinstance(rec, ProcessedRanges)
        for r in rec.ranges
        if r.topic == topic
        for offset in range(r.first, r.last + 1)
    }


def lost_offsets(bootstrap: str, ledger_topic: str, topic: str) -> set[tuple[int, int]]:
    """(partition, offset) of `topic` that the ledger's marks-lost records name."""
    return {
        (r.partition, offset)
        for rec in ledger_records(bootstrap, ledger_topic)
        if isinstance(rec, MarksLost)
        for r in rec.ranges
        if r.topic == topic
        for offset in range(r.first, r.last + 1)
    }


def hand_driven_consumer(pipeline: DemoPipeline) -> AuditedConsumer:
    """A probed (contract v2) consumer in the pipeline's group that marks and commits only as
    the test tells it, ledgering to the pipeline's consumer ledger; its ledger flushes often and
    waits briefly, as mark_while_the_ledger_refuses needs. Close it at the end."""
    return AuditedConsumer(
        {"bootstrap.servers": pipeline.bootstrap, "group.id": pipeline.group, "enable.auto.commit": False},
        ledger_topic=pipeline.probes.consumer_ledger,
        clients_topic=pipeline.probes.clients,
        ledger_flush_interval_s=0.2,
        ledger_flush_timeout_s=5.0,
    )


def mark_while_the_ledger_refuses(
    consumer: AuditedConsumer, bootstrap: str, ledger_topic: str, messages: list[Message], commit_to: int
) -> None:
    """Mark `messages` processed while the broker refuses the ledger's records, commit their
    partition to `commit_to`, then let the ledger take records again and wait until a
    marks-lost record names the marks. The consumer's ledger must flush often
    (ledger_flush_interval_s well below a second) and wait briefly (ledger_flush_timeout_s)."""
    try:
        mark_and_leave_the_ledger_refusing(consumer, bootstrap, ledger_topic, messages, commit_to)
    finally:
        set_max_message_bytes(bootstrap, ledger_topic, None)
    wait_for_the_lost_marks(bootstrap, ledger_topic, messages)


def mark_and_leave_the_ledger_refusing(
    consumer: AuditedConsumer, bootstrap: str, ledger_topic: str, messages: list[Message], commit_to: int
) -> None:
    """mark_while_the_ledger_refuses up to the commit: the ledger still refuses records when it
    returns (set_max_message_bytes(bootstrap, ledger_topic, None) lets it take them again)."""
    topic, partition = messages[0].topic(), messages[0].partition()
    failed_before = consumer.stats()["ledger_records_failed"]
    set_max_message_bytes(bootstrap, ledger_topic, "64")
    for msg in messages:
        consumer.mark_processed(msg)
    wait_until(
        lambda: consumer.stats()["ledger_records_failed"] > failed_before, 15, "a consumer-ledger record refused"
    )
    consumer.commit(offsets=[TopicPartition(topic, partition, commit_to)], asynchronous=False)


def wait_for_the_lost_marks(bootstrap: str, ledger_topic: str, messages: list[Message]) -> None:
    """Until a full read of the ledger finds the marks of `messages` named in a marks-lost
    record (or written after all)."""
    topic = messages[0].topic()
    wanted = {(m.partition(), m.offset()) for m in messages}
    wait_until(
        lambda: wanted
        <= lost_offsets(bootstrap, ledger_topic, topic) | ledgered_offsets(bootstrap, ledger_topic, topic),
        20,
        "the refused marks named in a marks-lost record",
    )
