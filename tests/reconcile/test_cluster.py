"""Reconciliation on a real Spark standalone cluster: a master and a worker from the pyspark
distribution, the job handed over by spark-submit, executors in their own JVMs.

Ground truth is what this test produced and inserted; the expected findings are derived from
it here, not from the job.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from auditor.pipelines.models import StuckRule
from auditor.reconcile.job import auditor_jdbc_url
from auditor.reconcile.models import Finding, ReconcileRun
from auditor.stuck.service import DiagnosisOptions, diagnose_rule
from tests.support.reconcile import reconcile_cli
from tests.support.spark_cluster import standalone_cluster

pytestmark = [pytest.mark.django_db, pytest.mark.integration]


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A standalone master and one worker (2 cores, 1 GiB), stopped after the module."""
    with standalone_cluster(tmp_path_factory.mktemp("spark-cluster")) as url:
        yield url


@pytest.fixture(scope="module")
def staged_runs(django_db_setup: None) -> Iterator[list[str]]:
    """Staging rows Spark committed outside the test transaction, removed once it rolled back."""
    job_run_ids: list[str] = []
    yield job_run_ids
    if job_run_ids:
        with psycopg.connect(auditor_jdbc_url(), autocommit=True) as conn:
            conn.execute("DELETE FROM reconcile_finding_staging WHERE run_id = ANY(%s)", (job_run_ids,))


def test_it_reconciles_and_diagnoses_stuck_items_on_a_standalone_cluster(
    spark_cluster: str,
    settings,
    make_topic,
    make_binding,
    kafka_bootstrap: str,
    source_database_url: str,
    state_dir: Path,
    staged_runs: list[str],
) -> None:
    """A full reconciliation through spark-submit on the cluster names exactly the findings the
    clients' own observations imply; then the Spark stuck engine there gives each stuck row
    the verdict they imply: acked records the group has not reached are `waiting`; rows whose
    record was never sent, which the run reported missing while the topic held everything
    since their creation, are `never-produced`. One application each: every one launched on
    the cluster starts a driver and executors of its own (~30 s here)."""
    settings.SPARK_MASTER = spark_cluster
    # Two partitions so the Kafka source splits the read over executor tasks.
    topic = make_topic("rcluster", partitions=2)
    table = f"cluster_{uuid.uuid4().hex[:10]}"
    group = f"g-{uuid.uuid4().hex[:8]}"
    rows = range(1, 41)
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, created_at timestamptz NOT NULL, status text)")
        for row_id in rows:
            conn.execute(f"INSERT INTO {table} VALUES (%s, now() - interval '20 minutes', 'NEW')", (row_id,))
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    acked: list[str] = []
    created_ms = int((time.time() - 600) * 1000)  # older than the grace: key 1000 can be called an orphan
    sent = [str(i) for i in rows if i % 10 != 0] + ["7", "1000"]  # 10,20,30,40 never sent; 7 twice; 1000 no row

    def report(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(msg.key().decode())

    for key in sent:
        producer.produce(topic, key=key.encode(), value=b'{"v": 1}', timestamp=created_ms, on_delivery=report)
    assert producer.flush(30) == 0
    assert sorted(acked) == sorted(sent)
    # The group exists and has committed the start of each partition: it has read nothing.
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, p, 0) for p in (0, 1)], asynchronous=False)
    consumer.close()
    binding = make_binding(f"cluster-{uuid.uuid4().hex[:8]}", topic, f"public.{table}", consumer_groups=[group])
    rule = StuckRule.objects.create(
        name=binding.name, binding=binding, status_column="status", stuck_values=["NEW"], age_column="created_at"
    )
    no_ledger = f"_audit.none-{uuid.uuid4().hex[:8]}"  # an unprobed pipeline
    try:
        started = time.monotonic()
        code, result = reconcile_cli(binding.name, "--full")
        print(f"cluster reconciliation: {time.monotonic() - started:.1f} s")
        run = ReconcileRun.objects.get(pk=result["run_id"])
        staged_runs.append(run.job_run_id)
        assert code == 0, result["error"]
        in_topic = set(acked)
        expected = (
            {("missing", str(i)) for i in rows if str(i) not in in_topic}
            | {("duplicate", k) for k in in_topic if acked.count(k) > 1}
            | {("orphan", k) for k in in_topic if int(k) not in rows}
        )
        assert {(f["kind"], f["key"]) for f in result["findings"]} == expected
        assert set(Finding.objects.filter(run=run).values_list("kind", "key")) == expected
        assert run.records_read == len(acked) and result["mode"] == "full"
        # the run checked that its driver reads what the executors write to the state
        print(f"shared-state check: {run.timings['state_shared']:.2f} s")

        started = time.monotonic()
        diagnosis = diagnose_rule(
            rule,
            DiagnosisOptions(
                engine="spark", use_index=False, producer_ledger_topic=no_ledger, consumer_ledger_topic=no_ledger
            ),
        )
        print(f"cluster stuck diagnosis: {time.monotonic() - started:.1f} s")
    finally:
        with psycopg.connect(source_database_url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}")

    assert diagnosis.engine == "spark"
    verdicts = {str(i): ("waiting" if str(i) in in_topic else "never-produced") for i in rows}
    assert {item.row.key: item.diagnosis.verdict for item in diagnosis.items} == verdicts


