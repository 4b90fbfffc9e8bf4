"""The reconciliation job against a real broker, PostgreSQL and Spark, on known ground truth.

One source table and one topic are built so that every finding kind is present exactly
where the test puts it; the job must report exactly that set, on a full run and across two
incremental runs (with duplicates, missing rows and orphans that span the runs).
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

from auditor.lab.cluster import Cluster as LabCluster
from auditor.lab.cluster import all_led, delete_records, wait_until
from spark_jobs import common, reconcile_findings, reconcile_updates
from spark_jobs.binding import Binding, binding_from_dict
from spark_jobs.kafka_offsets import admin_client, partition_offsets, topic_id
from spark_jobs.reconcile import run
from spark_jobs.reconcile_extract import (
    OffsetRange,
    ReconcileError,
    check_nothing_deleted_while_read,
    check_read_to_planned_end,
    extract_topic,
    plan_offsets,
    summarize_partitions,
)
from spark_jobs.reconcile_plan import RunOptions
from spark_jobs.reconcile_transform import transform_records
from tests.support.kafka_reads import consume
from tests.support.topics import create_again

pytestmark = pytest.mark.integration

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
        } | overrides
        return binding_from_dict(data)

    def at(self, label: str) -> tuple[int, int]:
        return self.offsets[label]


@pytest.fixture
def world(kafka_bootstrap: str, source_database_url: str, make_topic) -> Iterator[World]:
    table = f"rec_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, created_at timestamptz NOT NULL, title text)")
    w = World(
        bootstrap=kafka_bootstrap,
        source_url=source_database_url,
        topic=make_topic("rec", partitions=2),
        table=table,
        producer_ledger=make_topic("_audit.producer-ledger"),
        consumer_ledger=make_topic("_audit.consumer-ledger"),
        group=f"g-{uuid.uuid4().hex[:8]}",
    )
    yield w
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")


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


@pytest.mark.parametrize("compiled", [False, True], ids=["interpreted", "compiled"])
def test_it_reports_the_exact_findings_on_a_full_run(
    spark: SparkSession, world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiled: bool
):
    # A run this small interprets its expressions; a large one compiles them. Both must agree.
    if compiled:
        monkeypatch.setattr(common, "SMALL_RUN_RECORDS", 0)
    build_phase_one(world)
    build_phase_two(world)
    factory_mode = spark.conf.get("spark.sql.codegen.factoryMode", None)
    result = reconcile_once(spark, world.binding(), tmp_path, full=True)
    assert finding_set(result) == expected_final(world)
    # A small run also shuffles in as many partitions as there are cores, without adaptive execution.
    small = {
        "spark.sql.codegen.wholeStage": "false",
        "spark.sql.codegen.factoryMode": "NO_CODEGEN",
        "spark.sql.shuffle.partitions": str(spark.sparkContext.defaultParallelism),
        "spark.sql.adaptive.enabled": "false",
    }
    assert (result["spark_settings"] == {}) if compiled else (result["spark_settings"] == small)
    assert spark.conf.get("spark.sql.codegen.factoryMode", None) == factory_mode  # the run's own setting only
    assert result["counts"] == {
        "missing": 4,
        "duplicate": 3,
        "orphan": 2,
        "gap": 2,
        "aborted": 1,
        "unprocessed": 1,
        "reprocessed": 1,
        "unverifiable": 0,
        # t8a, t8b, t9 and nokey carry no headers; t14's transactional producer writes
        # audit-pid "txn-session", not a session id (t12, aborted, is not in this view).
        "records_without_headers": 4,
        "records_malformed_headers": 1,
    }
    assert not [w for w in result["warnings"] if "were deleted" in w]
    gap = next(f for f in result["findings"] if f["cause"] == "send-failed")
    assert (gap["session"], gap["seq"]) == (world.session, 7)
    assert gap["evidence"]["ledger"]["error"] == "Local: Message timed out"
    retry = next(f for f in result["findings"] if f["cause"] == "producer-retry")
    assert [(o["partition"], o["offset"]) for o in retry["offsets"]] == sorted([world.at("t6"), world.at("t6b")])
    assert all(f["is_new"] for f in result["findings"])


def test_it_finds_the_same_across_two_incremental_runs(spark: SparkSession, world: World, tmp_path: Path):
    # Ticket 5 must stay within grace for all three runs, however long a loaded machine takes
    # over them (30 s was exceeded under load); every missing row is an hour old.
    binding = world.binding(grace="10m")
    build_phase_one(world)
    first = reconcile_once(spark, binding, tmp_path)
    assert first["mode"] == "full"
    assert finding_set(first) == {
        ("missing", "4", None, None, None),
        ("missing", "9", None, None, None),
        ("missing", "10", None, None, None),
        ("missing", "11", None, None, None),
        ("missing", "12", None, None, None),
        ("missing", "13", None, None, None),
        ("orphan", "15", None, *world.at("t15")),
        ("aborted", "12", None, *world.at("t12")),
    }

    build_phase_two(world)
    second = reconcile_once(spark, binding, tmp_path)
    assert second["mode"] == "incremental"
    # Little new data: few shuffle partitions and no adaptive execution, for this run only.
    assert second["spark_settings"]["spark.sql.adaptive.enabled"] == "false"
    assert second["spark_settings"]["spark.sql.shuffle.partitions"] == str(spark.sparkContext.defaultParallelism)
    assert spark.conf.get("spark.sql.adaptive.enabled") == "true"
    # Only what was produced since the first run was read.
    for partition, (start, _end) in second["offset_ranges"]["topic"].items():
        assert start == first["offset_ranges"]["topic"][partition][1]
    assert finding_set(second) == expected_final(world)
    carried = {f["kind"] + str(f["key"]) for f in second["findings"] if not f["is_new"]}
    # 13 is new as missing/broker-lost: phase two's ledger acked it, so the run learned its cause
    assert carried == {"missing4", "missing10", "missing12", "aborted12"}

    # A full run over the same data agrees with the incremental one.
    assert finding_set(reconcile_once(spark, binding, tmp_path, full=True)) == expected_final(world)


def test_a_full_run_flags_as_new_only_what_the_last_run_did_not_report(
    spark: SparkSession, world: World, tmp_path: Path
):
    world.insert(1, 2)
    world.produce("t1", 1, seq=0)
    world.ledger(0, "acked", 1, "t1")
    world.flush_ledger()
    binding = world.binding()
    first = reconcile_once(spark, binding, tmp_path)
    assert finding_set(first) == {("missing", "2", None, None, None)}  # row 2 never got a record

    world.insert(3)  # an hour old, and no record of it either
    full = reconcile_once(spark, binding, tmp_path, full=True)

    assert full["mode"] == "full"
    assert finding_set(full) == {("missing", "2", None, None, None), ("missing", "3", None, None, None)}
    assert {f["key"]: f["is_new"] for f in full["findings"]} == {"2": False, "3": True}
    assert full["new_findings"] == 1


def test_it_notices_aborted_transactions_without_being_told(spark: SparkSession, world: World, tmp_path: Path):
    world.insert(1, 12, 14)
    world.produce("t1", 1)
    world.aborted_transaction("t12", 12, "t14", 14)
    binding = world.binding(guarantee="at-least-once", consumer_groups=[])
    assert binding.transactions is None
    assert finding_set(reconcile_once(spark, binding, tmp_path)) == {
        ("missing", "12", None, None, None),
        ("aborted", "12", None, *world.at("t12")),
    }


def delete_records_before(admin: AdminClient, topic: str, partition: int, offset: int) -> None:
    """AdminClient.delete_records: the partition's log start moves to `offset`, as retention would."""
    delete_records(admin, [TopicPartition(topic, partition, offset)])


def test_it_never_reports_rows_whose_records_were_deleted_unread_as_missing(
    spark: SparkSession, world: World, kafka_admin: AdminClient, tmp_path: Path
):
    # Partition 0 held tickets 1 and 2 (50 and 45 minutes old); both are deleted before the
    # first run. Ticket 3 (20 minutes old) is the first record still there; the rest of
    # the data is in partition 1.
    world.produce("t1", 1, partition=0, age_s=50 * 60)
    world.produce("t2", 2, partition=0, age_s=45 * 60)
    world.produce("t3", 3, partition=0, age_s=20 * 60)
    world.produce("t4", 4, partition=1, age_s=40 * 60)
    delete_records_before(kafka_admin, world.topic, 0, world.at("t3")[1])
    world.insert(1, 2, 3, 4, age="1 hour")
    world.insert(5, age="55 minutes")  # no record, but as old as the deleted ones: cannot be told apart
    world.insert(6, age="10 minutes")  # no record, created after every deleted record: really missing
    binding = world.binding()

    first = reconcile_once(spark, binding, tmp_path)
    assert finding_set(first) == {("missing", "6", None, None, None)}
    assert first["counts"]["unverifiable"] == 3  # rows 1, 2 and 5
    assert first["counts"]["missing"] == 1
    assert first["offset_ranges"]["topic"] == {"0": [2, 3], "1": [0, 1]}
    lost = [w for w in first["warnings"] if "were deleted" in w]
    assert len(lost) == 1 and lost[0].startswith(f"{world.topic}/0: offsets 0..1 (2 record(s)) were deleted"), lost
    assert first["window"]["unverifiable_until"]

    # Ticket 5's record turns up late: the row is no longer unverifiable. The bound holds
    # across incremental runs although nothing new was lost.
    world.produce("t5", 5, partition=1, age_s=60)
    second = reconcile_once(spark, binding, tmp_path)
    assert second["mode"] == "incremental"
    assert finding_set(second) == {("missing", "6", None, None, None)}
    assert second["counts"]["unverifiable"] == 2  # rows 1 and 2
    assert not [w for w in second["warnings"] if "were deleted" in w]


