"""The reconciliation job against a real broker, PostgreSQL and Spark, on known ground truth.

One source table and one topic are built so that every finding kind is present exactly
where the test puts it; the job must report exactly that set, on a full run and across two
incremental runs (with duplicates, missing rows and orphans that span the runs).
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark.sql import SparkSession

from auditor.lab.cluster import Cluster as LabCluster
from auditor.lab.cluster import wait_until
from spark_jobs import common
from spark_jobs.kafka_offsets import admin_client, partition_offsets
from spark_jobs.reconcile import run
from spark_jobs.reconcile_plan import RunOptions
from tests.support.reconcile_world import (
    World,
    build_phase_one,
    build_phase_two,
    expected_final,
    finding_set,
    produce_keyed,
    read_whole_topic,
    reconcile_once,
)

pytestmark = pytest.mark.integration


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
        "late": 0,
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


def test_a_source_row_deleted_after_a_run_reported_it_missing_is_not_reported_again(
    spark: SparkSession, world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Rows 8 and 9 never got a record, and a run reports both missing. The application then
    deletes row 9 (an order cancelled): a full run over the table reports row 8 only, and so
    must the next incremental run, which remembers row 9 pending. Before stop 70 that row was
    reported missing on every later run. Ground truth: the table, read with psycopg. (The whole
    backlog is looked up at every run here; by default once an hour, the test below.)"""
    monkeypatch.setenv("RECONCILE_DELETED_ROWS_RECHECK_SECONDS", "0")
    world.insert(8, 9, age="1 minute")
    binding = world.binding()
    first = reconcile_once(spark, binding, tmp_path)
    assert finding_set(first) == {("missing", "8", None, None, None), ("missing", "9", None, None, None)}

    with psycopg.connect(world.source_url, autocommit=True) as conn:
        conn.execute(f"DELETE FROM {world.table} WHERE id = 9")
        assert [r[0] for r in conn.execute(f"SELECT id FROM {world.table} ORDER BY id")] == [8]
    second = reconcile_once(spark, binding, tmp_path)

    assert second["mode"] == "incremental"
    assert finding_set(second) == {("missing", "8", None, None, None)}
    assert [w for w in second["warnings"] if "deleted" in w] == [
        f"1 source row(s) without a record are no longer in public.{world.table} (deleted since a run read "
        "them): not reported missing"
    ], second["warnings"]
    assert {f["key"]: f["is_new"] for f in second["findings"]} == {"8": False}
    assert finding_set(reconcile_once(spark, binding, tmp_path, full=True)) == finding_set(second)


