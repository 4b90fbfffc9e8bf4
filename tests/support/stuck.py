"""Stuck-item test helpers: a demo pipeline with its rule, diagnoses by both engines, inline results."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any
from unittest import mock

from auditor.pipelines.models import Binding, Cluster, SourceDatabase, StuckRule
from auditor.reconcile.conf import IN_PROCESS
from auditor.reconcile.models import Finding, ReconcileRun
from auditor.reconcile.service import execute_run, start_run
from auditor.stuck import service as stuck_service
from auditor.stuck.evidence import Diagnosis, StuckRow
from auditor.stuck.locate import LocateRequest, LocateResult, locate
from auditor.stuck.service import DiagnosisOptions, DiagnosisResult, ItemVerdict, diagnose_rule
from spark_jobs import common
from tests.support.demo import DemoPipeline


@dataclass
class StuckSetup:
    pipeline: DemoPipeline
    rule: StuckRule

    def options(self, engine: str = "python", **extra: Any) -> DiagnosisOptions:
        ledgers = {
            "producer_ledger_topic": self.pipeline.probes.producer_ledger,
            "consumer_ledger_topic": self.pipeline.probes.consumer_ledger,
            # where the pipeline's probes report their settings (acks, timeouts), as
            # `_audit.clients` is for a deployed pipeline
            "clients_topic": self.pipeline.probes.clients,
        }
        return DiagnosisOptions(engine=engine, **(ledgers | extra))


def make_rule(
    demo: DemoPipeline,
    *,
    bootstrap: str | None = None,
    groups: list[str] | None = None,
    older_than_seconds: int = 0,
    record_key: str = "key",
    name: str | None = None,
) -> StuckRule:
    suffix = uuid.uuid4().hex[:8]
    cluster = Cluster.objects.create(name=f"stuck-{suffix}", bootstrap_servers=bootstrap or demo.bootstrap)
    source = SourceDatabase.objects.create(name=f"stuck-{suffix}", url="${SOURCE_DATABASE_URL}")
    binding = Binding.objects.create(
        name=f"stuck-{suffix}",
        cluster=cluster,
        topic=demo.topic,
        source=source,
        table=demo.table,
        key_column="ticket_id",
        record_key=record_key,
        created_column="created_at",
        consumer_groups=[demo.group] if groups is None else groups,
    )
    return StuckRule.objects.create(
        name=name or f"tickets-new-{suffix}",
        binding=binding,
        status_column="status",
        stuck_values=["NEW"],
        age_column="created_at",
        older_than_seconds=older_than_seconds,
    )


def verdicts_of(result: DiagnosisResult) -> dict[str, str]:
    return {item.row.key: item.diagnosis.verdict for item in result.items}


def diagnose_both(setup: StuckSetup, spark: Any, indexed: bool = False, compiled: bool = False) -> DiagnosisResult:
    """Diagnose with the Python engine and with Spark, reading the whole topic; both must
    give the same verdicts and reasons.

    compiled: Spark diagnoses once more as if the read were large (its expressions compiled,
    not interpreted as a small read's are: spark_jobs.common.small_job_settings), with the
    same verdicts and reasons.

    indexed: a real reconciliation run reads the topic first, and both engines diagnose
    again with its key index standing in for what it read: every verdict and reason must be
    the same as from the full read.
    """
    by_python = diagnose_rule(setup.rule, setup.options("python", use_index=False))
    by_spark = diagnose_rule(setup.rule, setup.options("spark", spark=spark, use_index=False))
    assert by_python.engine == "python" or not by_python.items
    assert by_spark.engine == "spark" or not by_spark.items
    assert _comparable(by_spark) == _comparable(by_python)
    if compiled:
        settings: list[dict[str, str]] = []

        def spied(request: LocateRequest, engine: str = "auto", spark: Any = None) -> LocateResult:
            located = locate(request, engine, spark)
            assert "topic_committed" in located.timings  # the Spark job read (not a locate that reads nothing)
            settings.append(located.spark_settings)
            return located

        with mock.patch.object(common, "SMALL_RUN_RECORDS", 0), mock.patch.object(stuck_service, "locate", spied):
            by_compiled = diagnose_rule(setup.rule, setup.options("spark", spark=spark, use_index=False))
        assert settings == [{}]  # one Spark locate, with the session's own settings: compiled
        assert _comparable(by_compiled) == _comparable(by_python)
    if indexed:
        run = reconcile_now(setup.rule.binding)
        for options in (setup.options("python"), setup.options("spark", spark=spark)):
            from_index = diagnose_rule(setup.rule, options)
            assert any(f"key index of reconciliation run {run.job_run_id}" in n for n in from_index.notes), (
                from_index.notes
            )
            assert _comparable(from_index) == _comparable(by_python)
    return by_spark


def bind_ledgers(binding: Binding, pipeline: DemoPipeline, grace_seconds: int) -> None:
    """Point `binding` at the pipeline's probe ledgers, with `grace_seconds` (in place)."""
    Binding.objects.filter(pk=binding.pk).update(
        producer_ledger_topic=pipeline.probes.producer_ledger,
        consumer_ledger_topic=pipeline.probes.consumer_ledger,
        grace_seconds=grace_seconds,
    )
    binding.refresh_from_db()


def reconcile_now(binding: Binding) -> ReconcileRun:
    """A real reconciliation of the binding, in this process (its state under RECONCILE_STATE_DIR)."""
    run = execute_run(start_run(binding, ReconcileRun.CLI), IN_PROCESS)
    assert run.status == ReconcileRun.OK, run.error
    return run


def run_findings(run: ReconcileRun) -> set[tuple[str, str | None, str | None]]:
    """A run's findings as (kind, cause, key)."""
    return set(Finding.objects.filter(run=run).values_list("kind", "cause", "key"))


def _comparable(result: DiagnosisResult) -> dict[str, tuple[str, str]]:
    # Durations (lag in time) and when each diagnosis read the log end move between the two
    # diagnoses; everything else must agree.
    def fixed(reason: str) -> str:
        reason = re.sub(r"read the log end \([^)]*\)", "read the log end (<when>)", reason)
        return re.sub(r"\d+(\.\d+)? (s|min|h)\b", "<t>", reason)

    return {i.row.key: (i.diagnosis.verdict, fixed(i.diagnosis.reason)) for i in result.items}


def fake_result(rule: StuckRule, verdicts: dict[str, str], *, degraded: bool = False) -> DiagnosisResult:
    """A diagnosis result built inline: key -> verdict."""
    items = [
        ItemVerdict(
            StuckRow(key, "NEW", 900.0 + n),
            Diagnosis(verdict, f"because {verdict}", {"topic": "t", "partition": 0, "offset": n, "records": []}),
        )
        for n, (key, verdict) in enumerate(verdicts.items())
    ]
    return DiagnosisResult(rule.name, items=items, engine="python", degraded=degraded)