def test_it_never_calls_records_unprocessed_whose_marks_the_consumer_ledger_deleted_unread(
    spark: SparkSession, world: World, kafka_admin: AdminClient, tmp_path: Path
):
    # What the consumer did: it processed tickets 1-3, marking each in its own ledger record
    # after the record was written, and committed past ticket 4, which it never processed.
    world.produce("t1", 1, partition=0, age_s=40 * 60)
    world.produce("t2", 2, partition=0, age_s=35 * 60)
    world.produce("t3", 3, partition=0, age_s=5 * 60)
    world.produce("t4", 4, partition=0, age_s=60)
    world.processed("t1", age_s=39 * 60)
    world.processed("t2", age_s=34 * 60)
    third_mark = world.processed("t3", age_s=4 * 60)
    world.commit(0, world.at("t4")[1] + 1)
    world.insert(1, 2, 3, 4)
    # Retention on the consumer ledger deletes the marks of tickets 1 and 2 before any run
    # reads them; ticket 3's mark (written 4 minutes ago) is the first one left.
    delete_records_before(kafka_admin, world.consumer_ledger, 0, third_mark)
    binding = world.binding()

    first = reconcile_once(spark, binding, tmp_path)
    # Tickets 1 and 2 were processed: their marks are gone, not missing. Ticket 4 was written
    # after the first mark left (plus the 30 s grace): its mark would be there. It is not.
    assert finding_set(first) == {("unprocessed", "4", None, *world.at("t4"))}
    lost = [w for w in first["warnings"] if w.startswith("consumer ledger")]
    assert len(lost) == 1 and lost[0].startswith(
        f"consumer ledger {world.consumer_ledger}/0: offsets 0..{third_mark - 1} ({third_mark} record(s)) were deleted"
    ), first["warnings"]
    assert first["window"]["marks_lost_until"]

    # The bound holds across runs. Ticket 3's mark, read by the first run, may go too: that
    # is no loss. Ticket 5 comes after every deleted mark and is committed past, unprocessed.
    world.produce("t5", 5, partition=0, age_s=0)
    world.insert(5)
    world.commit(0, world.at("t5")[1] + 1)
    delete_records_before(kafka_admin, world.consumer_ledger, 0, third_mark + 1)
    second = reconcile_once(spark, binding, tmp_path)
    assert second["mode"] == "incremental"
    assert finding_set(second) == {
        ("unprocessed", "4", None, *world.at("t4")),
        ("unprocessed", "5", None, *world.at("t5")),
    }
    assert not [w for w in second["warnings"] if w.startswith("consumer ledger")], second["warnings"]
    assert second["window"]["marks_lost_until"] == first["window"]["marks_lost_until"]


def test_marks_that_trail_an_auto_commit_are_waited_for_not_called_unprocessed(
    spark: SparkSession, world: World, make_topic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The consumer configuration lint C001 advises (enable.auto.offset.store=false,
    store_offsets after processing, auto-commit): auto-commit commits stored offsets at once,
    and the probe writes their marks only at its next background ledger flush."""
    from auditor.probes import AuditedConsumer

    for ticket in range(1, 7):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=120)
    world.insert(1, 2, 3, 4, 5, 6)
    # This probe flushes its ledger every 16 s, and the run waits 18 s for marks: room for the
    # group's join, two commits and a flush on a busy machine before the first tick.
    flush_interval_s = 16.0
    monkeypatch.setenv("RECONCILE_MARK_SETTLE_SECONDS", "18")
    started = time.monotonic()  # the probe's background flushes come at started + 16 s, + 32 s, ...
    consumer = AuditedConsumer(
        {
            "bootstrap.servers": world.bootstrap,
            "group.id": world.group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 100,
            "enable.auto.offset.store": False,
        },
        ledger_topic=world.consumer_ledger,
        clients_topic=make_topic("_audit.clients"),
        ledger_flush_interval_s=flush_interval_s,
    )
    deadline = time.monotonic() + 30

    def process(count: int) -> list[int]:
        done: list[int] = []
        while len(done) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            consumer.mark_processed(msg)
            consumer.store_offsets(msg)
            done.append(msg.offset())
        return done

    def committed_reaches(offset: int) -> int:
        committed = 0
        while committed < offset and time.monotonic() < deadline:
            committed = consumer.committed([TopicPartition(world.topic, 0)], 10)[0].offset
        return committed

    try:
        consumer.subscribe([world.topic])
        # Records 0-2 processed, committed and their marks flushed: the group is probed from 0.
        assert process(3) == [0, 1, 2]
        assert committed_reaches(3) == 3
        consumer.flush_ledger(10)
        # Records 3-5 processed and committed; their marks wait for the next background flush.
        assert process(3) == [3, 4, 5]
        assert committed_reaches(6) == 6
        # What the consumer ledger holds when the run starts: those marks are not in it yet.
        assert time.monotonic() + 4 < started + flush_interval_s, "the probe's flush came too soon to tell"

        result = reconcile_once(spark, world.binding(), tmp_path)

        # Every record was processed (the consumer marked each one) and committed: nothing to report.
        assert finding_set(result) == set()
    finally:
        consumer.close()
    marks = {
        (entry[0], entry[1], offset)
        for record in read_whole_ledger(world.bootstrap, world.consumer_ledger)
        if record["type"] == "processed-ranges"  # rows: topic, partition, first, last offset, first, last ms
        for entry in record["entries"]
        for offset in range(entry[2], entry[3] + 1)
    }
    assert marks == {(world.topic, 0, offset) for offset in range(6)}


def test_records_a_group_processed_before_its_consumer_was_probed_are_not_called_unprocessed(
    spark: SparkSession, world: World, make_topic, tmp_path: Path
):
    """The auditor adopted on a running pipeline: the group's plain consumer processed and
    committed records before the probed one took over, and one instance (partition 1) still
    runs without the probe. Only what the probed consumer passed without marking is unprocessed."""
    from auditor.probes import AuditedConsumer

    for ticket in range(1, 7):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=120)
    for ticket in (7, 8):
        world.produce(f"t{ticket}", ticket, partition=1, age_s=120)
    world.insert(*range(1, 9))
    settings = {"bootstrap.servers": world.bootstrap, "group.id": world.group, "enable.auto.commit": False}
    plain = Consumer(settings)
    try:  # before the probe: tickets 1 and 2 processed and committed; partition 1 never probed
        plain.commit(message=consume(plain, world.topic, 0, 0, 2)[-1], asynchronous=False)
        plain.commit(message=consume(plain, world.topic, 1, 0, 2)[-1], asynchronous=False)
    finally:
        plain.close()
    probed = AuditedConsumer(settings, ledger_topic=world.consumer_ledger, clients_topic=make_topic("_audit.clients"))
    try:  # the probed consumer processes tickets 3-5, then commits past ticket 6 unprocessed
        for msg in consume(probed, world.topic, 0, 2, 4)[:3]:
            probed.mark_processed(msg)
        probed.commit(offsets=[TopicPartition(world.topic, 0, 6)], asynchronous=False)
    finally:
        probed.close()

    result = reconcile_once(spark, world.binding(), tmp_path)

    assert finding_set(result) == {("unprocessed", "6", None, *world.at("t6"))}


def test_it_never_calls_records_unprocessed_whose_marks_the_consumer_ledger_refused(
    spark: SparkSession, world: World, make_topic, tmp_path: Path
):
    """A probed consumer processes tickets 3 and 4 while the broker refuses its ledger's
    records, commits past them, and names the lost marks in a marks-lost record once the
    ledger takes records again; it then passes ticket 5 without processing it and processes
    6. A first run read the records before any of that: they are the state's candidates. The
    second run must not call 3 and 4 unprocessed (processed or not cannot be told), and still
    reports 5. Ground truth: what the test's consumer did and what the real ledger holds."""
    from auditor.probes import AuditedConsumer
    from tests.support.lost_marks import ledgered_offsets, lost_offsets, mark_while_the_ledger_refuses

    for ticket in range(1, 7):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=120)
    world.insert(*range(1, 7))
    first = reconcile_once(spark, world.binding(), tmp_path)
    assert finding_set(first) == set()

    settings = {"bootstrap.servers": world.bootstrap, "group.id": world.group, "enable.auto.commit": False}
    probed = AuditedConsumer(
        settings,
        ledger_topic=world.consumer_ledger,
        clients_topic=make_topic("_audit.clients"),
        ledger_flush_interval_s=0.2,
        ledger_flush_timeout_s=5.0,
    )
    try:
        got = consume(probed, world.topic, 0, 0, 6)
        for msg in got[:2]:  # tickets 1 and 2, their marks written
            probed.mark_processed(msg)
        wait_until(
            lambda: ledgered_offsets(world.bootstrap, world.consumer_ledger, world.topic) == {(0, 0), (0, 1)},
            15,
            "the first marks in the ledger",
        )
        mark_while_the_ledger_refuses(probed, world.bootstrap, world.consumer_ledger, got[2:4], commit_to=4)
        probed.mark_processed(got[5])  # ticket 6; ticket 5 is passed unprocessed
        probed.commit(offsets=[TopicPartition(world.topic, 0, 6)], asynchronous=False)
    finally:
        probed.close()
    refused = {world.at("t3"), world.at("t4")}
    assert refused <= lost_offsets(world.bootstrap, world.consumer_ledger, world.topic)
    assert not refused & ledgered_offsets(world.bootstrap, world.consumer_ledger, world.topic)

    second = reconcile_once(spark, world.binding(), tmp_path)
    third = reconcile_once(spark, world.binding(), tmp_path)

    assert finding_set(second) == {("unprocessed", "5", None, *world.at("t5"))}
    assert finding_set(third) == {("unprocessed", "5", None, *world.at("t5"))}


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


