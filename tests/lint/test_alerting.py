"""Lint scans raise and resolve webhook alerts (lint:<severity>) per cluster, target and rule.

scan_all runs for real, storing its scan; only the per-cluster linting is replaced by
a stand-in outcome, so the tests need no broker with bad settings. The alerts reach a
real HTTP receiver on loopback.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from auditor.alerts.delivery import deliver
from auditor.alerts.models import Alert, Delivery
from auditor.lint import service
from auditor.lint.alerting import fingerprint
from auditor.lint.engine.terms import LintResult
from auditor.lint.models import LintScan
from auditor.lint.service import ScanOutcome, ScanResult, scan_all
from auditor.pipelines.models import Binding, Cluster, SourceDatabase

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

Outcomes = dict[str, ScanOutcome]


def result(rule: str, severity: str, topic: str, cluster: str) -> ScanResult:
    lint_result = LintResult(
        rule=rule,
        title=f"title of {rule}",
        severity=severity,  # type: ignore[arg-type]
        target="topic",
        subject=topic,
        config="min.insync.replicas",
        value=1,
        expected=">= 2",
        message=f"min.insync.replicas=1 on {topic}",
        guarantee="at-least-once",
        source="explicit",
        why="",
        fix="",
    )
    return ScanResult(lint_result, f"topic {topic}", cluster)


@pytest.fixture
def outcomes(monkeypatch: pytest.MonkeyPatch) -> Outcomes:
    """What linting each cluster (by name) finds in the next scan; a cluster left out finds nothing."""
    planned: Outcomes = {}
    monkeypatch.setattr(service, "scan_cluster", lambda cluster, **kwargs: planned.pop(cluster.name, ScanOutcome()))
    return planned


@pytest.fixture
def cluster() -> Cluster:
    return Cluster.objects.create(name=f"lint-alert-{uuid.uuid4().hex[:6]}", bootstrap_servers="127.0.0.1:9092")


@pytest.fixture
def scan(cluster: Cluster, outcomes: Outcomes) -> Callable[..., LintScan]:
    def run(*results: ScanResult, problems: tuple[str, ...] = (), clusters: list[Cluster] | None = None) -> LintScan:
        outcomes[cluster.name] = ScanOutcome(results=list(results), problems=list(problems))
        return scan_all(LintScan.SCHEDULE, clusters=clusters or [cluster])

    return run


def deliver_pending() -> list[Delivery]:
    ids = Delivery.objects.filter(status=Delivery.PENDING).order_by("pk").values_list("pk", flat=True)
    return [deliver(pk) for pk in list(ids)]


def test_it_raises_an_error_result_and_resolves_it_when_a_later_scan_is_clean(
    webhook_settings, make_channel, receiver, cluster, scan
):
    channel = make_channel()  # lint_severity: error
    first = scan(result("T001", "error", "tickets", cluster.name), result("T002", "warning", "tickets", cluster.name))
    assert first.status == LintScan.OK and first.error_count == 1
    [alert] = Alert.objects.filter(channel=channel)
    key = fingerprint("error", "T001", cluster.name, "topic tickets")
    assert (alert.kind, alert.fingerprint, alert.state) == ("lint:error", key, "open")
    assert alert.summary == f"T001 title of T001: topic tickets on cluster {cluster.name}"
    assert (alert.details["scan"], alert.details["config"], alert.details["value"]) == (
        first.pk,
        "min.insync.replicas",
        1,
    )
    deliver_pending()
    [opened] = receiver.received
    assert opened.signature_valid and opened.json()["event"] == "opened" and opened.json()["kind"] == "lint:error"

    scan(result("T001", "error", "tickets", cluster.name))  # still there: folded, nothing sent
    alert.refresh_from_db()
    assert (alert.state, alert.count) == ("open", 2)
    assert deliver_pending() == []

    scan()  # fixed
    alert.refresh_from_db()
    assert alert.state == "resolved"
    deliver_pending()
    assert [r.json()["event"] for r in receiver.received] == ["opened", "resolved"]
    assert receiver.received[1].json()["fingerprint"] == key


def test_a_failed_scan_neither_raises_nor_resolves(webhook_settings, make_channel, receiver, cluster, scan):
    channel = make_channel()
    failed = scan(result("T001", "error", "tickets", cluster.name), problems=("cannot reach it",))
    assert failed.status == LintScan.FAILED
    assert not Alert.objects.filter(channel=channel).exists()

    scan(result("T001", "error", "tickets", cluster.name))
    scan(problems=("cannot read _audit.clients",))  # its missing result means "not read", not "fixed"
    [alert] = Alert.objects.filter(channel=channel)
    assert (alert.state, alert.count) == ("open", 1)


def test_it_resolves_only_within_the_clusters_a_scan_covered(webhook_settings, make_channel, receiver, cluster, scan):
    channel = make_channel()
    scan(result("T001", "error", "tickets", cluster.name))
    other = Cluster.objects.create(name=f"{cluster.name}-other", bootstrap_servers="127.0.0.1:9093")
    scan(clusters=[other])  # a clean scan of another cluster
    [alert] = Alert.objects.filter(channel=channel)
    assert alert.state == "open"


def test_each_channel_hears_the_severities_it_asked_for(webhook_settings, make_channel, receiver, cluster, scan):
    errors_only = make_channel("errors", events={"lint_severity": "error"})
    warnings_too = make_channel("warnings", events={"lint_severity": "warning"})
    scan(result("T001", "error", "tickets", cluster.name), result("T002", "warning", "tickets", cluster.name))
    assert sorted(Alert.objects.filter(channel=errors_only).values_list("kind", flat=True)) == ["lint:error"]
    assert sorted(Alert.objects.filter(channel=warnings_too).values_list("kind", flat=True)) == [
        "lint:error",
        "lint:warning",
    ]


def test_it_names_the_binding_of_a_topic_so_binding_filters_apply(
    webhook_settings, make_channel, receiver, cluster, scan
):
    source = SourceDatabase.objects.create(name=f"src-{uuid.uuid4().hex[:6]}", url="postgresql://app@127.0.0.1/app")
    tickets, orders = (
        Binding.objects.create(
            name=f"{topic}-{uuid.uuid4().hex[:6]}",
            cluster=cluster,
            topic=topic,
            source=source,
            table=f"public.{topic}",
            key_column="id",
        )
        for topic in ("tickets", "orders")
    )
    channel = make_channel(bindings=[orders])
    scan(result("T001", "error", "tickets", cluster.name), result("T001", "error", "orders", cluster.name))
    [alert] = Alert.objects.filter(channel=channel)
    assert (alert.binding, alert.details["subject"]) == (orders, "topic orders")
    assert not Alert.objects.filter(channel=channel, binding=tickets).exists()


def test_it_shortens_the_fingerprint_of_a_long_subject():
    subject = "producer " + "x" * 400
    key = fingerprint("error", "P001", "local", subject)
    assert len(key) <= 200 and key.startswith("lint:error:P001:local:producer xx")
    assert key != fingerprint("error", "P001", "local", subject + "y")
