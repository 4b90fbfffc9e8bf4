"""Fixtures of the demo pipeline tests: each test gets its own tables, topics, group and ledgers."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from auditor.demo.consumer import TicketConsumer
from auditor.demo.options import DeliveryMode, Faults, ProbeTopics
from auditor.demo.producer import TicketProducer
from auditor.demo.store import TicketStore
from auditor.probes import LedgerRecord, decode_ledger_records


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


@pytest.fixture(scope="session")
def source_url() -> str:
    url = os.environ.get("SOURCE_DATABASE_URL")
    if not url:
        if os.environ.get("CI"):
            pytest.fail("SOURCE_DATABASE_URL is not set under CI")
        pytest.skip("SOURCE_DATABASE_URL is not set")
    return url


@pytest.fixture
def make_pipeline(
    kafka_bootstrap: str, kafka_admin: Any, make_topic: Callable[..., str], source_url: str
) -> Iterator[Callable[..., DemoPipeline]]:
    made: list[DemoPipeline] = []

    def make(partitions: int = 1, contract: int = 2) -> DemoPipeline:
        probes = ProbeTopics(
            producer_ledger=make_topic("demo-pledger"),
            consumer_ledger=make_topic("demo-cledger"),
            clients=make_topic("demo-clients"),
            ledger_flush_interval_s=0.2,
            contract=contract,
        )
        pipeline = DemoPipeline(
            bootstrap=kafka_bootstrap,
            source_url=source_url,
            topic=make_topic("demo-tickets", partitions=partitions),
            output_topic=make_topic("demo-processed", partitions=partitions),
            group=f"demo-{uuid.uuid4().hex[:10]}",
            probes=probes,
        )
        with pipeline.store() as store:
            store.ensure_schema()
        made.append(pipeline)
        return pipeline

    yield make
    for pipeline in made:
        with pipeline.store() as store:
            store.drop_tables()
    groups = [pipeline.group for pipeline in made]
    if groups:
        for future in kafka_admin.delete_consumer_groups(groups).values():
            try:
                future.result(timeout=20)
            except Exception:  # noqa: BLE001 - a group that never committed does not exist
                pass


@pytest.fixture
def contract() -> int:
    """The record contract the pipeline's probes write; tests parametrize it to prove both."""
    return 2


@pytest.fixture
def pipeline(make_pipeline: Callable[..., DemoPipeline], contract: int) -> DemoPipeline:
    return make_pipeline(contract=contract)