@pytest.mark.parametrize("new_ledger", ["longer", "shorter"])
def test_a_binding_that_names_another_consumer_ledger_has_it_read_from_its_start(
    spark: SparkSession, world: World, make_topic, tmp_path: Path, new_ledger: str
):
    # The consumer processed tickets 1-3 and marked them in the ledger the first run reads.
    for ticket in (1, 2, 3):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=10 * 60)
        world.processed(f"t{ticket}", age_s=9 * 60)
    another_applications_marks(world, world.consumer_ledger, 5 if new_ledger == "shorter" else 0)
    world.commit(0, world.at("t3")[1] + 1)
    world.insert(1, 2, 3)
    first = reconcile_once(spark, world.binding(), tmp_path)
    assert finding_set(first) == set()

    # The deployment moves its probes to another ledger (a binding's consumer_ledger_topic, or
    # AUDITOR_CONSUMER_LEDGER_TOPIC). Tickets 4-6 are processed and marked there, at its first
    # offsets; it then holds more records than the old one (another application's) or fewer.
    old_ledger, world.consumer_ledger = world.consumer_ledger, make_topic("_audit.consumer-ledger")
    for ticket in (4, 5, 6):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=5 * 60)
        world.processed(f"t{ticket}", age_s=4 * 60)
    another_applications_marks(world, world.consumer_ledger, 5 if new_ledger == "longer" else 0)
    world.commit(0, world.at("t6")[1] + 1)
    world.insert(4, 5, 6, age="2 minutes")  # inside the incremental run's window
    # Ticket 7: committed past and never processed, the one real skip.
    world.produce("t7", 7, partition=0, age_s=3 * 60)
    world.commit(0, world.at("t7")[1] + 1)
    world.insert(7, age="2 minutes")

    second = reconcile_once(spark, world.binding(), tmp_path)
    # Every mark of 1-6 was read, from both ledgers: only 7 is unprocessed.
    assert finding_set(second) == {("unprocessed", "7", None, *world.at("t7"))}
    assert second["mode"] == "incremental"
    assert [w for w in second["warnings"] if "ledger is now" in w] == [
        f"the consumer ledger is now {world.consumer_ledger} (earlier runs read {old_ledger}): it is read from its start"
    ]


@pytest.mark.parametrize("unread", ["no-groups", "ledger-typo", "another-ledger"])
def test_it_never_counts_a_consumer_ledger_read_again_after_a_run_that_did_not_read_it(
    spark: SparkSession, world: World, make_topic, tmp_path: Path, unread: str
):
    """One run does not read the consumer ledger (the binding has no group for a while, or
    names a ledger topic that does not exist); the next one reads it from where the runs
    before stopped: the marks they read are not counted a second time."""
    from auditor.probes import AuditedConsumer

    for ticket in (1, 2, 3):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=120)
    world.insert(1, 2, 3)
    settings = {"bootstrap.servers": world.bootstrap, "group.id": world.group, "enable.auto.commit": False}
    probed = AuditedConsumer(settings, ledger_topic=world.consumer_ledger, clients_topic=make_topic("_audit.clients"))
    try:  # one consumer session processes tickets 1-3, once each, and commits past them
        for msg in consume(probed, world.topic, 0, 0, 3):
            probed.mark_processed(msg)
        probed.commit(offsets=[TopicPartition(world.topic, 0, 3)], asynchronous=False)
    finally:
        probed.close()
    assert len(read_whole_ledger(world.bootstrap, world.consumer_ledger)) >= 1

    assert finding_set(reconcile_once(spark, world.binding(), tmp_path)) == set()
    if unread == "no-groups":
        second = world.binding(consumer_groups=[])
    elif unread == "ledger-typo":
        second = world.binding(consumer_ledger_topic=f"_audit.typo-{uuid.uuid4().hex[:8]}")
    else:  # the probes moved to another ledger for a while, then back
        second = world.binding(consumer_ledger_topic=make_topic("_audit.consumer-ledger"))
    assert finding_set(reconcile_once(spark, second, tmp_path)) == set()
    # The binding as it was: every record was processed once, by the one session.
    third = reconcile_once(spark, world.binding(), tmp_path)
    assert finding_set(third) == set()
    assert third["counts"]["reprocessed"] == 0
    assert finding_set(reconcile_once(spark, world.binding(), tmp_path)) == set()


@pytest.mark.parametrize("new_ledger", ["longer", "shorter"])
def test_a_consumer_ledger_deleted_and_created_again_is_read_from_its_start(
    spark: SparkSession, world: World, make_topic, tmp_path: Path, new_ledger: str
):
    """The consumer ledger is deleted and created again between two runs; the probed consumer
    goes on into the new one, whose first offsets hold its marks again, below where the first
    run stopped reading the old one. The new ledger is read from its start: what the group
    processed is not called unprocessed (nor does a shorter new ledger fail the run), and what
    it committed past without processing still is."""
    from auditor.probes import AuditedConsumer

    clients = make_topic("_audit.clients")
    settings = {"bootstrap.servers": world.bootstrap, "group.id": world.group, "enable.auto.commit": False}

    def process(start: int, count: int) -> None:
        """`count` records from `start` processed by the group's probed consumer, once each,
        then committed past."""
        probed = AuditedConsumer(settings, ledger_topic=world.consumer_ledger, clients_topic=clients)
        try:
            for msg in consume(probed, world.topic, 0, start, count):
                probed.mark_processed(msg)
            probed.commit(offsets=[TopicPartition(world.topic, 0, start + count)], asynchronous=False)
        finally:
            probed.close()

    binding = world.binding(grace="2s")
    for ticket in (1, 2, 3):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=120)
    world.insert(1, 2, 3)
    process(0, 3)
    another_applications_marks(world, world.consumer_ledger, 5)
    assert finding_set(reconcile_once(spark, binding, tmp_path)) == set()
    old_length = len(read_whole_ledger(world.bootstrap, world.consumer_ledger))

    create_again(world.bootstrap, world.consumer_ledger)
    # The new ledger's first record; past the binding's grace after it, tickets 4-6 are
    # produced, processed and committed past, so their marks cannot be of what the old
    # ledger held unread.
    another_applications_marks(world, world.consumer_ledger, 1)
    time.sleep(3)
    for ticket in (4, 5, 6):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=0)
    world.insert(4, 5, 6, age="2 minutes")
    process(3, 3)
    # Ticket 7: committed past and never processed, the one real skip.
    world.produce("t7", 7, partition=0, age_s=0)
    world.commit(0, world.at("t7")[1] + 1)
    world.insert(7, age="2 minutes")
    if new_ledger == "longer":
        another_applications_marks(world, world.consumer_ledger, old_length + 5)
    # Ground truth, a full read of the new ledger: the group's marks of 4-6 lie below where
    # the first run stopped reading the old ledger, and the new one ends past it or before.
    new_records = read_whole_ledger(world.bootstrap, world.consumer_ledger)
    ours = [at for at, record in enumerate(new_records) if record.get("group") == world.group]
    assert ours and max(ours) < old_length
    assert (len(new_records) > old_length) == (new_ledger == "longer")

    second = reconcile_once(spark, binding, tmp_path)
    assert finding_set(second) == {("unprocessed", "7", None, *world.at("t7"))}
    assert second["counts"]["reprocessed"] == 0
    assert [w for w in second["warnings"] if "deleted and created again" in w and world.consumer_ledger in w]
    third = reconcile_once(spark, binding, tmp_path)
    assert finding_set(third) == {("unprocessed", "7", None, *world.at("t7"))}
    assert third["counts"]["reprocessed"] == 0


