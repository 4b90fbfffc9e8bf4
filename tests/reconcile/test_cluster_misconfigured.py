"""A Spark cluster the auditor is pointed at wrongly.

A state location the Spark executors do not share with the driver: a local path given to a
cluster whose nodes each have their own disk. The worker here runs in a mount namespace of its
own, with an empty tmpfs over the state folder: what its executors write there the driver never
sees, as on two machines.

Before this check a run "succeeded" with a key index and state datasets that held nothing, and
every later run judged from that empty memory.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Producer

from auditor.reconcile.models import Finding, ReconcileRun
from tests.support.live import free_port
from tests.support.reconcile import reconcile_cli
from tests.support.spark_cluster import standalone_cluster

pytestmark = [pytest.mark.django_db, pytest.mark.integration]


@pytest.fixture(scope="module")
def private_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("not-shared")


@pytest.fixture(scope="module")
def isolated_cluster(tmp_path_factory: pytest.TempPathFactory, private_dir: Path) -> Iterator[str]:
    with standalone_cluster(tmp_path_factory.mktemp("spark-isolated"), private_dir=private_dir) as url:
        yield url


def test_a_state_location_the_executors_do_not_share_fails_the_run_and_publishes_nothing(
    isolated_cluster: str,
    private_dir: Path,
    settings,
    make_topic,
    make_binding,
    kafka_bootstrap: str,
    source_database_url: str,
) -> None:
    settings.SPARK_MASTER = isolated_cluster
    state = private_dir / "reconcile-state"
    settings.RECONCILE_STATE_DIR = str(state)
    topic = make_topic("rnotshared", partitions=2)
    table = f"notshared_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, created_at timestamptz NOT NULL)")
        for row_id in range(1, 11):
            conn.execute(f"INSERT INTO {table} VALUES (%s, now() - interval '20 minutes')", (row_id,))
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for key in range(1, 10):  # 10 never sent: a finding the run would publish
        producer.produce(topic, key=str(key).encode(), value=b"{}")
    assert producer.flush(30) == 0
    binding = make_binding(f"notshared-{uuid.uuid4().hex[:8]}", topic, f"public.{table}")
    try:
        code, result = reconcile_cli(binding.name, "--full")
    finally:
        with psycopg.connect(source_database_url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
    run = ReconcileRun.objects.get(pk=result["run_id"])
    assert code != 0 and run.status == "failed", result
    assert "not shared" in result["error"] and str(state) in result["error"], result["error"]
    assert not Finding.objects.filter(run=run).exists()
    assert not (state / "state.json").exists()


def test_an_unreachable_master_fails_the_run_naming_it(settings, make_topic, make_binding, state_dir: Path) -> None:
    """Spark retries an absent standalone master for about a minute, then spark-submit exited
    with a stack trace whose last line (what the run showed) was netty's event loop."""
    master = f"spark://127.0.0.1:{free_port()}"  # nothing listens there
    settings.SPARK_MASTER = master
    topic = make_topic("rnomaster", partitions=1)
    binding = make_binding(f"nomaster-{uuid.uuid4().hex[:8]}", topic, "public.nomaster")
    code, result = reconcile_cli(binding.name, "--full")
    assert code != 0 and result["status"] == "failed"
    assert f"the Spark master {master} (SPARK_MASTER) does not answer" in result["error"], result["error"]
    assert "Connection refused" in result["error"] and "netty" not in result["error"]
    assert ReconcileRun.objects.get(pk=result["run_id"]).status == "failed"
