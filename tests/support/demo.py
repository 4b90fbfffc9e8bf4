"""The demo pipeline under test: its own tables, topics, group and ledgers; and reading a topic back."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from auditor.demo.consumer import TicketConsumer
from auditor.demo.options import DeliveryMode, Faults, ProbeTopics
from auditor.demo.producer import TicketProducer
from auditor.demo.store import TicketStore
from auditor.probes import LedgerRecord, decode_ledger_records
from spark_jobs.kafka_offsets import admin_client, partition_offsets, topic_partitions


@dataclass(frozen=True)
class ReadRecord:
    partition: int
    offset: int
    key: str | None
    value: bytes | None
    headers: dict[str, bytes]


def read_topic(
    bootstrap: str, topic: str, isolation: str = "read_committed", timeout_s: float = 20.0
) -> list[ReadRecord]:
    """Every record of ``topic`` from the beginning to the end (the LSO for read_committed)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        pending = set(partitions)
        records: list[ReadRecord] = []
        for _ in range(int(timeout_s / 0.2)):
            if not pending:
                break
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                continue
            key = msg.key()
            records.append(
                ReadRecord(
                    msg.partition(),
                    msg.offset(),
                    key.decode() if isinstance(key, bytes) else None,
                    msg.value(),
                    {name: value for name, value in (msg.headers() or []) if value is not None},
                )
            )
        assert not pending, f"did not reach the end of {topic} partitions {sorted(pending)}"
        return records
    finally:
        consumer.close()


@dataclass
class DemoPipeline:
    """One isolated demo pipeline: tables, topics, group and ledger topics of its own."""

    bootstrap: str
    source_url: str
    topic: str
    output_topic: str
    group: str
    probes: ProbeTopics
    table: str = field(default_factory=lambda: f"tickets_{uuid.uuid4().hex[:10]}")
    processed_table: str = field(default_factory=lambda: f"processed_{uuid.uuid4().hex[:10]}")

    @property
    def kafka_config(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap}

    def store(self) -> TicketStore:
        return TicketStore(self.source_url, self.table, self.processed_table)

    def producer(self, faults: Faults | None = None) -> TicketProducer:
        return TicketProducer(
            kafka_config=self.kafka_config,
            store=self.store(),
            topic=self.topic,
            faults=faults,
            probe_topics=self.probes,
        )

    def produce(self, count: int, faults: Faults | None = None) -> list[str]:
        """Create ``count`` tickets; their ids in creation order."""
        with self.producer(faults) as producer:
            created = producer.create_tickets(count)
            assert producer.flush(30) == 0
        return [item.ticket_id for item in created]

    def consumer(self, mode: DeliveryMode, faults: Faults | None = None, **options: Any) -> TicketConsumer:
        options.setdefault("batch_size", 10)
        options.setdefault("commit_every", 10)
        options.setdefault("commit_interval_s", 60.0)  # commits by count only: deterministic
        return TicketConsumer(
            kafka_config=self.kafka_config,
            store=self.store(),
            topic=self.topic,
            group=self.group,
            mode=mode,
            faults=faults,
            output_topic=self.output_topic,
            probe_topics=self.probes,
            **options,
        )

    def statuses(self) -> dict[str, str]:
        with self.store() as store:
            return store.statuses()

    def watermarks(self, topic: str) -> dict[int, tuple[int, int]]:
        """Per partition of `topic` (its own or one of its ledgers): (log start, log end) now."""
        admin = admin_client(self.bootstrap)
        offsets = partition_offsets(admin, topic, topic_partitions(admin, topic))
        return {p: (o.low, o.high) for p, o in sorted(offsets.items())}

    def committed_offsets(self) -> dict[int, int]:
        """partition -> the group's committed offset (-1001 when none)."""
        reader = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group})
        try:
            partitions = reader.list_topics(self.topic, timeout=10).topics[self.topic].partitions
            committed = reader.committed([TopicPartition(self.topic, p) for p in partitions], timeout=10)
            return {tp.partition: tp.offset for tp in committed}
        finally:
            reader.close()

    def ledger(self, topic: str) -> list[LedgerRecord]:
        good, bad = decode_ledger_records(record.value for record in read_topic(self.bootstrap, topic))
        assert not bad, bad
        return good
