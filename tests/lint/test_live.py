"""lint_live_cluster against the real broker(s) on KAFKA_BOOTSTRAP_SERVERS."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from auditor.lint.engine.errors import LintInputError
from auditor.lint.live import lint_live_cluster

pytestmark = pytest.mark.integration


@pytest.fixture
def lint_topic(lint_admin: AdminClient) -> Iterator[Callable[[dict[str, str]], str]]:
    created: list[str] = []

    def create(config: dict[str, str]) -> str:
        brokers = len(lint_admin.list_topics(timeout=10).brokers)
        name = f"lint-live-{uuid.uuid4().hex[:10]}"
        futures = lint_admin.create_topics([NewTopic(name, 1, min(3, brokers), config=config)])
        futures[name].result(timeout=30)
        created.append(name)
        deadline = time.monotonic() + 20
        while name not in lint_admin.list_topics(timeout=5).topics:
            assert time.monotonic() < deadline, f"topic {name} did not appear"
            time.sleep(0.2)
        return name

    yield create
    if created:
        for future in lint_admin.delete_topics(created).values():
            future.result(timeout=30)


def _broker_count(admin: AdminClient) -> int:
    return len(admin.list_topics(timeout=10).brokers)


def test_it_lints_a_live_topic_with_unsafe_settings(lint_admin: AdminClient, lint_topic) -> None:
    name = lint_topic({"min.insync.replicas": "1", "unclean.leader.election.enable": "true"})
    results = lint_live_cluster(lint_admin, "at-least-once", topics=[name])
    on_topic = {r.rule: r for r in results if r.subject == name}
    replicated = _broker_count(lint_admin) >= 3  # the topic was created with RF min(3, brokers)
    assert sorted(on_topic) == (["T002", "T004"] if replicated else ["T001", "T002", "T004"])
    assert (on_topic["T002"].value, on_topic["T002"].source) == ("1", "explicit")
    assert (on_topic["T004"].value, on_topic["T004"].source) == ("true", "explicit")
    if not replicated:
        assert (on_topic["T001"].value, on_topic["T001"].source) == (_broker_count(lint_admin), "explicit")


def test_it_lints_the_brokers_as_the_stack_configures_them(lint_admin: AdminClient) -> None:
    # stack/stack.sh: 1 broker runs with every replication setting at 1; 3 brokers with RF 3, min ISR 2
    results = lint_live_cluster(lint_admin, "exactly-once", topics=[])
    brokers = _broker_count(lint_admin)
    expected = ["B002", "B003", "B004", "B007", "B008"] if brokers == 1 else []
    assert sorted(r.rule for r in results) == expected
    assert {r.subject for r in results} <= {"broker 1"}
    assert {r.source for r in results} <= {"explicit"}


def test_it_reads_dynamic_topic_configs_and_lag(lint_admin: AdminClient, lint_topic) -> None:
    name = lint_topic({"min.insync.replicas": "2"} if _broker_count(lint_admin) >= 3 else {})
    resource = ConfigResource(
        ResourceType.TOPIC,
        name,
        incremental_configs=[
            ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("unclean.leader.election.enable", "true", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    for future in lint_admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)
    results = lint_live_cluster(lint_admin, "at-least-once", topics=[name], consumer_lag_seconds={name: 7200})
    on_topic = {r.rule: r for r in results if r.subject == name}
    assert {"T004", "T005"} <= set(on_topic)
    assert (on_topic["T005"].value, on_topic["T005"].source, on_topic["T005"].severity) == (
        "3600000",
        "explicit",
        "error",
    )
    assert on_topic["T004"].source == "explicit"


def test_it_rejects_a_topic_that_does_not_exist(lint_admin: AdminClient) -> None:
    with pytest.raises(LintInputError, match=r"^topics: no such topic\(s\) in the cluster: lint-missing-"):
        lint_live_cluster(lint_admin, "at-least-once", topics=[f"lint-missing-{uuid.uuid4().hex[:6]}"])