def _with_faults(monkeypatch: pytest.MonkeyPatch, report: Path, kafka_bootstrap: str, **env: str) -> None:
    """The next job runs under tests/support/cluster_fault_job.py, with these AUDITOR_TEST_FAULT_* settings."""
    monkeypatch.setattr(
        "auditor.reconcile.job.JOB_SCRIPT", Path(__file__).parent.parent / "support" / "cluster_fault_job.py"
    )
    monkeypatch.setenv("AUDITOR_TEST_FAULT_BOOTSTRAP", kafka_bootstrap)
    monkeypatch.setenv("AUDITOR_TEST_FAULT_REPORT", str(report))
    for name, value in env.items():
        monkeypatch.setenv(f"AUDITOR_TEST_FAULT_{name.upper()}", value)


@pytest.mark.parametrize(
    ("kill", "deleted"),
    # The first in make test; the other three, minutes each on the cluster, in make test-faults
    [
        ("sigkill", False),
        pytest.param("sigkill", True, marks=pytest.mark.long_fault),
        pytest.param("sigkill-twice", False, marks=pytest.mark.long_fault),
        pytest.param("driver", True, marks=pytest.mark.long_fault),
    ],
    ids=[
        "executor-killed",
        "executor-killed-after-retention",
        "executor-and-its-replacement-killed",
        "executor-holding-reads-removed-by-the-driver-after-retention",
    ],
)
def test_an_executor_killed_mid_run_gives_the_exact_findings_or_a_failed_run_never_false_ones(
    kill: str,
    deleted: bool,
    spark_cluster: str,
    settings,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    make_topic,
    make_binding,
    kafka_bootstrap: str,
    source_database_url: str,
    state_dir: Path,
    staged_runs: list[str],
) -> None:
    """Once the run has read the topic (and checked nothing was deleted under the read), its
    only executor is killed with SIGKILL; Spark starts another and reads the lost cached parts
    again from Kafka. Every row's record was sent and acked: the run must find nothing, and
    name every executor lost, the replacement too where it was killed before any phase saw it
    (the old watch, noting ids at each phase, never saw that one). When records were also
    deleted after the read (retention's stand-in), the part read again lacks them: the old code
    published those rows `missing`; the run must fail instead and publish nothing. So too where
    the driver removed the executor on purpose (SparkContext.killExecutor): it held the cached
    reads."""
    settings.SPARK_MASTER = spark_cluster
    topic = make_topic("rexecutor", partitions=2)
    table = f"executor_{uuid.uuid4().hex[:10]}"
    rows = range(1, 41)
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, created_at timestamptz NOT NULL)")
        for row_id in rows:
            conn.execute(f"INSERT INTO {table} VALUES (%s, now() - interval '20 minutes')", (row_id,))
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    acked: list[tuple[str, int, int]] = []

    def report(err: Any, msg: Any) -> None:
        if err is None:
            acked.append((msg.key().decode(), msg.partition(), msg.offset()))

    created_ms = int((time.time() - 1200) * 1000)
    for row_id in rows:
        producer.produce(topic, key=str(row_id).encode(), value=b"{}", timestamp=created_ms, on_delivery=report)
    assert producer.flush(30) == 0 and len(acked) == len(rows)
    fault_report = tmp_path / "fault.json"
    delete = f"{topic}:0:5" if deleted else ""
    _with_faults(monkeypatch, fault_report, kafka_bootstrap, after="topic_read", kill=kill, delete=delete)
    binding = make_binding(f"executor-{uuid.uuid4().hex[:8]}", topic, f"public.{table}")
    try:
        code, result = reconcile_cli(binding.name, "--full")
    finally:
        with psycopg.connect(source_database_url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
    run = ReconcileRun.objects.get(pk=result["run_id"])
    staged_runs.append(run.job_run_id)
    fault = json.loads(fault_report.read_text())
    assert fault["killed"] or kill == "driver", "no executor was running to kill"
    assert len(fault["executors"]) == (2 if kill == "sigkill-twice" else 1), fault
    if kill == "driver":
        assert all(blocks > 0 for blocks in fault["executors"].values()), fault  # it held the cached reads
    if not deleted:
        assert code == 0, result["error"]
        assert result["findings"] == [] and not Finding.objects.filter(run=run).exists()
        lost = [w for w in result["warnings"] if " lost during the run" in w]
        assert len(lost) == 1, result["warnings"]
        for executor_id in fault["executors"]:
            assert f"executor {executor_id} (Command exited with code 137" in lost[0]
    else:
        gone = sorted(key for key, partition, offset in acked if partition == 0 and offset < 5)
        assert len(gone) == 5  # acked, and read by the run before they were deleted
        assert code != 0 and run.status == "failed", result
        assert " lost during the run" in result["error"] and f"{topic}/0 now starts at offset 5" in result["error"]
        assert not Finding.objects.filter(run=run).exists()
        assert not (state_dir / binding.name / "state.json").exists()


def test_an_idle_executor_the_driver_removes_mid_run_is_no_loss_though_the_log_start_moved(
    spark_cluster: str,
    settings,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    make_topic,
    make_binding,
    kafka_bootstrap: str,
    source_database_url: str,
    state_dir: Path,
    staged_runs: list[str],
) -> None:
    """Dynamic allocation's routine: the driver removes an executor holding no cached block.
    Here the run's only executor is removed through the driver (SparkContext.killExecutor)
    once the run's executor watch has seen it, before anything is cached, and another is asked
    for; after the topic is read, records the run read are deleted (retention moving the log
    start). The old check counted the removal as a loss and failed the run for the moved
    start; nothing the run read was on that executor: the run must stand, with the findings
    the rows and the records acked imply."""
    settings.SPARK_MASTER = spark_cluster
    topic = make_topic("ridle", partitions=2)
    table = f"idle_{uuid.uuid4().hex[:10]}"
    rows = range(1, 31)
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, created_at timestamptz NOT NULL)")
        for row_id in rows:
            conn.execute(f"INSERT INTO {table} VALUES (%s, now() - interval '20 minutes')", (row_id,))
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    acked: list[tuple[str, int, int]] = []

    def report(err: Any, msg: Any) -> None:
        if err is None:
            acked.append((msg.key().decode(), msg.partition(), msg.offset()))

    created_ms = int((time.time() - 1200) * 1000)
    sent = [str(i) for i in rows if i % 7 != 0]  # 7, 14, 21, 28 never sent
    for key in sent:
        producer.produce(topic, key=key.encode(), value=b"{}", timestamp=created_ms, on_delivery=report)
    assert producer.flush(30) == 0 and len(acked) == len(sent)
    assert sum(1 for _, partition, _ in acked if partition == 0) > 5
    fault_report = tmp_path / "fault.json"
    _with_faults(
        monkeypatch,
        fault_report,
        kafka_bootstrap,
        after="watch_started",
        kill="driver",
        delete=f"{topic}:0:5",
        delete_after="topic_read",
    )
    binding = make_binding(f"idle-{uuid.uuid4().hex[:8]}", topic, f"public.{table}")
    try:
        code, result = reconcile_cli(binding.name, "--full")
    finally:
        with psycopg.connect(source_database_url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
    run = ReconcileRun.objects.get(pk=result["run_id"])
    staged_runs.append(run.job_run_id)
    fault = json.loads(fault_report.read_text())
    assert fault["executors"] and set(fault["executors"].values()) == {0}, fault  # removed holding no cached block
    assert fault["deleted"] == [f"{topic}:0:5"]
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"w-{uuid.uuid4().hex[:8]}"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[0] == 5  # the start moved
    finally:
        consumer.close()
    assert code == 0, result["error"]
    expected = {("missing", str(i)) for i in rows if str(i) not in {key for key, _, _ in acked}}
    assert {(f["kind"], f["key"]) for f in result["findings"]} == expected
    assert set(Finding.objects.filter(run=run).values_list("kind", "key")) == expected
    assert not [w for w in result["warnings"] if " lost during the run" in w or "status store" in w]
    assert run.records_read == len(acked)