def test_it_never_calls_unprocessed_what_a_group_processed_while_the_binding_did_not_name_it(
    spark: SparkSession, world: World, make_topic, tmp_path: Path
):
    """A group taken out of the binding and named again: its marks written in between are not
    read, so what it had not processed before cannot be judged against its commits after."""
    from auditor.probes import AuditedConsumer

    for ticket in (1, 2, 3, 4):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=120)
    world.insert(1, 2, 3, 4)
    clients = make_topic("_audit.clients")
    g, h = world.group, f"{world.group}-h"

    def process(group: str, start: int, count: int) -> None:
        """`count` records from `start` processed by the group's probed consumer, once each,
        then committed past."""
        settings = {"bootstrap.servers": world.bootstrap, "group.id": group, "enable.auto.commit": False}
        probed = AuditedConsumer(settings, ledger_topic=world.consumer_ledger, clients_topic=clients)
        try:
            for msg in consume(probed, world.topic, 0, start, count):
                probed.mark_processed(msg)
            probed.commit(offsets=[TopicPartition(world.topic, 0, start + count)], asynchronous=False)
        finally:
            probed.close()

    process(h, 0, 4)
    process(g, 0, 3)  # g has not reached ticket 4 yet
    assert finding_set(reconcile_once(spark, world.binding(consumer_groups=[g, h]), tmp_path)) == set()
    # g is taken out of the binding; meanwhile it processes ticket 4 and commits past it.
    process(g, 3, 1)
    assert finding_set(reconcile_once(spark, world.binding(consumer_groups=[h]), tmp_path)) == set()
    # g named again: it processed every record, each once.
    assert finding_set(reconcile_once(spark, world.binding(consumer_groups=[g, h]), tmp_path)) == set()


def test_it_never_calls_sequences_never_sent_whose_records_and_ledger_entries_were_deleted_unread(
    spark: SparkSession, world: World, kafka_admin: AdminClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # A block per sequence number, so that these few records stand for a long session's blocks.
    monkeypatch.setattr(reconcile_findings, "SEQ_TIME_BUCKET", 1)
    monkeypatch.setattr(reconcile_updates, "SEQ_TIME_BUCKET", 1)
    # What the producer did: sequences 0-3 and 5 sent and acked, each ledgered in a ledger
    # record of its own soon after; sequence 4 never sent at all.
    # Sequence 5 older than the send outcome wait (6 min): a hole below a sequence sent since
    # may still be on its way, and is not judged yet.
    sent = {0: 40 * 60, 1: 38 * 60, 2: 12 * 60, 3: 10 * 60, 5: 8 * 60}  # seq → age in seconds
    for seq, age_s in sent.items():
        world.produce(f"t{seq}", 100 + seq, seq=seq, partition=0, age_s=age_s)
        world.ledger(seq, "acked", 100 + seq, label=f"t{seq}")
        world.flush_ledger(age_s=max(0, age_s - 30))
    world.insert(102, 103, 105)
    # Retention deletes sequences 0 and 1 from the topic and from the producer ledger before any
    # run reads them.
    delete_records_before(kafka_admin, world.topic, 0, world.at("t2")[1])
    delete_records_before(kafka_admin, world.producer_ledger, 0, 2)

    result = reconcile_once(spark, world.binding(), tmp_path)

    gaps = sorted((f["cause"], f["seq"], f["seq_end"]) for f in result["findings"] if f["kind"] == "gap")
    # Sequence 4 came after sequence 3, written after both deletions: nothing deleted could
    # have held it. Nothing is left to tell whether 0 and 1 were sent: not reported.
    assert gaps == [("never-sent", 4, 4)], gaps
    assert result["counts"]["gap"] == 1
    deleted = [w for w in result["warnings"] if w.startswith("producer ledger")]
    assert len(deleted) == 1 and deleted[0].startswith(
        f"producer ledger {world.producer_ledger}/0: offsets 0..1 (2 record(s)) were deleted"
    ), result["warnings"]
    assert result["window"]["entries_lost_until"] and result["window"]["unverifiable_until"]


def test_it_waits_out_a_v1_hole_ledgered_around_moments_ago_and_still_reports_an_old_one(
    spark: SparkSession, world: World, tmp_path: Path
):
    """A v1 probe ledgers a sequence when its delivery report comes: while one partition's send
    waits (here: its batch lingers), later sequences sent to another partition are acked and
    ledgered around it. Ground truth: the delivery reports and a full read of the topic."""
    from auditor.probes import AuditedProducerV1

    binding = world.binding(consumer_groups=[], guarantee="at-least-once")
    world.insert(1, 2, 3, 4, 5, age="0 seconds")  # within grace: no row is judged
    # An older session with a real hole: sequence 1 never sent, its neighbours sent and ledgered
    # well before the send outcome wait (6 min by librdkafka's defaults).
    world.produce("old0", 100, seq=0, partition=0, age_s=20 * 60)
    world.ledger(0, "acked", 100, "old0")
    world.produce("old2", 102, seq=2, partition=0, age_s=15 * 60)
    world.ledger(2, "acked", 102, "old2")
    world.flush_ledger(age_s=15 * 60)

    delivered: dict[str, tuple[int, int]] = {}

    def report(err: Any, msg: Any) -> None:
        assert err is None, err
        delivered[msg.key().decode()] = (msg.partition(), msg.offset())

    # A partition's batch goes out when it holds two records, or after a minute's linger.
    config = {"bootstrap.servers": world.bootstrap, "linger.ms": 60_000, "batch.num.messages": 2}
    probe = AuditedProducerV1(
        config, ledger_topic=world.producer_ledger, clients_topic=world.consumer_ledger, ledger_flush_interval_s=0.2
    )
    try:
        # seq 0 → p0, seq 1 → p1 (alone in its batch: it lingers), seqs 2-4 → p0
        for ticket, partition in ((1, 0), (2, 1), (3, 0), (4, 0), (5, 0)):
            value = json.dumps({"ticket_id": ticket}).encode()
            probe.produce(world.topic, value, str(ticket).encode(), partition, on_delivery=report)
        deadline = time.monotonic() + 30
        while len(delivered) < 4 and time.monotonic() < deadline:
            probe.poll(0.2)
        assert set(delivered) == {"1", "3", "4", "5"}, delivered
        wait_until(
            lambda: {s for s, st in _v1_ledger_statuses(world, probe.session_id) if st == "acked"} >= {0, 2, 3, 4},
            15,
            "the probe's ledger entries of sequences 0, 2, 3 and 4",
        )
        assert {r.key for r in LabCluster(world.bootstrap).read_topic(world.topic)} >= {"1", "3", "4", "5"}
        assert "2" not in {r.key for r in LabCluster(world.bootstrap).read_topic(world.topic)}

        first = reconcile_once(spark, binding, tmp_path)
        gaps = sorted(
            (f["cause"], f["session"], f["seq"], f["seq_end"]) for f in first["findings"] if f["kind"] == "gap"
        )
        # sequence 1 of the probe's session is on its way, not never sent; the old hole is reported
        assert gaps == [("never-sent", world.session, 1, 1)], gaps

        assert probe.flush(30) == 0
    finally:
        probe.close()
    assert delivered["2"][0] == 1  # the lingering send was delivered moments later
    second = reconcile_once(spark, binding, tmp_path)
    gaps = sorted((f["cause"], f["session"], f["seq"], f["seq_end"]) for f in second["findings"] if f["kind"] == "gap")
    assert gaps == [("never-sent", world.session, 1, 1)], gaps


def _v1_ledger_statuses(world: World, session: str) -> list[tuple[int, str]]:
    """(seq, status) of every v1 ledger entry of `session`, read from the producer ledger."""
    consumer = Consumer(
        {
            "bootstrap.servers": world.bootstrap,
            "group.id": f"t-{uuid.uuid4().hex}",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(world.producer_ledger, 0, 0)])
        entries: list[tuple[int, str]] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                break  # the end of the partition
            record = json.loads(msg.value())
            if record.get("type") == "batch" and record.get("pid") == session:
                entries.extend((entry[0], entry[1]) for entry in record["entries"])
        return entries
    finally:
        consumer.close()


def test_it_fails_a_run_when_records_are_deleted_while_it_reads(world: World, kafka_admin: AdminClient):
    world.produce("t1", 1, partition=0)
    world.produce("t2", 2, partition=0)
    world.produce("t3", 3, partition=1)
    run_admin = admin_client(world.bootstrap)  # the run's one client asks both checks
    plan = plan_offsets(world.topic, partition_offsets(run_admin, world.topic, [0, 1]), {})
    check_nothing_deleted_while_read(run_admin, plan)  # nothing moved: the run goes on

    delete_records_before(kafka_admin, world.topic, 0, 1)
    with pytest.raises(ReconcileError, match=rf"{world.topic}/0 from offset 0 \(log start now 1\)"):
        check_nothing_deleted_while_read(run_admin, plan)


def test_it_fails_a_run_whose_read_of_a_partition_stopped_short_of_its_planned_end(spark: SparkSession, world: World):
    """A truncation (an unclean leader election) after the run planned its end and before
    Spark read there: Spark's Kafka source ends the partition at the log end, silently. The
    next run would start at the planned end, and records written again below it never be read."""
    binding = world.binding()
    # Partition 0 ends on a transaction marker: offsets Spark never returns, and no short read.
    world.aborted_transaction("t12", 12, "t14", 14)
    markers_end = partition_offsets(admin_client(world.bootstrap), world.topic, [0])[0].high
    whole = OffsetRange(world.topic, {0: (0, markers_end)})
    read = summarize_partitions(transform_records(extract_topic(spark, binding, whole), binding.record_key))
    assert read[0].last[0] == world.at("t14")[1] < markers_end - 1
    check_read_to_planned_end(binding, whole, {0: read[0].last[0]})
    # The run planned 3 more records than the log now holds (truncated before the read).
    planned = OffsetRange(world.topic, {0: (0, markers_end + 3)})
    read = summarize_partitions(transform_records(extract_topic(spark, binding, planned), binding.record_key))
    assert read[0].last[0] == world.at("t14")[1]  # the Kafka source stopped at the log end, silently
    last = {0: read[0].last[0]}
    with pytest.raises(ReconcileError, match=rf"{world.topic}/0 .*its log now ends at {markers_end}"):
        check_read_to_planned_end(binding, planned, last)
    # The log filled again past the planned end: the records below it were never read.
    for ticket in (20, 21, 22):
        world.produce(f"t{ticket}", ticket)
    assert world.at("t20")[1] == markers_end
    with pytest.raises(ReconcileError, match=rf"{world.topic}/0 .*a record at offset {markers_end} was not read"):
        check_read_to_planned_end(binding, planned, last)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_it_fails_cleanly_when_the_broker_is_unreachable(spark: SparkSession, world: World, tmp_path: Path):
    binding = world.binding(bootstrap_servers=f"127.0.0.1:{closed_port()}")
    result = reconcile_once(spark, binding, tmp_path)
    assert result["status"] == "failed"
    assert "Kafka" in result["error"] or "Transport" in result["error"], result["error"]
    assert result["findings"] == [] and result["counts"] == {}
    assert not (tmp_path / binding.name / "state.json").exists()


def test_it_fails_cleanly_when_the_database_is_unreachable(spark: SparkSession, world: World, tmp_path: Path):
    build_phase_one(world)
    binding = world.binding(source_url=f"postgresql://auditor:x@127.0.0.1:{closed_port()}/nowhere")
    result = reconcile_once(spark, binding, tmp_path)
    assert result["status"] == "failed"
    assert "Connection" in result["error"] or "connect" in result["error"], result["error"]
    assert result["findings"] == []
    assert not (tmp_path / binding.name / "state.json").exists()


def test_it_fails_and_keeps_its_state_when_the_topic_is_deleted(
    spark: SparkSession, world: World, kafka_admin, tmp_path: Path
):
    binding = world.binding()
    world.insert(1)
    world.produce("t1", 1, seq=0)
    assert reconcile_once(spark, binding, tmp_path)["status"] == "ok"
    state = (tmp_path / binding.name / "state.json").read_text()
    kafka_admin.delete_topics([world.topic])[world.topic].result(timeout=30)
    result = reconcile_once(spark, binding, tmp_path)
    assert result["status"] == "failed"
    assert world.topic in result["error"]
    assert result["findings"] == []
    assert (tmp_path / binding.name / "state.json").read_text() == state


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"table": "public.no_such_table"}, "unknown table 'public.no_such_table'"),
        ({"key_column": "ticket_no"}, "unknown column 'ticket_no' (key_column)"),
        ({"created_column": "inserted_at"}, "unknown column 'inserted_at' (created_column)"),
        ({"record_key": "json:$.no_such_field"}, "record_key 'json:$.no_such_field' matched nothing"),
    ],
)
def test_it_rejects_bad_binding_config(
    spark: SparkSession, world: World, tmp_path: Path, overrides: dict[str, str], message: str
):
    world.insert(1)
    world.produce("t1", 1, seq=0)
    binding = world.binding(**overrides)
    result = reconcile_once(spark, binding, tmp_path)
    assert result["status"] == "failed"
    assert message in result["error"], result["error"]
    assert binding.name in result["error"]
    assert result["findings"] == []


