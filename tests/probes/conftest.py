"""Fixtures for the probe tests; broker ones read KAFKA_BOOTSTRAP_SERVERS (default 127.0.0.1:9092)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient

from auditor.probes.native import native_hot_path_available
from tests.probes.kafka_helpers import AuditTopics, TopicFactory, bootstrap_servers, broker_unreachable_reason


@pytest.fixture
def probe_bootstrap() -> str:
    return bootstrap_servers()


@pytest.fixture(scope="session")
def probe_admin() -> AdminClient:
    """An admin client for a broker that answers; fails (never skips) the test otherwise."""
    reason = broker_unreachable_reason()
    if reason is not None:
        pytest.fail(reason)
    return AdminClient({"bootstrap.servers": bootstrap_servers()})


@pytest.fixture
def probe_topic(probe_admin: AdminClient) -> Iterator[TopicFactory]:
    factory = TopicFactory(probe_admin)
    yield factory
    factory.delete_all()


@pytest.fixture
def audit_topics(probe_topic: TopicFactory) -> AuditTopics:
    """Private audit topics per test, so assertions see only this test's ledgers."""
    return AuditTopics(probe_topic("pledger", 3), probe_topic("cledger", 3), probe_topic("clients"))


@pytest.fixture(params=["native", "python"])
def hot_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test once with each hot path of the probes (AuditedProducer's produce(), the
    consumers' poll where the probe stores offsets): the native one (built by
    stack/bootstrap.sh; a test fails, never skips, when it is missing) and the pure-Python one
    (AUDITOR_PROBES_NATIVE=0)."""
    if request.param == "native":
        monkeypatch.delenv("AUDITOR_PROBES_NATIVE", raising=False)
        if not native_hot_path_available():
            pytest.fail("the native hot path is not built: python -m auditor.probes.build_native")
    else:
        monkeypatch.setenv("AUDITOR_PROBES_NATIVE", "0")
    return str(request.param)
