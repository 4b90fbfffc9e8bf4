"""A probed (contract v2) consumer that marks each record it polls processed, beside a plain
producer of the records it reads, for tests of how the consumer ledger dates its ranges.
Ground truth: the producer's delivery reports (their CreateTime) and what the test's consumer
polled; the ranges come from a full read of the real consumer ledger."""

from __future__ import annotations

import uuid
from typing import cast

from confluent_kafka import OFFSET_BEGINNING, Message, Producer, TopicPartition

from auditor.probes import AuditedConsumer, ProcessedRanges, decode_ledger_record
from tests.probes.kafka_helpers import read_topic


class MarkingConsumer:
    """Reads `data` (two partitions) from its start in a group of its own, ledgering to
    `cledger` and `clients`; close() it at the end."""

    def __init__(self, bootstrap: str, topics: dict[str, str], ledger_flush_interval_s: float) -> None:
        self.bootstrap = bootstrap
        self.topics = topics
        self.producer = Producer({"bootstrap.servers": bootstrap})
        self.delivered: list[Message] = []
        self.consumer = AuditedConsumer(
            {"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False},
            ledger_topic=topics["cledger"],
            clients_topic=topics["clients"],
            ledger_flush_interval_s=ledger_flush_interval_s,
        )
        self.consumer.assign([TopicPartition(topics["data"], p, OFFSET_BEGINNING) for p in range(2)])

    def produce(self, partition: int, value: bytes) -> Message:
        """One record to `partition` of the data topic, delivered; its delivery report."""
        self.producer.produce(
            self.topics["data"], value, partition=partition, on_delivery=lambda err, msg: self.delivered.append(msg)
        )
        assert self.producer.flush(30) == 0
        msg = self.delivered[-1]
        assert msg.error() is None
        return msg

    def poll_and_mark(self) -> tuple[int, int]:
        """The next record polled, marked processed: its (partition, offset)."""
        while True:
            msg = self.consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                self.consumer.mark_processed(msg)
                return cast(int, msg.partition()), cast(int, msg.offset())

    def ranges(self) -> dict[tuple[int, int], tuple[int, int]]:
        """The consumer ledger's processed ranges: (partition, first) → (first_ms, last_ms)."""
        ledger = [decode_ledger_record(m.value()) for m in read_topic(self.topics["cledger"], bootstrap=self.bootstrap)]
        return {
            (r.partition, r.first): (r.first_ms, r.last_ms)
            for rec in ledger
            if isinstance(rec, ProcessedRanges)
            for r in rec.ranges
        }

    def close(self) -> None:
        self.consumer.close()