def produce_with_headers(w: World, label: str, ticket: int, headers: list[tuple[str, bytes]] | None) -> None:
    """One record with exactly `headers` (bad audit headers on purpose)."""

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        w.offsets[label] = (msg.partition(), msg.offset())

    value = json.dumps({"ticket_id": ticket}).encode()
    created_ms = int(time.time() * 1000) - 10 * 60 * 1000
    w.producer.produce(w.topic, value=value, headers=headers, timestamp=created_ms, on_delivery=delivered)
    assert w.producer.flush(30) == 0


def test_it_counts_records_without_and_with_malformed_audit_headers(spark: SparkSession, world: World, tmp_path: Path):
    binding = world.binding()
    world.insert(*range(1, 10))
    good = [("audit-pid", world.session.encode()), ("audit-ts", b"1700000000000")]
    world.produce("ok", 1, seq=0)
    world.produce("bare", 2)  # no headers at all
    produce_with_headers(world, "foreign", 3, [("trace-id", b"abc")])  # headers, none of them audit ones
    produce_with_headers(world, "bad-seq", 4, [("audit-id", b"4"), *good, ("audit-seq", b"four")])
    produce_with_headers(world, "partial", 5, [("audit-id", b"5"), ("audit-seq", b"2")])
    produce_with_headers(world, "bad-pid", 6, [("audit-id", b"6"), ("audit-pid", b"p1"), ("audit-seq", b"3"),
                                               ("audit-ts", b"1")])  # fmt: skip

    first = reconcile_once(spark, binding, tmp_path)
    assert first["status"] == "ok", first["error"]
    assert first["counts"]["records_without_headers"] == 2
    assert first["counts"]["records_malformed_headers"] == 3
    # They are still audited by key: none of tickets 1-6 is missing.
    assert {f["key"] for f in first["findings"] if f["kind"] == "missing"} == {"7", "8", "9"}

    # Counts are of the records each run read: the second run reads two new records.
    world.produce("ok2", 7, seq=1)
    produce_with_headers(world, "dup-seq", 8, [("audit-id", b"8"), *good, ("audit-seq", b"4"), ("audit-seq", b"5")])
    second = reconcile_once(spark, binding, tmp_path)
    assert second["mode"] == "incremental" and second["records_read"] == 2
    assert (second["counts"]["records_without_headers"], second["counts"]["records_malformed_headers"]) == (0, 1)
    # The latest record without any audit header (an unprobed producer's) stays in the state,
    # for the stuck diagnosis: as the broker stamped "bare" and "foreign".
    headerless = [record_timestamp_ms(world, label) for label in ("bare", "foreign")]
    assert json.loads((tmp_path / binding.name / "state.json").read_text())["unprobed_record_ms"] == max(headerless)


def record_timestamp_ms(w: World, label: str) -> int:
    """The timestamp the broker holds for the record at `label`'s offset."""
    partition, offset = w.at(label)
    consumer = Consumer({"bootstrap.servers": w.bootstrap, "group.id": f"read-{uuid.uuid4().hex[:8]}"})
    try:
        consumer.assign([TopicPartition(w.topic, partition, offset)])
        msg = consumer.poll(30)
        assert msg is not None and msg.error() is None and msg.offset() == offset
        return int(msg.timestamp()[1])
    finally:
        consumer.close()


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


@pytest.mark.parametrize("record_key", ["key", "json:$.ticket_id"])
def test_tombstones_are_deletions_not_copies_or_orphans(
    spark: SparkSession, world: World, tmp_path: Path, record_key: str
):
    # Ticket 3's item was deleted (its row is gone, a tombstone follows its record); ticket 4's
    # topic item was deleted while its row stays; key 7's tombstone deletes a record this topic
    # no longer shows. A tombstone is no delivery of an item: no copy, no orphan, no key.
    binding = world.binding(record_key=record_key, guarantee="exactly-once", consumer_groups=[])
    world.insert(1, 2, 4)
    for ticket in (1, 2, 3, 4):
        produce_keyed(world, f"t{ticket}", str(ticket), ticket)
    first = reconcile_once(spark, binding, tmp_path)
    # The truth before the tombstones: record 3's item has no row (the auditor cannot know yet
    # it was deleted).
    assert finding_set(first) == {("orphan", "3", None, *world.at("t3"))}

    produce_keyed(world, "x3", "3", None)
    produce_keyed(world, "x4", "4", None)
    produce_keyed(world, "x7", "7", None)
    # Ticket 5's row (past grace) has only a tombstone: its item was deleted (on a compacted
    # topic its record may be gone): not missing.
    world.insert(5, age="2 minutes")
    produce_keyed(world, "x5", "5", None)
    second = reconcile_once(spark, binding, tmp_path)
    assert second["mode"] == "incremental" and second["records_read"] == 4
    second_state = json.loads((tmp_path / binding.name / "state.json").read_text())
    assert second_state["datasets"]["tombstones"].startswith(f"runs/{second['run_id']}/")
    # A tombstone on the record key names the deleted item: record 3 is no orphan any more.
    # On a JSON path a tombstone names no item (no value): record 3 stays an orphan, row 5 is
    # missing.
    assert finding_set(second) == (
        set() if record_key == "key" else {("orphan", "3", None, *world.at("t3")), ("missing", "5", None, None, None)}
    )
    # A run that reads no tombstone keeps those read before.
    world.insert(8, age="2 minutes")
    produce_keyed(world, "t8", "8", 8)
    third = reconcile_once(spark, binding, tmp_path)
    assert third["records_read"] == 1 and finding_set(third) == finding_set(second)
    state = json.loads((tmp_path / binding.name / "state.json").read_text())
    assert state["datasets"]["tombstones"] == second_state["datasets"]["tombstones"]
    # Read at once, the same answer.
    full = reconcile_once(spark, binding, tmp_path / "full", full=True)
    assert finding_set(full) == finding_set(third)


