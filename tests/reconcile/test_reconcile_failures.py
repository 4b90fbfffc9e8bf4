"""Reconciliation runs that must fail, cleanly: an unreachable broker or database, a
deleted topic (the state kept), a bad binding, records deleted while the run read them, and a
read that stopped short of its planned end.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from spark_jobs import common
from spark_jobs.kafka_offsets import admin_client, partition_offsets
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
from spark_jobs.reconcile_state import StateStore
from spark_jobs.reconcile_transform import transform_records
from tests.support.reconcile_world import (
    World,
    build_phase_one,
    delete_records_before,
    finding_set,
    reconcile_once,
)

pytestmark = pytest.mark.integration


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


def test_it_fails_a_run_whose_read_of_a_partition_stopped_short_of_its_planned_end(
    spark: SparkSession, world: World, monkeypatch: pytest.MonkeyPatch
):
    """A truncation (an unclean leader election) after the run planned its end and before
    Spark read there: Spark's Kafka source ends the partition at the log end, silently. The
    next run would start at the planned end, and records written again below it never be read."""
    # The source polls for the planned offsets past the log end until its poll timeout (Spark's
    # default: 120 s) before it stops the partition there. 10 s: the Java clients' request
    # timeout (kafka_options), so no fetch of the records it does read is given up in flight.
    monkeypatch.setenv(common.POLL_TIMEOUT_ENV, "10000")
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


def test_a_run_whose_cleanup_after_its_commit_fails_is_ok_and_its_findings_are_new_once(
    spark: SparkSession, world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The second run commits its state.json, then cannot delete the datasets no run refers to
    any more. Before stop 70 the run failed (and the service discarded its findings) while
    its state, and so its findings, stood as the previous run's for the next one: row 2's
    finding was never published as new."""
    binding = world.binding()
    world.insert(1)
    world.produce("t1", 1, seq=0)
    assert finding_set(reconcile_once(spark, binding, tmp_path)) == set()

    world.insert(2, age="1 minute")  # past the grace, and never produced

    def unreachable(self: StateStore, meta: object) -> None:
        raise OSError("the state location went away")

    monkeypatch.setattr(StateStore, "_remove_unreferenced", unreachable)
    second = reconcile_once(spark, binding, tmp_path)
    assert finding_set(second) == {("missing", "2", None, None, None)}
    assert [f["is_new"] for f in second["findings"]] == [True]
    assert [w for w in second["warnings"] if "state location went away" in w] == [
        "the state was committed, but the datasets no run refers to any more could not be deleted (OSError: "
        "the state location went away): a later run deletes them"
    ], second["warnings"]
    assert StateStore(str(tmp_path), binding.name, "-").read_meta().run_id == second["run_id"]

    monkeypatch.undo()
    third = reconcile_once(spark, binding, tmp_path)
    assert [(f["key"], f["is_new"]) for f in third["findings"]] == [("2", False)]


def test_a_run_whose_result_cannot_be_written_leaves_its_state_as_it_was(
    spark: SparkSession, world: World, tmp_path: Path
):
    """--output-json is where the service reads the run's result from: a run that cannot write
    it is failed, its findings discarded. Before stop 70 its state was committed first, so the
    next run took the discarded findings for published ones (is_new False)."""
    binding = world.binding()
    state = tmp_path / "state"
    world.insert(1)
    world.produce("t1", 1, seq=0)
    first = run(spark, binding, RunOptions(state_dir=str(state), output_json=str(tmp_path / "first.json")))
    assert first["status"] == "ok", first["error"]

    world.insert(2, age="1 minute")  # past the grace, and never produced
    (tmp_path / "blocked").write_text("a file where the result's folder should be")
    second = run(spark, binding, RunOptions(state_dir=str(state), output_json=str(tmp_path / "blocked" / "run.json")))
    assert second["status"] == "failed"
    assert "blocked" in second["error"], second["error"]
    assert StateStore(str(state), binding.name, "-").read_meta().run_id == first["run_id"]

    third = run(spark, binding, RunOptions(state_dir=str(state), output_json=str(tmp_path / "third.json")))
    assert finding_set(third) == {("missing", "2", None, None, None)}
    assert [f["is_new"] for f in third["findings"]] == [True]


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
