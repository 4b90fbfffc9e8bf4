"""Run lab scenarios one after the other and store each result as it ends."""

from __future__ import annotations

import logging
import os
import time
import traceback
from collections.abc import Callable

from django.utils import timezone

from auditor.lab.cluster import Cluster
from auditor.lab.compare import score, verdict_counts
from auditor.lab.models import LabResult, LabRun
from auditor.lab.registry import Scenario
from auditor.lab.world import Options, World
from auditor.probes import ensure_audit_topics

log = logging.getLogger(__name__)


def bootstrap_servers() -> str:
    servers = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "")
    if not servers:
        from auditor.lab.cluster import NEEDS_THREE, LabError

        raise LabError(f"KAFKA_BOOTSTRAP_SERVERS is not set; the lab {NEEDS_THREE}")
    return servers


def run_scenario(scenario: Scenario, cluster: Cluster, options: Options, lab_run: LabRun) -> LabResult:
    world = World(scenario.name, cluster, options)
    started = time.monotonic()
    result = LabResult(run=lab_run, name=scenario.name, injected="")
    try:
        outcome = scenario.run(world)
        judged = score(outcome.expected, outcome.got, outcome.ignored, outcome.optional)
        result.injected = outcome.injected
        result.expected = verdict_counts(outcome.expected)
        result.got = verdict_counts(
            {k: v - (outcome.ignored - outcome.expected.get(k, set())) for k, v in outcome.got.items()}
        )
        result.false_alarms, result.misses, result.wrong = judged.false_alarms, judged.misses, judged.wrong[:50]
        result.detect_seconds = outcome.detect_s
        result.notes = outcome.notes + world.notes
    except Exception as exc:  # one scenario failing must not hide the others' results
        log.exception("lab scenario %s failed", scenario.name)
        result.error = f"{type(exc).__name__}: {exc}"
        result.notes = [*world.notes, traceback.format_exc(limit=3)[-2000:]]
    finally:
        try:
            world.cleanup()
        finally:
            cluster.heal()
    result.duration_seconds = time.monotonic() - started
    result.save()
    return result


def run_lab(
    scenarios: list[Scenario],
    options: Options,
    command: str,
    progress: Callable[[LabResult], None] | None = None,
    cluster: Cluster | None = None,
) -> LabRun:
    """Needs three brokers (LabError otherwise, before anything is stored)."""
    cluster = cluster or Cluster(bootstrap_servers())
    cluster.require_three()
    # The probed pipelines write their ledgers there, as an application set up for the auditor does.
    ensure_audit_topics({"bootstrap.servers": cluster.bootstrap})
    lab_run = LabRun.objects.create(started_at=timezone.now(), command=command, bootstrap_servers=cluster.bootstrap)
    started = time.monotonic()
    status = LabRun.FAILED
    try:
        for scenario in scenarios:
            result = run_scenario(scenario, cluster, options, lab_run)
            if progress:
                progress(result)
        status = LabRun.OK
    finally:
        lab_run.status = status
        lab_run.finished_at = timezone.now()
        lab_run.duration_seconds = time.monotonic() - started
        lab_run.save()
    return lab_run
