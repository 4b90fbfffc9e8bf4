"""Fixtures for the config-lint tests: a Kafka admin client that skips only off CI."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: talks to the real Kafka, PostgreSQL, Redis or Spark")


@pytest.fixture(scope="session")
def lint_admin() -> Iterator[AdminClient]:
    """An AdminClient on KAFKA_BOOTSTRAP_SERVERS; skipped when no broker answers, unless CI=true."""
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    try:
        admin.list_topics(timeout=10)
    except KafkaException as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"Kafka at {bootstrap} is unreachable under CI: {exc}")
        pytest.skip(f"Kafka at {bootstrap} is unreachable: {exc}")
    yield admin
