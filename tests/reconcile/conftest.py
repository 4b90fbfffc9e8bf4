"""Fixtures of the reconciliation tests.

The SparkSession is the suite's single session-scoped `spark` fixture (tests/conftest.py,
built by spark_jobs.common.build_spark_session): one JVM for the whole pytest session.
The Django side's tests add users of every role, API tokens, bindings in the test
database and a private state folder for the job.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.reconcile_world import World


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: talks to the real Kafka, PostgreSQL, Redis or Spark")


@pytest.fixture(scope="session")
def source_database_url() -> str:
    """The source-of-truth PostgreSQL DSN; skipped only outside CI when it is not configured."""
    url = os.environ.get("SOURCE_DATABASE_URL")
    if not url:
        if os.environ.get("CI"):
            pytest.fail("SOURCE_DATABASE_URL is not set under CI")
        pytest.skip("SOURCE_DATABASE_URL is not set")
    return url


# --- the job's integration tests (test_reconcile_*.py) ----------------------------------------


@pytest.fixture
def world(kafka_bootstrap: str, source_database_url: str, make_topic) -> Iterator[World]:
    """A topic of two partitions, its ledgers, a source table and a group name (World)."""
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


# --- the Django side (auditor/reconcile) ----------------------------------------------------


@pytest.fixture
def state_dir(settings, tmp_path: Path) -> Path:
    """The job's incremental state in this test's own folder."""
    folder = tmp_path / "reconcile-state"
    settings.RECONCILE_STATE_DIR = str(folder)
    return folder


@pytest.fixture
def make_binding(db, kafka_bootstrap: str) -> Iterator[Callable[..., object]]:
    """Bindings in the test database; the source URL is stored as a ${ENV} reference, as users write it."""
    from auditor.pipelines.models import Binding, Cluster, SourceDatabase

    def make(name: str, topic: str, table: str, **fields: object) -> Binding:
        bootstrap = str(fields.pop("bootstrap_servers", kafka_bootstrap))
        cluster, _ = Cluster.objects.get_or_create(name=f"c-{name}"[:100], defaults={"bootstrap_servers": bootstrap})
        source, _ = SourceDatabase.objects.get_or_create(
            name=f"s-{name}"[:100], defaults={"url": str(fields.pop("source_url", "${SOURCE_DATABASE_URL}"))}
        )
        defaults = {
            "key_column": "id",
            "created_column": "created_at",
            "record_key": "key",
            "grace_seconds": 30,
            "guarantee": "at-least-once",
            "schedule_seconds": 300,
        } | fields
        return Binding.objects.create(name=name, cluster=cluster, topic=topic, source=source, table=table, **defaults)

    yield make


@pytest.fixture(scope="module")
def staged_runs(django_db_setup: None) -> Iterator[list[str]]:
    """Job run ids whose staging rows Spark committed outside the test transaction.

    Removed after the module, once each test's transaction (which deleted them too, holding
    their row locks until its rollback) is gone.
    """
    import psycopg

    from auditor.reconcile.job import auditor_jdbc_url

    job_run_ids: list[str] = []
    yield job_run_ids
    if job_run_ids:
        with psycopg.connect(auditor_jdbc_url(), autocommit=True) as conn:
            conn.execute("DELETE FROM reconcile_finding_staging WHERE run_id = ANY(%s)", (job_run_ids,))