def test_a_run_looks_up_the_rows_due_since_the_last_one_and_the_whole_backlog_when_its_recheck_is_due(
    spark: SparkSession, world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The lookup of deleted rows is bounded: a run looks up the rows that became due since
    the last lookup, and the whole backlog once it is RECONCILE_DELETED_ROWS_RECHECK_SECONDS
    old. Rows 8 and 9 are due at the first run (ten minutes ago) and reported missing; row 10
    is read then but still within the 30 s grace. Rows 9 and 10 are then deleted. The next run,
    within the hour, looks up row 10 (due since) and drops it; row 9 waits for the backlog's
    recheck, which a run with the recheck at 0 s does. Ground truth: the table, read with
    psycopg, and a --full run's findings."""
    world.insert(8, 9, age="2 hours")
    world.insert(10, age="610 seconds")  # after the first run's cutoff (600 s + 30 s grace), before its upper bound
    binding = world.binding()
    first = run(spark, binding, RunOptions(state_dir=str(tmp_path), now=datetime.now(UTC) - timedelta(minutes=10)))
    assert finding_set(first) == {("missing", "8", None, None, None), ("missing", "9", None, None, None)}

    with psycopg.connect(world.source_url, autocommit=True) as conn:
        conn.execute(f"DELETE FROM {world.table} WHERE id IN (9, 10)")
        assert [r[0] for r in conn.execute(f"SELECT id FROM {world.table} ORDER BY id")] == [8]
    second = reconcile_once(spark, binding, tmp_path)

    assert second["mode"] == "incremental"
    found = {key for kind, key, *_ in finding_set(second) if kind == "missing"}
    assert "8" in found and "10" not in found, found
    assert [w for w in second["warnings"] if "deleted" in w] == [
        f"1 source row(s) without a record are no longer in public.{world.table} (deleted since a run read "
        "them): not reported missing"
    ], second["warnings"]

    monkeypatch.setenv("RECONCILE_DELETED_ROWS_RECHECK_SECONDS", "0")
    third = reconcile_once(spark, binding, tmp_path)
    assert finding_set(third) == {("missing", "8", None, None, None)}
    assert finding_set(reconcile_once(spark, binding, tmp_path, full=True)) == finding_set(third)


def test_what_a_run_reported_stays_reported_while_the_clock_is_stepped_back(
    spark: SparkSession, world: World, tmp_path: Path
):
    """Row 8 never got a record and the record of ticket 20 has no row, both two minutes old:
    a run reports them. The clock the window is read by then steps back ten minutes (an NTP
    correction, a restored VM): before stop 71 the next runs put both within the grace again
    and reported neither, and the run after the clock caught up flagged them new (an alert
    resolved, then opened again). Ground truth: what the test inserted (psycopg) and produced
    (the delivery report of the record)."""
    world.insert(8, age="2 minutes")
    world.produce("t20", 20, age_s=120)
    binding = world.binding(guarantee="at-least-once", consumer_groups=[])
    expected = {("missing", "8", None, None, None), ("orphan", "20", None, *world.at("t20"))}
    first = reconcile_once(spark, binding, tmp_path)
    assert finding_set(first) == expected

    now = datetime.now(UTC)
    for behind in (timedelta(minutes=10), timedelta(minutes=9)):  # stepped back, and still behind
        later = run(spark, binding, RunOptions(state_dir=str(tmp_path), now=now - behind))
        assert later["mode"] == "incremental"
        assert finding_set(later) == expected, later["warnings"]
        assert {f["key"]: f["is_new"] for f in later["findings"]} == {"8": False, "20": False}
        assert any("behind an earlier run's" in w for w in later["warnings"]), later["warnings"]
    caught_up = reconcile_once(spark, binding, tmp_path)
    assert finding_set(caught_up) == expected
    assert {f["key"]: f["is_new"] for f in caught_up["findings"]} == {"8": False, "20": False}
    assert not any("behind an earlier run's" in w for w in caught_up["warnings"]), caught_up["warnings"]


def test_a_longer_grace_is_no_stepped_back_clock(spark: SparkSession, world: World, tmp_path: Path):
    """Row 8 and the record of ticket 20, two minutes old, are reported with a 30 s grace; the
    user then sets the grace to an hour. The next run judges both by it, as a --full run does,
    and says nothing of a clock (stop 71's first cut took the later cutoff for a step back)."""
    world.insert(8, age="2 minutes")
    world.produce("t20", 20, age_s=120)
    binding = world.binding(guarantee="at-least-once", consumer_groups=[])
    assert {f[0] for f in finding_set(reconcile_once(spark, binding, tmp_path))} == {"missing", "orphan"}

    longer = world.binding(guarantee="at-least-once", consumer_groups=[], grace="1h")
    later = reconcile_once(spark, longer, tmp_path)

    assert later["mode"] == "incremental"
    assert finding_set(later) == set()
    assert not any("behind an earlier run's" in w for w in later["warnings"]), later["warnings"]


def test_a_row_reported_then_deleted_while_the_clock_is_stepped_back_is_looked_up(
    spark: SparkSession, world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Row 8 is reported missing, then deleted; the clock steps back ten minutes. What the last
    run reported stays reported while the clock is behind, so the deleted-row lookup covers
    those rows too: row 8 is dropped, as a --full run would not see it. Ground truth: the
    table, read with psycopg."""
    monkeypatch.setenv("RECONCILE_DELETED_ROWS_RECHECK_SECONDS", "0")
    world.insert(8, 9, age="2 minutes")
    binding = world.binding(guarantee="at-least-once", consumer_groups=[])
    assert finding_set(reconcile_once(spark, binding, tmp_path)) == {
        ("missing", "8", None, None, None),
        ("missing", "9", None, None, None),
    }
    with psycopg.connect(world.source_url, autocommit=True) as conn:
        conn.execute(f"DELETE FROM {world.table} WHERE id = 8")
        assert [r[0] for r in conn.execute(f"SELECT id FROM {world.table} ORDER BY id")] == [9]

    behind = run(spark, binding, RunOptions(state_dir=str(tmp_path), now=datetime.now(UTC) - timedelta(minutes=10)))

    assert finding_set(behind) == {("missing", "9", None, None, None)}, behind["warnings"]


def test_a_backlog_too_large_to_look_up_still_leaves_the_rows_due_since_looked_up(
    spark: SparkSession, world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Rows 1-3 are reported missing at the first run (ten minutes ago); row 10 is read then,
    within the grace, and deleted after. The backlog's lookup (four keys) is over the bound
    (two here): the run still looks up the rows due since the last lookup, and row 10 is not
    reported. Ground truth: the table, read with psycopg."""
    from spark_jobs import late_rows

    world.insert(1, 2, 3, age="2 hours")
    world.insert(10, age="610 seconds")  # after the first run's cutoff (600 s + 30 s grace), before its upper bound
    binding = world.binding(guarantee="at-least-once", consumer_groups=[])
    first = run(spark, binding, RunOptions(state_dir=str(tmp_path), now=datetime.now(UTC) - timedelta(minutes=10)))
    assert {f[1] for f in finding_set(first)} == {"1", "2", "3"}
    with psycopg.connect(world.source_url, autocommit=True) as conn:
        conn.execute(f"DELETE FROM {world.table} WHERE id = 10")
    monkeypatch.setenv("RECONCILE_DELETED_ROWS_RECHECK_SECONDS", "0")
    monkeypatch.setattr(late_rows, "LOOKUP_KEYS", 2)

    second = reconcile_once(spark, binding, tmp_path)

    assert {f[1] for f in finding_set(second) if f[0] == "missing"} == {"1", "2", "3"}, second["warnings"]
    assert any("could not be looked up by key" in w for w in second["warnings"]), second["warnings"]


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
