"""The known ground truth of the reconciliation job's integration tests
(tests/reconcile/test_reconcile_*.py): a World (a topic, its producer and consumer ledgers, a
source table and a group, with what the test wrote to them), the findings expected of the
two-phase scenario, and ground-truth reads of a whole topic or ledger."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from auditor.lab.cluster import delete_records
from auditor.probes import AuditedConsumer
from spark_jobs.binding import Binding, binding_from_dict
from spark_jobs.kafka_offsets import admin_client, partition_offsets
from spark_jobs.reconcile import run
from spark_jobs.reconcile_plan import RunOptions

Finding = tuple[str, str | None, str | None, int | None, int | None]


@dataclass
class World:
    """A topic, its ledgers and a source table, with what the test knows about them."""

    bootstrap: str
    source_url: str
    topic: str
    table: str
    producer_ledger: str
    consumer_ledger: str
    group: str
    session: str = field(default_factory=lambda: uuid.uuid4().hex)
    offsets: dict[str, tuple[int, int]] = field(default_factory=dict)  # label → (partition, offset)
    ledger_entries: list[list[Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0})

    # -- source table ------------------------------------------------------------
    def insert(self, *ids: int, age: str = "1 hour") -> None:
        with psycopg.connect(self.source_url, autocommit=True) as conn:
            for row_id in ids:
                conn.execute(
                    f"INSERT INTO {self.table} (id, created_at, title) VALUES (%s, now() - %s::interval, %s)",
                    (row_id, age, f"ticket {row_id}"),
                )

    # -- topic ---------------------------------------------------------------------
    def produce(
        self,
        label: str,
        ticket: int | None,
        seq: int | None = None,
        partition: int = 0,
        session: str | None = None,
        producer: Producer | None = None,
        age_s: int = 10 * 60,
    ) -> None:
        """One record stamped `age_s` seconds ago; seq None → no audit headers at all."""
        value = json.dumps({"ticket_id": ticket} if ticket is not None else {"note": "no id"}).encode()
        headers = None
        if seq is not None:
            headers = [
                ("audit-id", str(ticket).encode()),
                ("audit-pid", (session or self.session).encode()),
                ("audit-seq", str(seq).encode()),
                ("audit-ts", b"1700000000000"),
            ]

        def delivered(err: Any, msg: Any) -> None:
            assert err is None, err
            self.offsets[label] = (msg.partition(), msg.offset())

        target = producer or self.producer
        # Records carry a creation time well past the grace period, like the rows they mirror.
        created_ms = int(time.time() * 1000) - age_s * 1000
        target.produce(
            self.topic, value=value, partition=partition, headers=headers, timestamp=created_ms, on_delivery=delivered
        )
        if producer is None:
            assert self.producer.flush(30) == 0

    def ledger(self, seq: int, status: str, ticket: int, label: str | None = None) -> None:
        """A producer-ledger entry as the probe writes it (contracts.md)."""
        partition, offset = self.offsets[label] if label else (-1, -1)
        error = None if status == "acked" else "Local: Message timed out"
        persisted = "persisted" if status == "acked" else "not"
        self.ledger_entries.append([seq, status, partition, offset, error, persisted, str(ticket), 1700000000000 + seq])

    def flush_ledger(self, end_seq: int | None = None, age_s: int | None = None) -> None:
        messages: list[dict[str, Any]] = []
        if self.ledger_entries:
            messages.append(
                {
                    "v": 1,
                    "type": "batch",
                    "pid": self.session,
                    "client_id": "app",
                    "topic": self.topic,
                    "entries": self.ledger_entries,
                }
            )
        if end_seq is not None:
            messages.append(
                {"v": 1, "type": "session-end", "pid": self.session, "ts": 1, "last_seq": {self.topic: end_seq}}
            )
        timestamp = 0 if age_s is None else int(time.time() * 1000) - age_s * 1000  # 0: now
        for message in messages:
            self.producer.produce(
                self.producer_ledger, key=self.session.encode(), value=json.dumps(message).encode(), timestamp=timestamp
            )
        assert self.producer.flush(30) == 0
        self.ledger_entries = []

    def processed(self, *labels: str, age_s: int | None = None, mark_ms: int = 1700000000000) -> int:
        """Consumer-ledger `processed` marks for the group, each processed at `mark_ms`, in one
        ledger record written `age_s` seconds ago (now by default); returns its offset."""
        entries = [[self.topic, *self.offsets[label], None, mark_ms] for label in labels]
        message = {"v": 1, "type": "processed", "sid": "consumer-1", "group": self.group, "entries": entries}
        written: list[int] = []
        self.producer.produce(
            self.consumer_ledger,
            key=b"consumer-1",
            value=json.dumps(message).encode(),
            timestamp=0 if age_s is None else int(time.time() * 1000) - age_s * 1000,
            on_delivery=lambda err, msg: written.append(msg.offset()) if err is None else None,
        )
        assert self.producer.flush(30) == 0 and len(written) == 1
        return written[0]

    def commit(self, partition: int, offset: int) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, "enable.auto.commit": False})
        try:
            consumer.commit(offsets=[TopicPartition(self.topic, partition, offset)], asynchronous=False)
        finally:
            consumer.close()

    def aborted_transaction(self, label: str, ticket: int, committed_label: str, committed_ticket: int) -> None:
        """One aborted transaction, then one committed one (both leave control records)."""
        txn = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": f"txn-{uuid.uuid4().hex[:8]}"})
        txn.init_transactions(30)
        txn.begin_transaction()
        self.produce(label, ticket, seq=0, session="txn-session", producer=txn)
        txn.flush(30)
        txn.abort_transaction(30)
        txn.begin_transaction()
        self.produce(committed_label, committed_ticket, seq=1, session="txn-session", producer=txn)
        txn.commit_transaction(30)
        # The coordinator writes the commit marker after it answers EndTxn: wait for it, so that
        # a test reading the log end sees the marker (the log ends one past it, and is stable).
        partition, offset = self.offsets[committed_label]
        admin = admin_client(self.bootstrap)
        deadline = time.monotonic() + 30
        while True:
            now = partition_offsets(admin, self.topic, [partition])[partition]
            if now.high > offset + 1 and now.stable == now.high:
                break
            assert time.monotonic() < deadline, f"the commit marker of {self.topic}/{partition} was not written in 30 s"
            time.sleep(0.1)

    def binding(self, **overrides: Any) -> Binding:
        data = {
            "name": f"b-{self.topic}",
            "topic": self.topic,
            "bootstrap_servers": self.bootstrap,
            "source_url": self.source_url,
            "table": f"public.{self.table}",
            "key_column": "id",
            "created_column": "created_at",
            "record_key": "json:$.ticket_id",
            "grace": "30s",
            "lookback": "10m",
            "guarantee": "exactly-once",
            "consumer_groups": [self.group],
            "producer_ledger_topic": self.producer_ledger,
            "consumer_ledger_topic": self.consumer_ledger,
            # no processing hold (as tests/conftest.py sets AUDITOR_PROCESSING_BOUND_SECONDS=0):
            # a test of the hold sets its own
            "processing_bound_ms": 0,
        } | overrides
        return binding_from_dict(data)

    def at(self, label: str) -> tuple[int, int]:
        return self.offsets[label]


def finding_set(result: dict[str, Any]) -> set[Finding]:
    assert result["status"] == "ok", result["error"]
    return {(f["kind"], f["key"], f["cause"], f["partition"], f["offset"]) for f in result["findings"]}


def reconcile_once(spark, binding: Binding, state_dir: Path, full: bool = False) -> dict[str, Any]:
    return run(spark, binding, RunOptions(state_dir=str(state_dir), full=full))


def build_phase_one(w: World) -> None:
    """Rows and records up to the first run."""
    w.insert(1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 13, 14, 12)
    for seq, ticket in enumerate((1, 2, 3)):
        w.produce(f"t{ticket}", ticket, seq)
        w.ledger(seq, "acked", ticket, f"t{ticket}")
    w.produce("t6", 6, seq=3)  # its producer-retry copy comes in phase two
    w.ledger(3, "acked", 6, "t6")
    w.produce("t7a", 7, seq=4)
    w.ledger(4, "acked", 7, "t7a")
    w.produce("t8a", 8)  # no headers
    w.produce("t15", 15, seq=5)  # orphan until row 15 is inserted in phase two
    w.ledger(5, "acked", 15, "t15")
    w.flush_ledger()
    w.aborted_transaction("t12", 12, "t14", 14)


def build_phase_two(w: World) -> None:
    """Rows and records after the first run."""
    w.insert(15, age="5 minutes")
    w.produce("t6b", 6, seq=3)  # the same send again: a producer retry
    w.produce("t7b", 7, seq=6, partition=1)  # sent again by the application
    w.ledger(6, "acked", 7, "t7b")
    w.produce("t8b", 8, partition=1)
    w.produce("t9", 9)
    w.produce("t999", 999, seq=8)
    w.ledger(7, "failed", 10)  # ticket 10's send failed: never in the topic
    w.ledger(8, "acked", 999, "t999")
    w.produce("t11", 11, seq=9)
    w.ledger(9, "acked", 11, "t11")
    w.produce("nokey", None)
    # The ledger says seq 10 (ticket 13) was acked at the offset of a record that is not it.
    w.ledger(10, "acked", 13, "nokey")
    w.flush_ledger(end_seq=10)
    # The group committed past t2 and t3 but only ever marked t1 and t2 (twice) processed.
    w.processed("t1", "t2", "t2")
    w.commit(0, w.at("t3")[1] + 1)
    w.insert(5, age="0 seconds")  # within grace: not missing yet


def expected_final(w: World) -> set[Finding]:
    return {
        ("missing", "4", None, None, None),
        ("missing", "10", None, None, None),
        ("missing", "12", None, None, None),
        # the ledger acked 13 at an offset holding another record: the broker lost it
        ("missing", "13", "broker-lost", *w.at("nokey")),
        ("duplicate", "6", "producer-retry", *w.at("t6")),
        ("duplicate", "7", "app-resend", *w.at("t7a")),
        ("duplicate", "8", "unknown", *w.at("t8a")),
        ("orphan", "999", None, *w.at("t999")),
        ("orphan", None, "no-key", *w.at("nokey")),
        ("gap", "10", "send-failed", None, None),
        ("gap", "13", "broker-lost", *w.at("nokey")),
        ("aborted", "12", None, *w.at("t12")),
        ("unprocessed", "3", None, *w.at("t3")),
        # The consumer marks offsets (contract v2); the key is the record's at that offset.
        ("reprocessed", "2", None, *w.at("t2")),
    }


def delete_records_before(admin: AdminClient, topic: str, partition: int, offset: int) -> None:
    """AdminClient.delete_records: the partition's log start moves to `offset`, as retention would."""
    delete_records(admin, [TopicPartition(topic, partition, offset)])