def test_a_run_of_records_without_audit_headers_keeps_the_sequence_coverage_by_reference(
    spark: SparkSession, world: World, tmp_path: Path
):
    # What the test produced: the probe's session wrote sequences 0-5 (and 6 below); the
    # transaction's session 0 (aborted) and 1 (committed).
    # At least once: transactions are noticed where the topic has them (an exactly-once
    # binding reads every run's records uncommitted too, where aborted ones carry sequences).
    binding = world.binding(guarantee="at-least-once")
    build_phase_one(world)
    first = reconcile_once(spark, binding, tmp_path)
    assert first["mode"] == "full"
    state_file = tmp_path / binding.name / "state.json"
    first_state = json.loads(state_file.read_text())
    coverage = tmp_path / binding.name / first_state["datasets"]["seq_coverage"]
    expected = {(world.session, 0, 5), ("txn-session", 0, 1)}
    assert {tuple(r.values()) for r in pq.read_table(coverage).to_pylist()} == expected

    # Only records without audit headers: no sequence to add, the dataset is not written again.
    world.insert(20, 21, age="1 minute")
    world.produce("t20", 20)
    world.produce("t21", 21, partition=1)
    second = reconcile_once(spark, binding, tmp_path)
    assert second["mode"] == "incremental" and second["records_read"] == 2
    assert second["counts"]["records_without_headers"] == 2
    second_state = json.loads(state_file.read_text())
    assert second_state["datasets"]["seq_coverage"] == first_state["datasets"]["seq_coverage"]
    assert coverage.exists()
    # Lost coverage would show as gaps: the ledger acked sequences 0-5.
    assert finding_set(second) == finding_set(first)

    # A probed record again: written anew, with its sequence.
    world.insert(22, age="1 minute")
    world.produce("t22", 22, seq=6)
    third = reconcile_once(spark, binding, tmp_path)
    third_state = json.loads(state_file.read_text())
    assert third_state["datasets"]["seq_coverage"].startswith(f"runs/{third['run_id']}/")
    written = tmp_path / binding.name / third_state["datasets"]["seq_coverage"]
    assert {tuple(r.values()) for r in pq.read_table(written).to_pylist()} == {
        (world.session, 0, 6),
        ("txn-session", 0, 1),
    }
    assert finding_set(third) == finding_set(first)
    full = reconcile_once(spark, binding, tmp_path / "full", full=True)
    assert finding_set(full) == finding_set(third)


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


@pytest.mark.parametrize("rewritten", [4, 1], ids=["offsets-hold-other-records", "log-end-moved-back"])
def test_it_notices_offsets_it_read_were_rewritten_and_names_what_the_broker_lost(
    spark: SparkSession, world: World, kafka_admin, make_topic, tmp_path: Path, rewritten: int
):
    """Offsets already read are truncated and rewritten (here: the broker holding the
    partition's only replica loses its disk and starts it over empty, as an unclean leader
    election rewrites a partition's tail). The next incremental run must neither report the
    new records' rows missing nor miss the records that are gone: those are missing with
    cause broker-lost, at the offset a run saw them."""
    cluster = LabCluster(world.bootstrap)
    broker = max(cluster.broker_ids())
    world.topic = f"rec-disk-{uuid.uuid4().hex[:8]}"
    cluster.create_topic_on(world.topic, broker, partitions=2)
    binding = world.binding(consumer_groups=[], guarantee="at-least-once")
    world.insert(1, 2, 3, 4, 5, 6)
    for ticket in (1, 2, 3, 4):  # a plain producer: no audit headers, no ledger
        world.produce(f"before-{ticket}", ticket)
    first = reconcile_once(spark, binding, tmp_path)
    assert finding_set(first) == {("missing", "5", None, None, None), ("missing", "6", None, None, None)}
    before = {ticket: world.at(f"before-{ticket}") for ticket in (1, 2, 3, 4)}
    id_before = topic_id(kafka_admin, world.topic)

    cluster.lose_disk(broker, world.topic, 0)
    assert topic_id(kafka_admin, world.topic) == id_before is not None  # the same topic
    for ticket in (1, 2, 5, 6)[:rewritten]:
        world.produce(f"after-{ticket}", ticket)

    # Ground truth, without the auditor: the rows, a full read of the topic, and where the
    # first producer's delivery reports put each record.
    now_in_topic = read_whole_topic(world.bootstrap, world.topic)
    present = {t for t in now_in_topic.values() if t is not None}
    gone = {1, 2, 3, 4, 5, 6} - present
    expected = {
        ("missing", str(t), "broker-lost", *before[t])
        if t in before and now_in_topic.get(before[t]) != t
        else ("missing", str(t), None, None, None)
        for t in gone
    }

    second = reconcile_once(spark, binding, tmp_path)
    assert second["mode"] == "rebuild"
    assert set(second["rewritten"]) == {"0"}
    assert finding_set(second) == expected
    lost = {f["key"]: f["evidence"] for f in second["findings"] if f["cause"] == "broker-lost"}
    assert {key: ev["seen"]["run_id"] for key, ev in lost.items()} == dict.fromkeys(lost, first["run_id"])

    # The next incremental run keeps what it knows and reports the same.
    third = reconcile_once(spark, binding, tmp_path)
    assert third["mode"] == "incremental"
    assert finding_set(third) == expected
    cluster.delete_topic(world.topic)


# A compacted topic whose cleaner removes superseded records, then tombstones, within seconds
# (a segment closes after 1 s; any dirt is worth a pass; tombstones are kept for no time).
CLEANED_AT_ONCE = {
    "cleanup.policy": "compact",
    "segment.ms": "1000",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "0",
}


def test_a_rebuild_keeps_a_record_the_log_cleaner_removed_as_delivered(
    spark: SparkSession, world: World, kafka_admin, tmp_path: Path
):
    """A compacted topic. Item 1's record is read by a run; then the application deletes the
    item (a tombstone; its row stays, as a soft delete), and the log cleaner removes the record
    and the tombstone before any run reads the tombstone. Then the broker loses the other
    partition's log, and the next run rebuilds. Item 1 was delivered: no `missing`."""
    cluster = LabCluster(world.bootstrap)
    broker = max(cluster.broker_ids())
    world.topic = f"rec-cmp-{uuid.uuid4().hex[:8]}"
    created = kafka_admin.create_topics(
        [NewTopic(world.topic, 2, replica_assignment=[[broker]] * 2, config=CLEANED_AT_ONCE)]
    )
    created[world.topic].result(timeout=60)
    wait_until(lambda: all_led(kafka_admin, world.topic, 2), 30, f"leaders for {world.topic}")
    binding = world.binding(record_key="key", consumer_groups=[], guarantee="at-least-once")
    world.insert(1, 2)
    produce_keyed(world, "t1", "1", 1, partition=1)
    produce_keyed(world, "t2", "2", 2, partition=0)
    first = reconcile_once(spark, binding, tmp_path)
    assert finding_set(first) == set()

    produce_keyed(world, "x1", "1", None, partition=1)

    def cleaned() -> bool:
        # Another tombstone (no item's) rolls the segment and dirties the log again: the
        # cleaner removes record 1 on one pass and its tombstone on a later one.
        time.sleep(1.1)
        produce_keyed(world, "filler", "filler", None, partition=1)
        return not any(r.key == "1" for r in cluster.read_topic(world.topic))

    wait_until(cleaned, 120, f"the log cleaner to remove item 1's record and tombstone from {world.topic}")
    cluster.lose_disk(broker, world.topic, 0)

    # Ground truth, without the auditor: item 1's record was acked (its delivery report) in a
    # partition whose log was never cut (its end only grew: the cleaner removed it); item 2's
    # record was acked in the partition whose log the broker lost, now empty.
    left = cluster.read_topic(world.topic)
    assert not any(r.key in {"1", "2"} for r in left)
    assert all(r.partition == 1 for r in left)
    assert cluster.watermarks(world.topic)[1][1] > world.offsets["x1"][1]
    expected = {("missing", "2", "broker-lost", *world.at("t2"))}

    second = reconcile_once(spark, binding, tmp_path)
    assert second["mode"] == "rebuild" and set(second["rewritten"]) == {"0"}
    assert finding_set(second) == expected
    third = reconcile_once(spark, binding, tmp_path)
    assert third["mode"] == "incremental" and finding_set(third) == expected
    cluster.delete_topic(world.topic)


