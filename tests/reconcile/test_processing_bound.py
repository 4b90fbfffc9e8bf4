"""How long reconciliation lets a probed consumer session be still processing what its commits
passed: its max.poll.interval.ms as the clients topic shows it, capped by
$AUDITOR_PROCESSING_BOUND_SECONDS, handed to the job in the binding."""

from __future__ import annotations

import pytest

from auditor.pipelines.producers import observed_producers, processing_bounds
from auditor.probes.consumer import AuditedConsumer
from spark_jobs.binding import BindingError, binding_from_dict
from spark_jobs.processing_bound import DEFAULT_MAX_POLL_INTERVAL_MS
from tests.support.reconcile_world import MINIMAL_BINDING

BASE = MINIMAL_BINDING


def test_the_job_takes_the_bounds_and_refuses_bad_ones() -> None:
    plain = binding_from_dict(BASE)
    assert plain.processing_bound("s1") == DEFAULT_MAX_POLL_INTERVAL_MS
    given = binding_from_dict(BASE | {"processing_bound_ms": 60_000, "session_bounds_ms": {"s1": 7_000}})
    assert (given.processing_bound("s1"), given.processing_bound("s2")) == (7_000, 60_000)
    with pytest.raises(BindingError, match="processing_bound_ms must be a whole number"):
        binding_from_dict(BASE | {"processing_bound_ms": "soon"})
    with pytest.raises(BindingError, match=r"session_bounds_ms\['s1'\] must be a whole number"):
        binding_from_dict(BASE | {"session_bounds_ms": {"s1": -1}})
    with pytest.raises(BindingError, match="session_bounds_ms must be an object"):
        binding_from_dict(BASE | {"session_bounds_ms": [1]})


def test_the_cap_applies_to_every_session(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUDITOR_PROCESSING_BOUND_SECONDS", raising=False)
    assert processing_bounds({"s1": 7_000, "s2": 900_000}) == (300_000, {"s1": 7_000, "s2": 900_000})
    monkeypatch.setenv("AUDITOR_PROCESSING_BOUND_SECONDS", "60")
    assert processing_bounds({"s1": 7_000, "s2": 900_000}) == (60_000, {"s1": 7_000, "s2": 60_000})
    monkeypatch.delenv("AUDITOR_PROCESSING_BOUND_SECONDS")
    monkeypatch.setenv("AUDITOR_STUCK_PROCESSING_BOUND_SECONDS", "0")  # the name before stop 86
    assert processing_bounds({"s1": 7_000}) == (0, {"s1": 0})
    monkeypatch.setenv("AUDITOR_PROCESSING_BOUND_SECONDS", "later")
    with pytest.raises(BindingError, match="AUDITOR_PROCESSING_BOUND_SECONDS must be a number of seconds"):
        processing_bounds({})


@pytest.mark.integration
def test_a_sessions_bound_is_the_max_poll_interval_it_reported(
    kafka_bootstrap: str, make_topic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AUDITOR_PROCESSING_BOUND_SECONDS", raising=False)
    clients = make_topic("_audit.clients")
    config = {
        "bootstrap.servers": kafka_bootstrap,
        "group.id": "g-bound",
        "max.poll.interval.ms": 7000,
        "session.timeout.ms": 6000,
    }
    consumer = AuditedConsumer(config, ledger_topic=make_topic("_audit.consumer-ledger"), clients_topic=clients)
    try:
        consumer.flush_ledger()
        reported = observed_producers({"bootstrap.servers": kafka_bootstrap}, clients, timeout_s=15)
    finally:
        consumer.close()
    default, sessions = processing_bounds(reported.poll_intervals_ms)
    assert (default, sessions) == (DEFAULT_MAX_POLL_INTERVAL_MS, {consumer.session_id: 7000})
