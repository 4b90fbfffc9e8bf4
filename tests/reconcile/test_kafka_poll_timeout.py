"""RECONCILE_KAFKA_POLL_TIMEOUT_MS: how long a Spark task's Kafka consumer polls for a record."""

from __future__ import annotations

import pytest

from spark_jobs.common import POLL_TIMEOUT_ENV, kafka_poll_timeout_ms


def test_it_leaves_sparks_own_poll_timeout_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(POLL_TIMEOUT_ENV, raising=False)
    assert kafka_poll_timeout_ms() is None
    monkeypatch.setenv(POLL_TIMEOUT_ENV, "5000")
    assert kafka_poll_timeout_ms() == 5000


@pytest.mark.parametrize("raw", ["5s", "0", "-1", "1.5"])
def test_a_bad_poll_timeout_is_named(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(POLL_TIMEOUT_ENV, raw)
    with pytest.raises(ValueError, match=f"{POLL_TIMEOUT_ENV} must be .*got '{raw}'"):
        kafka_poll_timeout_ms()
