"""`audit reconcile` end to end: spark-submit, the staging table, Finding rows, the JSON printed.

One small topic and table with known ground truth. The first run goes through spark-submit
(the path the worker takes); the second, incremental one through the in-process path with
the suite's SparkSession, to keep the runtime down.
"""

from __future__ import annotations

import io
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Producer
from django.core.management import call_command
from django.core.management.base import CommandError

from auditor.reconcile.models import Finding, FindingStaging, ReconcileRun
from auditor.reconcile.service import current_run_ids
from tests.support.reconcile import reconcile_cli

pytestmark = pytest.mark.django_db

Found = set[tuple[str, str | None, str | None]]


@dataclass
class Pipeline:
    topic: str
    table: str
    source_url: str
    producer: Producer

    def insert(self, *ids: int, age: str = "1 hour") -> None:
        with psycopg.connect(self.source_url, autocommit=True) as conn:
            for row_id in ids:
                conn.execute(
                    f"INSERT INTO {self.table} (id, created_at, title) VALUES (%s, now() - %s::interval, %s)",
                    (row_id, age, f"ticket {row_id}"),
                )

    def produce(self, key: str, session: str | None = None, seq: int | None = None) -> None:
        headers = None
        if session is not None:
            headers = [("audit-id", key.encode()), ("audit-pid", session.encode()), ("audit-seq", str(seq).encode())]
        # Created well before the grace period, like the rows they mirror.
        created_ms = int((time.time() - 600) * 1000)
        self.producer.produce(self.topic, key=key.encode(), value=b'{"v": 1}', headers=headers, timestamp=created_ms)
        assert self.producer.flush(30) == 0


@pytest.fixture
def pipeline(make_topic, kafka_bootstrap: str, source_database_url: str) -> Iterator[Pipeline]:
    table = f"cli_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, created_at timestamptz NOT NULL, title text)")
    yield Pipeline(make_topic("rcli"), table, source_database_url, Producer({"bootstrap.servers": kafka_bootstrap}))
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")


def found_in(findings: list[dict[str, Any]]) -> Found:
    return {(f["kind"], f["key"], f["cause"]) for f in findings}


def stored(run_id: int) -> Found:
    return set(Finding.objects.filter(run_id=run_id).values_list("kind", "key", "cause"))


@pytest.mark.integration
def test_it_reconciles_through_spark_submit_then_incrementally(
    spark, pipeline: Pipeline, make_binding, state_dir: Path, staged_runs: list[str]
) -> None:
    binding = make_binding(f"cli-{uuid.uuid4().hex[:8]}", pipeline.topic, f"public.{pipeline.table}")
    pipeline.insert(1, 2, 3, 4)
    pipeline.produce("1", "s-a", 0)
    pipeline.produce("1", "s-a", 0)  # the same send twice: a producer retry
    pipeline.produce("2")
    pipeline.produce("2")  # no headers: cause unknown
    pipeline.produce("3", "s-a", 1)
    pipeline.produce("99", "s-a", 2)  # no row 99

    code, first = reconcile_cli(binding.name)  # spark-submit

    assert code == 0, first["error"]
    assert first["status"] == "ok" and first["trigger"] == "cli" and first["mode"] == "full"
    expected: Found = {
        ("missing", "4", None),
        ("duplicate", "1", "producer-retry"),
        ("duplicate", "2", "unknown"),
        ("orphan", "99", None),
    }
    assert found_in(first["findings"]) == expected
    assert first["counts"] == {
        "missing": 1,
        "duplicate": 2,
        "orphan": 1,
        "gap": 0,
        "aborted": 0,
        "unprocessed": 0,
        "reprocessed": 0,
        "unverifiable": 0,
        "late": 0,
        "records_without_headers": 2,  # the two records of key 2
        "records_malformed_headers": 4,  # audit-pid "s-a" is no session id, and audit-ts is absent
    }
    retry = next(f for f in first["findings"] if f["cause"] == "producer-retry")
    assert [(o["partition"], o["offset"]) for o in retry["offsets"]] == [(0, 0), (0, 1)]
    assert retry["session"] == "s-a" and retry["seq"] == 0 and retry["evidence"]["count"] == 2
    missing = next(f for f in first["findings"] if f["kind"] == "missing")
    assert missing["evidence"]["created_ms"] > 0 and missing["timestamp"]
    run = ReconcileRun.objects.get(pk=first["run_id"])
    staged_runs.append(run.job_run_id)
    assert run.status == ReconcileRun.OK and run.binding == binding
    assert run.offset_ranges["topic"] == {"0": [0, 6]} and run.records_read == 6
    assert run.claimed_by and run.job_run_id and run.duration_seconds and run.duration_seconds > 0
    assert stored(run.pk) == expected
    assert not FindingStaging.objects.filter(run_id=run.job_run_id).exists()
    assert (state_dir / binding.name / "state.json").exists()

    # Past the grace period (30s) and inside the incremental window (the last run's upper bound
    # minus the 5 minutes lookback).
    pipeline.insert(5, age="2 minutes")
    pipeline.produce("4", "s-a", 3)  # row 4's record arrives late: no longer missing
    pipeline.produce("1", "s-a", 4)  # ticket 1 sent again by the application

    code, second = reconcile_cli(binding.name, "--in-process")

    staged_runs.append(ReconcileRun.objects.get(pk=second["run_id"]).job_run_id)
    assert code == 0, second["error"]
    assert second["mode"] == "incremental"
    assert second["offset_ranges"]["topic"] == {"0": [6, 8]}  # only what is new was read
    expected = {
        ("missing", "5", None),
        ("duplicate", "1", "producer-retry"),
        ("duplicate", "1", "app-resend"),
        ("duplicate", "2", "unknown"),
        ("orphan", "99", None),
    }
    assert found_in(second["findings"]) == expected
    assert stored(second["run_id"]) == expected
    new = {(f["kind"], f["key"], f["cause"]) for f in second["findings"] if f["is_new"]}
    assert new == {("missing", "5", None), ("duplicate", "1", "app-resend")}
    assert current_run_ids(binding) == [second["run_id"]]


