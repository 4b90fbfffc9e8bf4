"""Fixtures of the stuck-item tests: a demo pipeline (its own tables, topics, group and
ledgers) wired to a binding and a stuck rule in the test database."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from auditor.pipelines.models import Binding, Cluster, SourceDatabase, StuckRule
from tests.support.demo import DemoPipeline
from tests.support.plain import PlainPipeline
from tests.support.stuck import StuckSetup, make_rule


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: talks to the real Kafka, PostgreSQL, Redis or Spark")


@pytest.fixture
def stuck(
    db: None, make_pipeline: Callable[..., DemoPipeline], contract: int, settings: Any, tmp_path: Any
) -> StuckSetup:
    settings.RECONCILE_STATE_DIR = str(tmp_path / "reconcile-state")
    created = make_pipeline(contract=contract)
    return StuckSetup(created, make_rule(created))


@pytest.fixture
def make_stuck(
    db: None,
    make_pipeline: Callable[..., DemoPipeline],
    settings: Any,
    tmp_path: Any,
) -> Callable[..., StuckSetup]:
    settings.RECONCILE_STATE_DIR = str(tmp_path / "reconcile-state")

    def make(partitions: int = 1, contract: int = 2, **rule_options: Any) -> StuckSetup:
        created = make_pipeline(partitions=partitions, contract=contract)
        return StuckSetup(created, make_rule(created, **rule_options))

    return make


@pytest.fixture
def plain_rule(db: None) -> StuckRule:
    """A rule whose table does not exist: for tests that store verdicts built inline."""
    suffix = uuid.uuid4().hex[:8]
    cluster = Cluster.objects.create(name=f"plain-{suffix}", bootstrap_servers="127.0.0.1:9092")
    source = SourceDatabase.objects.create(name=f"plain-{suffix}", url="${SOURCE_DATABASE_URL}")
    binding = Binding.objects.create(
        name=f"plain-{suffix}",
        cluster=cluster,
        topic=f"plain-{suffix}",
        source=source,
        table=f"missing_{suffix}",
        key_column="ticket_id",
        created_column="created_at",
        consumer_groups=["ticket-processor"],
    )
    return StuckRule.objects.create(
        name=f"plain-{suffix}", binding=binding, status_column="status", stuck_values=["NEW"], age_column="created_at"
    )


@pytest.fixture
def plain(
    kafka_bootstrap: str, make_topic: Callable[..., str], settings: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[PlainPipeline]:
    """A pipeline without probes: its own table (ticket_id, created_at, status), a topic of two
    partitions and a group name."""
    # The state as a path, or (parametrized) as a URI: the job writes it through Spark's
    # filesystems and the verdicts read it through pyarrow's, as with an object store.
    location = getattr(request, "param", "path")
    settings.RECONCILE_STATE_DIR = str(tmp_path / "state") if location == "path" else f"file://{tmp_path}/state"
    url = os.environ["SOURCE_DATABASE_URL"]
    table = f"mem_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (ticket_id bigint PRIMARY KEY, created_at timestamptz, status text)")
    yield PlainPipeline(kafka_bootstrap, url, make_topic("mem", partitions=2), table, f"g-{uuid.uuid4().hex[:8]}")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
