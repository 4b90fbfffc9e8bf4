"""Fixtures of the reconciliation tests.

The SparkSession is the suite's single session-scoped `spark` fixture (tests/conftest.py,
built by spark_jobs.common.build_spark_session): one JVM for the whole pytest session.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import pytest

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: talks to the real Kafka, PostgreSQL, Redis or Spark")


def at(seconds: float) -> datetime:
    """A fixed instant: T0 plus `seconds` (test data never depends on the wall clock)."""
    return T0 + timedelta(seconds=seconds)


def ms(seconds: float) -> int:
    return int(at(seconds).timestamp() * 1000)


@pytest.fixture(scope="session")
def source_database_url() -> str:
    """The source-of-truth PostgreSQL DSN; skipped only outside CI when it is not configured."""
    url = os.environ.get("SOURCE_DATABASE_URL")
    if not url:
        if os.environ.get("CI"):
            pytest.fail("SOURCE_DATABASE_URL is not set under CI")
        pytest.skip("SOURCE_DATABASE_URL is not set")
    return url