@pytest.mark.integration
def test_it_loads_a_finding_whose_ledger_error_text_holds_a_nul_visibly_escaped(
    spark, pipeline: Pipeline, make_binding, make_topic, state_dir: Path, staged_runs: list[str]
) -> None:
    """A producer-ledger failure whose error text holds U+0000: the gap's evidence is JSON,
    where it was the escape \\u0000, which the staging table's jsonb refuses (the run failed,
    and so did every later one). It is loaded as the visible six characters \\u0000."""
    from auditor.probes.codec import FAILED, NOT_PERSISTED, encode_producer_batch

    ledger = make_topic("_audit.producer-ledger")
    binding = make_binding(
        f"nul-{uuid.uuid4().hex[:8]}", pipeline.topic, f"public.{pipeline.table}", producer_ledger_topic=ledger
    )
    pipeline.insert(1, 2)
    pipeline.produce("1")  # ticket 2's send failed: the ledger says so
    # a U+0000, the text \u0000, and a backslash before a U+0000: each U+0000 becomes the text \u0000
    error = "KafkaError{code=MSG_TIMED_OUT} \x00 after \\u0000 and \\\x00"
    sent_ms = int((time.time() - 600) * 1000)
    row = (0, FAILED, -1, -1, error, NOT_PERSISTED, "2", sent_ms)
    for value in encode_producer_batch(uuid.uuid4().hex, "app", pipeline.topic, [row]):
        pipeline.producer.produce(ledger, value=value)
    assert pipeline.producer.flush(30) == 0

    for _ in range(2):  # the next run loads it the same way
        code, result = reconcile_cli(binding.name, "--in-process")
        staged_runs.append(ReconcileRun.objects.get(pk=result["run_id"]).job_run_id)
        assert code == 0, result["error"]
        gap = Finding.objects.get(run_id=result["run_id"], kind="gap")
        assert (gap.key, gap.cause) == ("2", "send-failed")
        assert gap.evidence["ledger"]["error"] == error.replace("\x00", "\\u0000")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.integration
def test_it_fails_cleanly_and_stores_nothing_when_the_broker_is_unreachable(
    spark, make_binding, state_dir: Path, staged_runs: list[str]
) -> None:
    binding = make_binding(
        f"down-{uuid.uuid4().hex[:8]}", "nowhere", "public.nothing", bootstrap_servers=f"127.0.0.1:{closed_port()}"
    )

    code, result = reconcile_cli(binding.name, "--in-process")

    assert code == 1
    assert result["status"] == "failed" and result["findings"] == [] and result["counts"] == {}
    assert "Kafka" in result["error"] or "Transport" in result["error"], result["error"]
    run = ReconcileRun.objects.get(pk=result["run_id"])
    staged_runs.append(run.job_run_id)
    assert run.status == ReconcileRun.FAILED and run.error == result["error"] and run.finished_at
    assert not Finding.objects.filter(binding=binding).exists()
    assert not FindingStaging.objects.filter(run_id=run.job_run_id).exists()
    assert current_run_ids(binding) == []


def test_it_rejects_an_unknown_binding_with_exit_status_2(db, capsys) -> None:
    with pytest.raises(CommandError) as raised:
        call_command("audit", "reconcile", "no-such-binding", stdout=io.StringIO())
    assert raised.value.returncode == 2
    assert "unknown binding 'no-such-binding'" in capsys.readouterr().err
    assert not ReconcileRun.objects.exists()


def test_it_starts_nothing_while_a_run_of_the_binding_is_in_progress(make_binding, capsys) -> None:
    binding = make_binding("busy", "t", "public.t")
    active = ReconcileRun.objects.create(binding=binding, trigger=ReconcileRun.SCHEDULE, status=ReconcileRun.RUNNING)
    with pytest.raises(CommandError) as raised:
        call_command("audit", "reconcile", "busy", stdout=io.StringIO())
    assert raised.value.returncode == 3
    assert f"run #{active.pk}" in capsys.readouterr().err
    assert list(ReconcileRun.objects.values_list("pk", flat=True)) == [active.pk]


def test_it_prints_a_readable_summary(make_binding, monkeypatch) -> None:
    from auditor.reconcile import service

    make_binding("summary", "t", "public.t")

    def fake_job(job_input: Any, job_run_id: str, full: bool) -> dict[str, Any]:
        FindingStaging.objects.create(run_id=job_run_id, kind="missing", key="<k1>", evidence={"created_ms": 1})
        return {"status": "ok", "mode": "full", "counts": {"missing": 1}, "records_read": 3, "duration_s": 1.5}

    monkeypatch.setattr(service.job, "run_spark_submit", fake_job)
    out = io.StringIO()
    call_command("audit", "reconcile", "summary", stdout=out)
    text = out.getvalue()
    assert "of binding summary: ok in 1.5s (full, 3 records read)" in text
    assert "missing             1" in text and "<k1>" in text
