"""Fixtures of the stack tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def secrets_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ${ENV} secrets the apply_config GOOD file refers to."""
    monkeypatch.setenv("TEST_KAFKA_SECRET", "kafka-s3cret")
    monkeypatch.setenv("TEST_APP_DB_PASSWORD", "db-s3cret")
