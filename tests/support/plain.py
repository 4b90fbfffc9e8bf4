"""A pipeline without probes for the stuck tests of the auditor's memory: a plain producer
writes rows' records to chosen partitions with chosen timestamps (its delivery reports are
the ground truth of where each went), a full read of the topic, a binding and stuck rule of
it, real reconciliation runs, and diagnoses by both engines."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import psycopg
from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from auditor.lab.cluster import wait_until
from auditor.pipelines.models import Binding, Cluster, SourceDatabase, StuckRule
from auditor.reconcile.conf import IN_PROCESS
from auditor.reconcile.models import ReconcileRun
from auditor.reconcile.service import execute_run, start_run
from auditor.stuck.service import DiagnosisOptions, diagnose_rule


@dataclass
class PlainPipeline:
    bootstrap: str
    source_url: str
    topic: str
    table: str
    group: str
    delivered: dict[int, tuple[int, int]] = field(default_factory=dict)  # ticket → (partition, offset)

    def insert(self, *tickets: int, minutes_ago: int = 60, status: str = "NEW") -> None:
        with psycopg.connect(self.source_url, autocommit=True) as conn:
            for ticket in tickets:
                conn.execute(
                    f"INSERT INTO {self.table} (ticket_id, created_at, status) "
                    "VALUES (%s, now() - make_interval(mins => %s), %s)",
                    (ticket, minutes_ago, status),
                )

    def produce(self, partition: int, *tickets: int, minutes_ago: int = 50) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0})

        def report(err: Any, msg: Any) -> None:
            assert err is None, err
            self.delivered[int(msg.key())] = (msg.partition(), msg.offset())

        stamp = int(time.time() * 1000) - minutes_ago * 60 * 1000  # by default after the rows were created
        for ticket in tickets:
            producer.produce(
                self.topic,
                key=str(ticket).encode(),
                value=b"{}",
                partition=partition,
                timestamp=stamp,
                on_delivery=report,
            )
            producer.poll(0)
        assert producer.flush(30) == 0

    def topic_now(self) -> dict[tuple[int, int], int]:
        """A full read of the topic: (partition, offset) → ticket."""
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"truth-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": True,
            }
        )
        partitions = sorted(consumer.list_topics(self.topic, timeout=10).topics[self.topic].partitions)
        consumer.assign([TopicPartition(self.topic, p, -2) for p in partitions])  # -2: the log start
        seen: dict[tuple[int, int], int] = {}
        ended: set[int] = set()
        deadline = time.monotonic() + 30
        try:
            while ended != set(partitions):
                assert time.monotonic() < deadline, "reading the topic timed out"
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                if msg.error() is not None:
                    ended.add(msg.partition())
                    continue
                seen[(msg.partition(), msg.offset())] = int(msg.key())
        finally:
            consumer.close()
        return seen


def rule_for(p: PlainPipeline) -> StuckRule:
    suffix = uuid.uuid4().hex[:8]
    binding = Binding.objects.create(
        name=f"mem-{suffix}",
        cluster=Cluster.objects.create(name=f"mem-{suffix}", bootstrap_servers=p.bootstrap),
        topic=p.topic,
        source=SourceDatabase.objects.create(name=f"mem-{suffix}", url="${SOURCE_DATABASE_URL}"),
        table=p.table,
        key_column="ticket_id",
        record_key="key",
        created_column="created_at",
        consumer_groups=[p.group],
    )
    return StuckRule.objects.create(
        name=f"mem-{suffix}", binding=binding, status_column="status", stuck_values=["NEW"], age_column="created_at"
    )


def reconcile(rule: StuckRule) -> ReconcileRun:
    run = execute_run(start_run(rule.binding, ReconcileRun.CLI), IN_PROCESS)
    assert run.status == ReconcileRun.OK, run.error
    return run


def diagnose(rule: StuckRule, spark: Any, consumer_ledger: str | None = None) -> dict[str, tuple[str, str]]:
    """Verdicts by both engines, which must agree; key → (verdict, reason). Without ledgers (an
    unprobed pipeline), or with the pipeline's consumer ledger."""
    no_ledger = f"_audit.none-{uuid.uuid4().hex[:8]}"
    results = [
        diagnose_rule(
            rule,
            DiagnosisOptions(
                engine=engine,
                spark=spark,
                producer_ledger_topic=no_ledger,
                consumer_ledger_topic=consumer_ledger or no_ledger,
            ),
        )
        for engine in ("python", "spark")
    ]
    by_engine = [{i.row.key: (i.diagnosis.verdict, i.diagnosis.reason) for i in r.items} for r in results]
    assert {k: v[0] for k, v in by_engine[0].items()} == {k: v[0] for k, v in by_engine[1].items()}
    return by_engine[1]


def commit_outside_membership(consumer: Consumer, msg: Message, timeout_s: float = 60) -> None:
    """Commit the position past `msg` for an assigned consumer with a group's id (no
    membership): the group takes it only while it has no member, so it is tried again while a
    member's leave is on its way."""

    def committed() -> bool:
        try:
            consumer.commit(message=msg, asynchronous=False)
        except KafkaException:
            return False
        return True

    wait_until(committed, timeout_s, "the group to take the commit of a consumer outside its membership")