def test_an_item_whose_record_and_tombstone_the_cleaner_removed_unread_is_neither_missing_nor_a_gap(
    spark: SparkSession, world: World, kafka_admin, tmp_path: Path
):
    """A compacted topic keyed by the item id, with delete.retention.ms=0. A v1 probe (its
    ledger names each acked record's key) sends items 1 and 2; the application then deletes
    item 1 with a tombstone (its row stays, a soft delete), and the log cleaner removes the
    record and the tombstone before any run reads the topic. Item 3 was never sent. Nothing
    left tells item 1's fate: a first run reports neither a `missing` row nor a `gap` for its
    acked record, and counts rows 1 and 3 unverifiable. delete.retention.ms is then raised to
    30 minutes: the next run, minutes after the first, has no new horizon of its own, and
    still reports no gap for that acked record."""
    from auditor.probes import AuditedProducerV1

    cluster = LabCluster(world.bootstrap)
    world.topic = f"rec-tomb-{uuid.uuid4().hex[:8]}"
    kafka_admin.create_topics([NewTopic(world.topic, 1, 1, config=CLEANED_AT_ONCE)])[world.topic].result(timeout=60)
    wait_until(lambda: all_led(kafka_admin, world.topic, 1), 30, f"a leader for {world.topic}")
    binding = world.binding(record_key="key", consumer_groups=[], guarantee="at-least-once")
    world.insert(1, 2, 3)
    config = {"bootstrap.servers": world.bootstrap}
    ledgers = {"ledger_topic": world.producer_ledger, "clients_topic": world.consumer_ledger}
    acked: dict[str, tuple[int, int]] = {}

    def report(err: Any, msg: Any) -> None:
        assert err is None, err
        acked[msg.key().decode()] = (msg.partition(), msg.offset())

    # stamped as produce_keyed stamps the tombstones after them: a segment rolls on the record
    # timestamps (a later one segment.ms past its first), and an earlier stamp never rolls it
    stamp = int(time.time() * 1000) - 10 * 60 * 1000
    with AuditedProducerV1(config, **ledgers) as probe:
        for item in (1, 2):
            value = json.dumps({"ticket_id": item}).encode()
            probe.produce(world.topic, value, str(item).encode(), 0, on_delivery=report, timestamp=stamp)
        probe.flush(30)
    produce_keyed(world, "x1", "1", None)

    def cleaned() -> bool:
        time.sleep(1.1)
        produce_keyed(world, "filler", "filler", None)  # rolls the segment, dirties the log
        return not any(r.key == "1" for r in cluster.read_topic(world.topic))

    wait_until(cleaned, 120, f"the log cleaner to remove item 1's record and tombstone from {world.topic}")
    # Ground truth, without the auditor: item 1's record and tombstone were acked (delivery
    # reports) and a full read holds neither; item 2's record is there; item 3 was never sent.
    assert set(acked) == {"1", "2"} and "x1" in world.offsets
    left = cluster.read_topic(world.topic)
    assert not any(r.key in {"1", "3"} for r in left) and any(r.key == "2" for r in left)

    first = reconcile_once(spark, binding, tmp_path)
    assert first["mode"] == "full"
    # the old code: a broker-lost gap for item 1's acked record, and rows 1 and 3 missing
    assert finding_set(first) == set()
    assert first["counts"]["unverifiable"] == 2
    assert any("delete.retention.ms=0" in w and "no earlier run" in w for w in first["warnings"])

    cluster.set_topic_config(world.topic, {"delete.retention.ms": "1800000"})
    second = reconcile_once(spark, binding, tmp_path)
    assert second["mode"] == "incremental"
    # the first run's horizon is kept: without it, the gap (and row 1 broker-lost) came back
    assert finding_set(second) == set()
    assert second["counts"]["unverifiable"] == 2
    assert not any("delete.retention.ms=" in w for w in second["warnings"])
    cluster.delete_topic(world.topic)


def wait_for_topic_gone(admin: AdminClient, topic: str) -> None:
    deadline = time.monotonic() + 30
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"topic {topic} still listed after deletion"
        time.sleep(0.2)


def make_topic_named(admin: AdminClient, topic: str, partitions: int) -> bool:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    deadline = time.monotonic() + 30
    while True:
        try:
            admin.create_topics([NewTopic(topic, partitions)])[topic].result(timeout=30)
            return True
        except KafkaException:
            # The deletion may still be under way on some broker.
            assert time.monotonic() < deadline, f"could not re-create topic {topic}"
            time.sleep(0.5)


def test_it_reconciles_records_of_both_contract_versions_from_real_probes(
    spark: SparkSession, world: World, tmp_path: Path
):
    """A v1 probe and a v2 probe write the same topic and ledger. Ground truth: what each
    produce() call and delivery report said, and a full read of the topic afterwards."""
    from auditor.probes import AuditedProducer, AuditedProducerV1

    binding = world.binding()
    world.insert(*range(1, 9))
    config = {"bootstrap.servers": world.bootstrap, "message.max.bytes": 10_000_000}
    ledgers = {"ledger_topic": world.producer_ledger, "clients_topic": world.consumer_ledger}
    created_ms = int(time.time() * 1000) - 10 * 60 * 1000
    failed: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(msg.key().decode())

    def ticket(number: int, padding: int = 0) -> bytes:
        return json.dumps({"ticket_id": number, "pad": "x" * padding}).encode()

    with AuditedProducerV1(config, **ledgers) as old:
        for number in (1, 2, 3):
            old.produce(world.topic, ticket(number), str(number).encode(), 0, on_delivery=report, timestamp=created_ms)
        old.produce(world.topic, ticket(4, 3_000_000), b"4", 0, on_delivery=report, timestamp=created_ms)  # refused
        old.flush(30)
    with AuditedProducer(config, **ledgers) as new:
        for number in (5, 6, 7):
            new.produce(world.topic, ticket(number), str(number).encode(), 0, on_delivery=report, timestamp=created_ms)
        new.produce(world.topic, ticket(8, 3_000_000), b"8", 0, on_delivery=report, timestamp=created_ms)  # refused
        new.flush(30)
    assert sorted(failed) == ["4", "8"]
    truth = read_whole_topic(world.bootstrap, world.topic)
    assert sorted(truth.values()) == [1, 2, 3, 5, 6, 7]

    result = reconcile_once(spark, binding, tmp_path)

    assert result["status"] == "ok", result["error"]
    assert result["counts"]["records_without_headers"] == 0 and result["counts"]["records_malformed_headers"] == 0
    found = sorted(((f["kind"], f["key"], f["cause"], f["session"], f["seq"]) for f in result["findings"]), key=repr)
    assert found == sorted(
        [
            ("missing", "4", None, None, None),
            ("missing", "8", None, None, None),
            # Both delivery reports were errors: send-failed. v1's failure names its sequence;
            # v2's names only a window of sequences, and the `keys` record places it on the one
            # whose id is the report's key.
            ("gap", "4", "send-failed", old.session_id, 3),
            ("gap", "8", "send-failed", new.session_id, 3),
        ],
        key=repr,
    )


