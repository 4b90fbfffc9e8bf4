"""Reconciliation of a SASL_SSL (SCRAM-SHA-512) cluster and a TLS-only source, declared in YAML
with every secret as a ${ENV} reference, through spark-submit: exact findings, and the
password nowhere in the process list, the job's logs, the auditor's log or the run record.
A cluster or source that refuses the auditor fails the run with the reason, storing nothing."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import KafkaError, Message, Producer
from django.core.management import call_command

from auditor.pipelines.models import Binding, Cluster
from auditor.reconcile import job
from auditor.reconcile.models import Finding, ReconcileRun
from auditor.reconcile.service import execute_run, start_run
from tests.support.secured import Secured

pytestmark = [pytest.mark.django_db, pytest.mark.integration]


@dataclass
class SecuredPipeline:
    name: str
    topic: str
    table: str
    rows: set[str]
    acked: set[str] = field(default_factory=set)


def apply(tmp_path: Path, text: str) -> None:
    path = tmp_path / "secured.yaml"
    path.write_text(text)
    call_command("audit", "apply", str(path))


@pytest.fixture
def pipeline(secured: Secured, make_topic, source_database_url: str, tmp_path: Path) -> Iterator[SecuredPipeline]:
    """Rows 1-4 in a source table; keys 1, 2, 3 and 99 produced over SASL_SSL."""
    name = f"sec-{uuid.uuid4().hex[:8]}"
    table = f"sec_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, created_at timestamptz NOT NULL)")
        conn.execute(f"INSERT INTO {table} SELECT g, now() - interval '1 hour' FROM generate_series(1, 4) g")
    created = SecuredPipeline(name, make_topic("sec"), table, rows={"1", "2", "3", "4"})

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            created.acked.add(msg.key().decode())  # type: ignore[union-attr]

    producer = Producer(secured.client_config())
    old_ms = int((time.time() - 600) * 1000)
    for key in ("1", "2", "3", "99"):
        producer.produce(created.topic, key=key.encode(), value=b"{}", timestamp=old_ms, on_delivery=delivered)
    assert producer.flush(30) == 0
    apply(tmp_path, secured.yaml(name, created.topic, table))
    yield created
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")


class ProcessWatch:
    """Samples `ps -eo args` while a job runs: every command line seen, for the secret check."""

    def __init__(self) -> None:
        self.lines: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            output = subprocess.run(["ps", "-eww", "-o", "args"], capture_output=True, text=True, check=False).stdout
            self.lines.update(line for line in output.splitlines() if "spark" in line or "reconcile" in line)
            time.sleep(0.2)

    def __enter__(self) -> ProcessWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture
def kept_job_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The job's private folder (binding file, spark-submit's stdout and stderr), kept for reading."""
    folder = tmp_path / "job"
    folder.mkdir(mode=0o700)

    @contextlib.contextmanager
    def kept(prefix: str = "") -> Iterator[str]:
        yield str(folder)

    monkeypatch.setattr(job.tempfile, "TemporaryDirectory", kept)
    return folder


def test_it_reconciles_a_secured_pipeline_through_spark_submit_keeping_the_password_private(
    secured: Secured,
    pipeline: SecuredPipeline,
    state_dir: Path,
    kept_job_folder: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    binding = Binding.objects.get(name=pipeline.name)
    assert binding.cluster.config["sasl.password"] == "${KAFKA_SASL_PASSWORD}"  # stored unresolved
    caplog.set_level("DEBUG")

    with ProcessWatch() as watch:
        run = execute_run(start_run(binding, ReconcileRun.MANUAL))

    assert run.status == ReconcileRun.OK, run.error
    print("timings", run.duration_seconds, run.timings)
    # Ground truth: the rows inserted and the keys the broker acknowledged.
    assert pipeline.acked == {"1", "2", "3", "99"}
    expected = {("missing", k) for k in pipeline.rows - pipeline.acked} | {
        ("orphan", k) for k in pipeline.acked - pipeline.rows
    }
    assert (
        set(Finding.objects.filter(run=run).values_list("kind", "key"))
        == expected
        == {
            ("missing", "4"),
            ("orphan", "99"),
        }
    )
    assert run.records_read >= 4

    assert any("spark-submit" in line or "SparkSubmit" in line for line in watch.lines), "no job was seen running"
    assert not [line for line in watch.lines if secured.password in line]
    logs = (kept_job_folder / "stdout.log").read_text() + (kept_job_folder / "stderr.log").read_text()
    assert logs and secured.password not in logs
    assert secured.password not in caplog.text
    run.refresh_from_db()
    record = " ".join(str(v) for v in ReconcileRun.objects.filter(pk=run.pk).values().get().values())
    assert secured.password not in record


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("password", "authentication failed"),
        ("ca", "certificate not trusted"),
        ("mechanism", "SASL mechanism not enabled"),
        ("source-ca", "certificate not trusted"),
        ("source-password", "authentication failed"),
    ],
)
def test_it_fails_a_run_the_cluster_or_source_refuses_with_the_reason_and_stores_nothing(
    secured: Secured,
    pipeline: SecuredPipeline,
    untrusted_ca: str,
    state_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    change: str,
    reason: str,
) -> None:
    binding = Binding.objects.select_related("cluster", "source").get(name=pipeline.name)
    cluster: Cluster = binding.cluster
    wrong = "wrong-" + uuid.uuid4().hex[:6]
    if change == "password":
        monkeypatch.setenv("KAFKA_SASL_PASSWORD", wrong)
    elif change == "ca":
        cluster.config["ssl.ca.location"] = untrusted_ca
    elif change == "mechanism":
        cluster.config["sasl.mechanisms"] = "SCRAM-SHA-256"
    elif change == "source-ca":
        binding.source.url = binding.source.url.replace("${KAFKA_CA_LOCATION}", untrusted_ca)
    else:
        monkeypatch.setenv("APP_DB_PASSWORD", wrong)
    cluster.save()
    binding.source.save()

    started = time.monotonic()
    run = execute_run(start_run(binding, ReconcileRun.MANUAL))

    assert run.status == ReconcileRun.FAILED
    subject = f"source {binding.source.name}" if change.startswith("source") else f"cluster {cluster.name}"
    assert subject in run.error and reason in run.error, run.error
    assert wrong not in run.error and secured.password not in run.error
    assert not Finding.objects.filter(binding=binding).exists()
    assert (run.counts == {} and not run.job_run_id) or not list(state_dir.glob("**/*.json"))
    assert time.monotonic() - started < 15  # refused up front, no Spark job started
