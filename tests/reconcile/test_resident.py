"""The resident runner (RECONCILE_RUNNER=resident): one Spark driver kept across runs.

Against the real broker, PostgreSQL, Redis and Spark. The expected findings come from what
the test inserted and produced: rows 1-4 created an hour ago, records for 1 (sent twice with
one sequence: a producer retry), 2 and 3, so row 4 is missing and 1 duplicated.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Producer
from django.test import override_settings
from pytest_django import DjangoDbBlocker

from auditor.reconcile import conf, resident
from auditor.reconcile.models import Finding, ReconcileRun
from auditor.reconcile.service import execute_run, start_run
from tests.support.browser import closing_connection
from tests.support.live import LiveProcesses, start_celery_worker
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

SESSION = "c0ffee00" * 4  # an audit session id as the contract spells it
MAX_RUNS = 2  # the reconciler's RECONCILE_RESIDENT_MAX_RUNS
EXPECTED = {("missing", "4", None), ("duplicate", "1", "producer-retry")}


@dataclass
class Source:
    topic: str
    table: str
    url: str

    def insert(self, *ids: int, age: str = "1 hour") -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            for row_id in ids:
                conn.execute(
                    f"INSERT INTO {self.table} (id, created_at) VALUES (%s, now() - %s::interval)", (row_id, age)
                )

    def produce(self, bootstrap: str, *records: tuple[str, int]) -> None:
        producer = Producer({"bootstrap.servers": bootstrap})
        created_ms = int((time.time() - 600) * 1000)  # well before the grace period, like the rows
        for key, seq in records:
            headers = [("audit-id", key.encode()), ("audit-pid", SESSION.encode()), ("audit-seq", str(seq).encode())]
            producer.produce(self.topic, key=key.encode(), value=b"{}", headers=headers, timestamp=created_ms)
        assert producer.flush(30) == 0


@pytest.fixture
def source(make_topic: Callable[..., str], kafka_bootstrap: str, source_database_url: str) -> Iterator[Source]:
    table = f"resident_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, created_at timestamptz NOT NULL)")
    made = Source(make_topic("resident"), table, source_database_url)
    made.insert(1, 2, 3, 4)
    made.produce(kafka_bootstrap, ("1", 0), ("1", 0), ("2", 1), ("3", 2))
    yield made
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")


def found(run: ReconcileRun) -> set[tuple[str, str | None, str | None]]:
    return set(Finding.objects.filter(run=run).values_list("kind", "key", "cause"))


@pytest.mark.django_db
def test_a_run_past_its_deadline_is_cancelled_commits_nothing_and_the_driver_runs_the_next(
    spark, source: Source, make_binding, state_dir: Path, settings, monkeypatch, staged_runs: list[str]
) -> None:
    monkeypatch.setattr(resident, "_session", spark)  # the suite's session stands for the resident one
    binding = make_binding(f"res-{uuid.uuid4().hex[:8]}", source.topic, f"public.{source.table}")
    settings.RECONCILE_TIMEOUT_SECONDS = 1

    late = execute_run(start_run(binding, ReconcileRun.CLI), conf.RESIDENT)

    staged_runs.append(late.job_run_id)
    assert late.status == ReconcileRun.FAILED
    assert late.error.startswith("the run went on longer than 1s (RECONCILE_TIMEOUT_SECONDS)"), late.error
    assert not (state_dir / binding.name / "state.json").exists()  # nothing committed
    assert not Finding.objects.filter(binding=binding).exists()
    assert spark.sparkContext.getLocalProperty("spark.jobGroup.id") is None

    settings.RECONCILE_TIMEOUT_SECONDS = 3000
    run = execute_run(start_run(binding, ReconcileRun.CLI), conf.RESIDENT)

    staged_runs.append(run.job_run_id)
    assert run.status == ReconcileRun.OK, run.error
    assert run.mode == "full"  # the cancelled run left no state to build on
    assert found(run) == EXPECTED
    assert "driver_start" not in run.timings  # the session was alive: nothing was started
    assert (state_dir / binding.name / "state.json").exists()


@pytest.mark.django_db
def test_a_run_whose_deadline_passes_between_its_spark_jobs_commits_nothing(
    spark, source: Source, make_binding, state_dir: Path, settings, monkeypatch, staged_runs: list[str]
) -> None:
    """The deadline passes after the run's last big Spark job, while the driver works between
    jobs: there is no job to cancel then, and a run that went on to commit was reported ok
    past its deadline (CI of stop 70, where the one-second test run's jobs each finished
    between two cancellations)."""
    import spark_jobs.reconcile as job

    monkeypatch.setattr(resident, "_session", spark)
    binding = make_binding(f"res-{uuid.uuid4().hex[:8]}", source.topic, f"public.{source.table}")
    settings.RECONCILE_TIMEOUT_SECONDS = 15  # longer than the run's Spark jobs take here (3-8 s)
    started = time.monotonic()
    load = job.load_findings_jdbc

    def load_then_outlive_the_deadline(*args, **kwargs) -> None:
        load(*args, **kwargs)
        time.sleep(max(0.0, started + 16.5 - time.monotonic()))  # the driver's own work, past the deadline

    monkeypatch.setattr(job, "load_findings_jdbc", load_then_outlive_the_deadline)

    late = execute_run(start_run(binding, ReconcileRun.CLI), conf.RESIDENT)

    staged_runs.append(late.job_run_id)
    assert late.status == ReconcileRun.FAILED, late.error
    assert late.error.startswith("the run went on longer than 15s (RECONCILE_TIMEOUT_SECONDS)"), late.error
    assert "cancelled before its commit" in late.error, late.error
    assert not (state_dir / binding.name / "state.json").exists()  # nothing committed
    assert not Finding.objects.filter(binding=binding).exists()


@pytest.mark.django_db
def test_a_negative_run_limit_fails_the_run_naming_it(
    spark, source: Source, make_binding, state_dir: Path, settings, monkeypatch
) -> None:
    monkeypatch.setattr(resident, "_session", spark)  # a driver is running: the limit is what fails
    binding = make_binding(f"res-{uuid.uuid4().hex[:8]}", source.topic, f"public.{source.table}")
    settings.RECONCILE_RESIDENT_MAX_RUNS = -1

    run = execute_run(start_run(binding, ReconcileRun.CLI), conf.RESIDENT)

    assert run.status == ReconcileRun.FAILED
    assert "RECONCILE_RESIDENT_MAX_RUNS: -1 is negative" in run.error, run.error
    assert not (state_dir / binding.name / "state.json").exists()
    assert resident._session is spark  # the running driver was left alone


# --- the reconciler worker --------------------------------------------------------------------


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            tree.setdefault(parent, []).append(int(entry))
    return tree


def live_sessions(jvm: int) -> int:
    """SparkSession objects alive in a driver JVM after a full GC (jcmd's class histogram)."""
    histogram = subprocess.run(["jcmd", str(jvm), "GC.class_histogram"], capture_output=True, text=True, check=True)
    for line in histogram.stdout.splitlines():
        if line.endswith(" org.apache.spark.sql.classic.SparkSession"):
            return int(line.split()[1])
    return 0


def driver_jvms(worker_pid: int) -> list[int]:
    """The java processes below the worker: its Spark drivers."""
    tree, found_pids, todo = _children(), [], [worker_pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            todo.append(child)
            try:
                command = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if command.endswith(b"java"):
                found_pids.append(child)
    return found_pids


@pytest.fixture(scope="module")
def reconciler(live_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveProcesses]:
    """A reconciler worker as stack/run.sh starts it, on this session's reconcile queue."""

    procs = LiveProcesses(
        live_env
        | {
            "RECONCILE_RUNNER": "resident",
            "RECONCILE_STATE_DIR": str(tmp_path_factory.mktemp("resident-state")),
            "RECONCILE_DRIVER_MEMORY": "1g",
            "RECONCILE_RESIDENT_MAX_RUNS": str(MAX_RUNS),
            "SPARK_MASTER": "local[2]",
        }
    )
    node = f"reconciler-{uuid.uuid4().hex[:6]}@test"
    start_celery_worker(procs, "reconciler", node, f"{live_env['AUDITOR_CELERY_QUEUE']}.reconcile", "solo", 1)
    yield procs
    procs.stop()


@pytest.fixture
def committed_binding(
    django_db_setup: None, django_db_blocker: DjangoDbBlocker, source: Source, kafka_bootstrap: str
) -> Iterator[str]:
    """A binding the worker sees (committed), removed with its runs and findings afterwards."""
    from auditor.pipelines.models import Binding, Cluster, SourceDatabase

    name = f"resident-{uuid.uuid4().hex[:8]}"
    with django_db_blocker.unblock(), closing_connection():
        cluster = Cluster.objects.create(name=name, bootstrap_servers=kafka_bootstrap)
        database = SourceDatabase.objects.create(name=name, url="${SOURCE_DATABASE_URL}")
        Binding.objects.create(
            name=name, cluster=cluster, topic=source.topic, source=database, table=f"public.{source.table}",
            key_column="id", created_column="created_at", record_key="key", grace_seconds=30, schedule_seconds=0,
        )  # fmt: skip
    yield name
    with django_db_blocker.unblock(), closing_connection():
        Binding.objects.filter(name=name).delete()
        cluster.delete()
        database.delete()


def test_the_reconciler_keeps_one_driver_across_runs_retires_it_after_its_runs_and_replaces_one_killed(
    reconciler: LiveProcesses, committed_binding: str, django_db_blocker: DjangoDbBlocker, source: Source,
    kafka_bootstrap: str,
) -> None:  # fmt: skip
    from auditor.pipelines.models import Binding
    from auditor.reconcile.tasks import queue_run

    worker = reconciler.procs["reconciler"]

    def run_on_the_reconciler() -> ReconcileRun:
        with django_db_blocker.unblock(), closing_connection(), override_settings(RECONCILE_RUNNER="resident"):
            queued = queue_run(Binding.objects.get(name=committed_binding), ReconcileRun.MANUAL)

            def finished() -> bool:
                queued.refresh_from_db()
                return queued.status in (ReconcileRun.OK, ReconcileRun.FAILED)

            wait_until(finished, 180, f"run {queued.pk} on the reconciler", 0.5)
            return queued

    def findings(run: ReconcileRun) -> set[tuple[str, str | None, str | None]]:
        with django_db_blocker.unblock(), closing_connection():
            return found(run)

    first = run_on_the_reconciler()
    assert first.status == ReconcileRun.OK, first.error + reconciler.log_text("reconciler")
    assert first.claimed_by.endswith(f":{worker.pid}")  # the reconciler took it, not another worker
    assert findings(first) == EXPECTED
    assert "driver_start" in first.timings  # the worker's first run started its driver
    (driver,) = driver_jvms(worker.pid)
    arguments = Path(f"/proc/{driver}/cmdline").read_bytes().split(b"\0")
    assert b"-Xmx1g" in arguments  # RECONCILE_DRIVER_MEMORY reached the JVM
    assert b"spark.sql.ui.retainedExecutions=50" in arguments  # what it keeps of past runs is bounded

    source.produce(kafka_bootstrap, ("4", 3))  # row 4's record arrives late
    later = [run_on_the_reconciler() for _ in range(MAX_RUNS - 1)]

    for run in later:
        assert run.status == ReconcileRun.OK, run.error
        assert run.mode == "incremental" and "driver_start" not in run.timings
        assert findings(run) == {("duplicate", "1", "producer-retry")}
    assert driver_jvms(worker.pid) == [driver]  # the same JVM ran them all
    # Spark 4.0.0 cloned the session for each query a run caches and never freed the clones
    # (SPARK-54753): a driver kept for days grew by three sessions a run.
    assert live_sessions(driver) == 1

    retired = run_on_the_reconciler()  # the driver has run MAX_RUNS runs: a new one runs this

    assert retired.status == ReconcileRun.OK, retired.error + reconciler.log_text("reconciler")
    assert "driver_start" in retired.timings
    (successor,) = driver_jvms(worker.pid)  # the old JVM exited, not left beside the new one
    assert successor != driver
    whole_log = (reconciler.logs / "reconciler.log").read_text(errors="replace")
    assert f"ran {MAX_RUNS} runs (RECONCILE_RESIDENT_MAX_RUNS); starting a new one" in whole_log
    assert retired.mode == "incremental" and findings(retired) == {("duplicate", "1", "producer-retry")}

    os.kill(successor, signal.SIGKILL)  # the driver dies between runs (the OOM killer, an operator)
    wait_until(lambda: successor not in driver_jvms(worker.pid), 30, "the killed driver to be gone")
    replaced = run_on_the_reconciler()

    assert replaced.status == ReconcileRun.OK, replaced.error + reconciler.log_text("reconciler")
    assert "driver_start" in replaced.timings
    (replacement,) = driver_jvms(worker.pid)
    assert replacement not in (driver, successor)
    assert worker.poll() is None  # the worker itself lived on
    assert replaced.mode == "incremental"  # the state on disk stood
    assert findings(replaced) == {("duplicate", "1", "producer-retry")}


def test_the_status_check_names_the_reconciler_taking_the_queue(reconciler: LiveProcesses) -> None:
    from auditor.status.checks import check_reconciler

    with override_settings(RECONCILE_RUNNER="resident"):
        (status,) = check_reconciler()
    assert status.healthy, status.detail
    assert status.detail.endswith(f"takes {conf.reconciler_queue()}") and "reconciler-" in status.detail


@pytest.mark.django_db
def test_the_status_check_says_when_no_worker_takes_resident_runs(celery_worker_process: LiveProcesses) -> None:
    from auditor.status.checks import check_reconciler

    assert check_reconciler() == []  # spark-submit per run: no reconciler to look for
    ReconcileRun.objects.filter(status=ReconcileRun.RUNNING).update(status=ReconcileRun.FAILED)  # none busy
    queue = f"nobody-{uuid.uuid4().hex[:8]}"
    with override_settings(RECONCILE_RUNNER="resident", CELERY_TASK_DEFAULT_QUEUE=queue):
        (status,) = check_reconciler()
    assert not status.healthy
    assert status.detail.startswith(f"RECONCILE_RUNNER=resident, but no worker takes queue {queue}.reconcile")
