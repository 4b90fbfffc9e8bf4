"""Status checks never show a secret: REDIS_URL's password is masked on success and failure."""

from __future__ import annotations

from typing import Any

import pytest

from auditor.status import checks
from auditor.status.checks import ComponentStatus, check_redis, run_all_checks

pytestmark = pytest.mark.integration

SECRET = "hunter2-Sup3rS3cret"


def test_it_shows_the_redis_url_it_reached(settings: Any) -> None:
    status = check_redis()
    assert status.healthy, status.detail
    assert status.detail.endswith(f" at {settings.REDIS_URL}")  # the test stack's Redis has no password


def test_it_masks_the_redis_password_when_redis_is_unreachable(settings: Any) -> None:
    settings.REDIS_URL = f"redis://:{SECRET}@127.0.0.1:1/0"  # port 1: nothing listens
    status = check_redis()
    assert not status.healthy
    assert SECRET not in status.detail
    assert status.detail.startswith("redis://:****@127.0.0.1:1/0: ")


def test_it_masks_a_url_quoted_in_any_check_detail(monkeypatch: pytest.MonkeyPatch) -> None:
    def leaky_check() -> ComponentStatus:  # e.g. a driver error that quotes its DSN
        return ComponentStatus("db", False, f"could not connect to postgresql://app:{SECRET}@db:5432/x")

    monkeypatch.setattr(checks, "CHECKS", [leaky_check])
    assert run_all_checks() == [ComponentStatus("db", False, "could not connect to postgresql://****@db:5432/x")]


@pytest.mark.django_db
def test_it_shows_whether_each_secured_cluster_accepts_the_auditor(
    secured: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from auditor.pipelines.models import Cluster

    config = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "${KAFKA_SASL_USERNAME}",
        "sasl.password": "${STATUS_TEST_SASL_PASSWORD}",
        "ssl.ca.location": "${KAFKA_CA_LOCATION}",
    }
    Cluster.objects.create(name="status-good", bootstrap_servers="${KAFKA_SECURE_BOOTSTRAP_SERVERS}", config=config)
    Cluster.objects.create(name="status-plain", bootstrap_servers="127.0.0.1:1")  # not contacted: nothing to explain
    monkeypatch.setenv("STATUS_TEST_SASL_PASSWORD", secured.password)

    assert checks.check_secured_clusters() == [
        ComponentStatus("cluster status-good", True, "SASL_SSL: accepted the auditor")
    ]
    monkeypatch.setenv("STATUS_TEST_SASL_PASSWORD", SECRET)
    (refused,) = checks.check_secured_clusters()
    assert not refused.healthy and refused.detail.startswith("cluster status-good: authentication failed: ")
    assert SECRET not in refused.detail and secured.password not in refused.detail


@pytest.mark.django_db
def test_it_names_a_tls_file_the_cluster_config_points_at_but_that_does_not_exist() -> None:
    from auditor.pipelines.models import Cluster

    config = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "auditor",
        "sasl.password": SECRET,
        "ssl.ca.location": "/nonexistent/ca.pem",
    }
    Cluster.objects.create(name="status-no-ca", bootstrap_servers="127.0.0.1:9", config=config)

    (status,) = checks.check_secured_clusters()
    assert not status.healthy
    assert status.detail == (
        "cluster status-no-ca: cannot read the TLS files: ssl.ca.location /nonexistent/ca.pem: no such file"
    )


def test_it_reports_a_check_that_raises_instead_of_failing_the_page(monkeypatch: pytest.MonkeyPatch) -> None:
    def check_broken_thing() -> ComponentStatus:
        raise ValueError("boom")

    monkeypatch.setattr(checks, "CHECKS", [check_broken_thing])
    assert run_all_checks() == [ComponentStatus("broken thing", False, "the check itself failed: ValueError: boom")]