def read_whole_ledger(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """Every JSON record of a ledger topic's partition 0, read from its start to its end."""
    reader = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex}", "enable.auto.commit": False}
    )
    try:
        _low, high = reader.get_watermark_offsets(TopicPartition(topic, 0), 10)
        reader.assign([TopicPartition(topic, 0, 0)])
        records: list[dict[str, Any]] = []
        deadline = time.monotonic() + 30
        while len(records) < high and time.monotonic() < deadline:
            msg = reader.poll(0.5)
            if msg is not None and not msg.error():
                records.append(json.loads(msg.value()))
        assert len(records) == high
        return records
    finally:
        reader.close()


def another_applications_marks(w: World, ledger: str, count: int) -> None:
    """Ledger records of another application (its own topic and group) sharing `ledger`."""
    message = {"v": 1, "type": "processed", "sid": "elsewhere", "group": "elsewhere", "entries": []}
    for i in range(count):
        message["entries"] = [["elsewhere", 0, i, None, 1700000000000]]
        w.producer.produce(ledger, key=b"elsewhere", value=json.dumps(message).encode())
    assert w.producer.flush(30) == 0


def read_whole_topic(
    bootstrap: str, topic: str, isolation: str = "read_committed"
) -> dict[tuple[int, int], int | None]:
    """Ground truth after a fault: every record of the topic, (partition, offset) → ticket."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"truth-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    metadata = consumer.list_topics(topic, timeout=10)
    partitions = sorted(metadata.topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    seen: dict[tuple[int, int], int | None] = {}
    at_end: set[int] = set()
    deadline = time.monotonic() + 30
    try:
        while at_end != set(partitions):
            assert time.monotonic() < deadline, "reading the whole topic timed out"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                at_end.add(msg.partition())
                continue
            seen[(msg.partition(), msg.offset())] = json.loads(msg.value()).get("ticket_id")
    finally:
        consumer.close()
    return seen


def produce_keyed(w: World, label: str, key: str, ticket: int | None, partition: int | None = None) -> None:
    """One record with record key `key` (into `partition`, else the producer's choice); ticket
    None writes a tombstone (no value), as an application that deletes its item from a
    compacted topic does."""

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        w.offsets[label] = (msg.partition(), msg.offset())

    value = None if ticket is None else json.dumps({"ticket_id": ticket}).encode()
    created_ms = int(time.time() * 1000) - 10 * 60 * 1000
    where = {} if partition is None else {"partition": partition}
    w.producer.produce(w.topic, key=key.encode(), value=value, timestamp=created_ms, on_delivery=delivered, **where)
    assert w.producer.flush(30) == 0


# The least a binding the job takes holds (binding_from_dict).
MINIMAL_BINDING = {
    "name": "b",
    "topic": "t",
    "bootstrap_servers": "127.0.0.1:1",
    "source_url": "postgresql://u@h/d",
    "table": "t",
    "key_column": "id",
    "created_column": "created_at",
}


def audited_consumer(w: World, clients: str) -> AuditedConsumer:
    """A probed consumer of the world's group, subscribed to its topic, marking into its consumer
    ledger (the test closes it)."""
    config: dict[str, Any] = {
        "bootstrap.servers": w.bootstrap,
        "group.id": w.group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    consumer = AuditedConsumer(config, ledger_topic=w.consumer_ledger, clients_topic=clients)
    consumer.subscribe([w.topic])
    return consumer


def committed_offset(w: World, partition: int = 0) -> int:
    """The group's committed offset on a partition of the world's topic, read back from the broker."""
    reader = Consumer({"bootstrap.servers": w.bootstrap, "group.id": w.group, "enable.auto.commit": False})
    try:
        (held,) = reader.committed([TopicPartition(w.topic, partition)], timeout=10)
        return int(held.offset)
    finally:
        reader.close()
