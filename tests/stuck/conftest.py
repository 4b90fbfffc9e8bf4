"""Fixtures of the stuck-item tests: a demo pipeline (its own tables, topics, group and
ledgers) wired to a binding and a stuck rule in the test database."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from auditor.pipelines.models import Binding, Cluster, SourceDatabase, StuckRule
from tests.support.demo import DemoPipeline
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