def test_records_acked_behind_another_producers_open_transaction_are_neither_missing_nor_lost(
    spark: SparkSession, world: World, tmp_path: Path
):
    """A transactional producer leaves a transaction open in partition 0, which holds the
    partition's last stable offset back; a probed, non-transactional producer (contract v2)
    then writes three records there, every one acked. A run reads up to the stable offset and
    cannot see them yet: their rows are not `missing` and their acked sequences not
    `broker-lost`. Once the transaction commits, the next run reads all four and finds
    nothing. Ground truth: the delivery reports and flush() results, the partition's offsets,
    and a read_uncommitted read of the whole topic."""
    from auditor.probes import AuditedProducer

    binding = world.binding(consumer_groups=[])
    world.insert(1, 2, 3, 99)
    created_ms = int(time.time() * 1000) - 10 * 60 * 1000
    txn = Producer({"bootstrap.servers": world.bootstrap, "transactional.id": f"held-{uuid.uuid4().hex[:8]}"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(world.topic, json.dumps({"ticket_id": 99}).encode(), b"99", partition=0, timestamp=created_ms)
    assert txn.flush(30) == 0  # written, and the transaction left open
    failed: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(msg.key().decode())

    ledgers = {"ledger_topic": world.producer_ledger, "clients_topic": world.consumer_ledger}
    with AuditedProducer({"bootstrap.servers": world.bootstrap}, **ledgers) as probe:
        for number in (1, 2, 3):
            value = json.dumps({"ticket_id": number}).encode()
            probe.produce(world.topic, value, str(number).encode(), 0, on_delivery=report, timestamp=created_ms)
        assert probe.flush(30) == 0
    assert failed == []
    held = partition_offsets(admin_client(world.bootstrap, None), world.topic, [0])[0]
    assert (held.stable, held.high) == (0, 4)  # everything past the open transaction's first record
    assert sorted(read_whole_topic(world.bootstrap, world.topic, "read_uncommitted").values()) == [1, 2, 3, 99]

    first = reconcile_once(spark, binding, tmp_path)

    assert finding_set(first) == set()
    assert any("behind an open transaction" in w and f"{world.topic}/0 [0, 4)" in w for w in first["warnings"])

    txn.commit_transaction(30)
    assert sorted(read_whole_topic(world.bootstrap, world.topic).values()) == [1, 2, 3, 99]
    second = reconcile_once(spark, binding, tmp_path)

    assert finding_set(second) == set()
    assert second["records_read"] == 5  # offsets read: the four records and the commit marker
    assert not any("behind an open transaction" in w for w in second["warnings"])


def test_a_binding_edited_to_read_another_topic_starts_over_and_nothing_recalls_the_old_topic(
    spark: SparkSession, world: World, make_topic, tmp_path: Path
):
    """A binding reads topic A (tickets 1, 2, 3), then is edited, under the same name and
    state folder, to read topic B, where only ticket 1 was ever produced. What the state knew
    of A is not B's: rows 2 and 3 are missing, and the stuck diagnosis' memory recalls no
    sighting of them. Ground truth: what was produced to each topic, and the table."""
    from auditor.pipelines.models import Binding as BindingModel
    from auditor.reconcile.memory import read_sightings
    from spark_jobs.state_location import StateLocation

    world.insert(1, 2, 3)
    for ticket in (1, 2, 3):
        world.produce(f"a{ticket}", ticket)
    binding = world.binding(consumer_groups=[])
    assert finding_set(reconcile_once(spark, binding, tmp_path)) == set()
    other = make_topic("rec-b")
    producer = Producer({"bootstrap.servers": world.bootstrap})
    producer.produce(other, json.dumps({"ticket_id": 1}).encode(), timestamp=int(time.time() * 1000) - 600_000)
    assert producer.flush(30) == 0
    edited = world.binding(consumer_groups=[], topic=other)
    assert edited.name == binding.name
    root = StateLocation(str(tmp_path)).join(binding.name)

    def model(topic: str) -> BindingModel:  # the stuck diagnosis' binding, as the dashboard saves it
        return BindingModel(
            name=binding.name, topic=topic, table=binding.table, key_column="id", record_key="json:$.ticket_id"
        )

    assert sorted(read_sightings(root, ["1", "2", "3"], model(world.topic))) == ["1", "2", "3"]
    assert read_sightings(root, ["1", "2", "3"], model(other)) == {}  # A's state is no memory of B

    result = reconcile_once(spark, edited, tmp_path)

    assert finding_set(result) == {("missing", "2", None, None, None), ("missing", "3", None, None, None)}
    assert any(
        "the binding changed since its state was built" in w and f"topic {world.topic!r} → {other!r}" in w
        for w in result["warnings"]
    )
    assert result["window"]["identity"]["topic"] == other
    assert sorted(read_sightings(root, ["1", "2", "3"], model(other))) == ["1"]
    assert read_sightings(root, ["1", "2", "3"], model(world.topic)) == {}


def test_a_binding_whose_timestamp_zone_changes_starts_over(spark: SparkSession, world: World, tmp_path: Path):
    """The window's bounds were taken in the old zone: a run in another one cannot build on
    them (rows would be skipped or read twice), so it starts over as a full run."""
    world.insert(1, 2)
    for ticket in (1, 2):
        world.produce(f"t{ticket}", ticket)
    binding = world.binding(consumer_groups=[])
    assert finding_set(reconcile_once(spark, binding, tmp_path)) == set()
    same = reconcile_once(spark, binding, tmp_path)
    assert same["window"]["lower"] is not None  # incremental: built on the first run's window
    moved = reconcile_once(spark, world.binding(consumer_groups=[], timestamp_zone="Asia/Tokyo"), tmp_path)
    assert finding_set(moved) == set()
    assert moved["window"]["lower"] is None  # a full run
    assert any("timestamp_zone 'UTC' → 'Asia/Tokyo'" in w for w in moved["warnings"]), moved["warnings"]


def test_a_topic_deleted_and_created_again_is_read_anew_and_nothing_it_held_is_reported(
    spark: SparkSession, world: World, kafka_admin: AdminClient, tmp_path: Path
):
    # Tickets 1-3 produced, processed and committed; the first run finds nothing wrong.
    for ticket in (1, 2, 3):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=20 * 60)
    world.processed("t1", "t2", "t3", age_s=19 * 60)
    world.commit(0, world.at("t3")[1] + 1)
    world.insert(1, 2, 3)
    # ten minutes ago, as the story goes: the new topic's records below are stamped after it
    # (records written after a run and stamped before it would prove their producer backdates)
    first = run(
        spark, world.binding(), RunOptions(state_dir=str(tmp_path), now=datetime.now(UTC) - timedelta(minutes=10))
    )
    assert finding_set(first) == set()
    id_before = topic_id(kafka_admin, world.topic)

    # An operator deletes the topic and creates it again. Tickets 4 and 5 take offsets 0 and 1
    # of partition 0 again and are processed; 6 is committed past and never processed.
    kafka_admin.delete_topics([world.topic])[world.topic].result(timeout=30)
    wait_for_topic_gone(kafka_admin, world.topic)
    assert make_topic_named(kafka_admin, world.topic, partitions=2)
    for ticket in (4, 5):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=5 * 60)
    world.processed("t4", "t5", age_s=4 * 60)
    world.produce("t6", 6, partition=0, age_s=3 * 60)
    # 7 is processed a minute ago, well after the new topic's first record: a mark of the new
    # topic for certain.
    world.produce("t7", 7, partition=0, age_s=2 * 60)
    world.processed("t7", mark_ms=int(time.time() * 1000) - 60_000)
    world.commit(0, world.at("t7")[1] + 1)
    world.insert(4, 5, 6, 7, age="2 minutes")

    # Ground truth: another topic under the name, where 4 and 5 sit where 1 and 2 were.
    assert topic_id(kafka_admin, world.topic) not in (id_before, None)
    assert [world.at(f"t{ticket}") for ticket in (4, 5, 6, 7)] == [(0, 0), (0, 1), (0, 2), (0, 3)]

    second = reconcile_once(spark, world.binding(), tmp_path)
    # Nothing of 1-3 is missing (they were delivered), 4, 5 and 7 were processed once each: only
    # 6 is unprocessed.
    assert finding_set(second) == {("unprocessed", "6", None, *world.at("t6"))}
    assert any("deleted and created again" in w for w in second["warnings"]), second["warnings"]


def test_marks_of_records_the_broker_lost_are_not_taken_for_the_records_now_at_their_offsets(
    spark: SparkSession, world: World, kafka_admin: AdminClient, tmp_path: Path
):
    """The broker holding a partition's only replica loses its disk: tickets 1-3 are gone, and
    new records take offsets 0, 1, 2 again (as after an unclean leader election). The consumer
    ledger still holds the marks of 1-3 at those offsets. They are not marks of the new records:
    not a second processing of 4 and 5, and no proof that 6 was processed."""
    cluster = LabCluster(world.bootstrap)
    broker = max(cluster.broker_ids())
    world.topic = f"rec-disk-marks-{uuid.uuid4().hex[:8]}"
    cluster.create_topic_on(world.topic, broker, partitions=2)
    binding = world.binding(guarantee="at-least-once")
    now_ms = int(time.time() * 1000)
    # The story, in the past: 1-3 written 40 minutes ago and processed, the first run ten
    # minutes ago, the disk lost after it and 4-7 written in the last five minutes.
    for ticket in (1, 2, 3):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=40 * 60)
    world.processed("t1", "t2", "t3", age_s=39 * 60, mark_ms=now_ms - 39 * 60_000)
    world.commit(0, world.at("t3")[1] + 1)
    world.insert(1, 2, 3, age="40 minutes")
    first = run(spark, binding, RunOptions(state_dir=str(tmp_path), now=datetime.now(UTC) - timedelta(minutes=10)))
    assert finding_set(first) == set()
    lost_at = {ticket: world.at(f"t{ticket}") for ticket in (1, 2, 3)}
    id_before = topic_id(kafka_admin, world.topic)

    cluster.lose_disk(broker, world.topic, 0)
    assert topic_id(kafka_admin, world.topic) == id_before is not None  # the same topic
    # 4 and 5 are processed; 6 is committed past and never processed; 7 is processed.
    for ticket in (4, 5):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=5 * 60)
    world.processed("t4", "t5", age_s=4 * 60, mark_ms=now_ms - 4 * 60_000)
    world.produce("t6", 6, partition=0, age_s=3 * 60)
    world.produce("t7", 7, partition=0, age_s=2 * 60)
    world.processed("t7", mark_ms=now_ms - 60_000)
    world.commit(0, world.at("t7")[1] + 1)
    world.insert(4, 5, 6, 7, age="5 minutes")

    # Ground truth: a full read of the topic (1-3 are gone, 4-7 sit where 1-3 were and after),
    # the marks this test wrote for the consumer, and the group's commit.
    truth = read_whole_topic(world.bootstrap, world.topic)
    assert {o: t for (p, o), t in truth.items() if p == 0} == {0: 4, 1: 5, 2: 6, 3: 7}
    assert [lost_at[t] for t in (1, 2, 3)] == [(0, 0), (0, 1), (0, 2)]
    expected = {("missing", str(t), "broker-lost", *lost_at[t]) for t in (1, 2, 3)} | {
        ("unprocessed", "6", None, *world.at("t6"))
    }

    second = reconcile_once(spark, binding, tmp_path)
    assert second["mode"] == "rebuild"
    assert finding_set(second) == expected
    third = reconcile_once(spark, binding, tmp_path)
    assert third["mode"] == "incremental"
    assert finding_set(third) == expected
    # A full run starts over without the key index (1-3 are then plain missing), and still
    # knows where the broker rewrote the partition.
    full = reconcile_once(spark, binding, tmp_path, full=True)
    assert finding_set(full) == {("missing", str(t), None, None, None) for t in (1, 2, 3)} | {
        ("unprocessed", "6", None, *world.at("t6"))
    }
    cluster.delete_topic(world.topic)
