"""The life of a reconciliation run: claim, run the job, publish its findings or its failure.

    run = start_run(binding, ReconcileRun.CLI)       # claim: RunInProgress if one is active
    run = execute_run(run)                           # queued → running → ok | failed

Two runs of one binding never overlap: a run is claimed by inserting its queued row, and
a unique partial index allows one queued-or-running row per binding. A queued run is
taken by one worker only (conditional UPDATE queued → running). A run that cannot read
something is marked failed with the error and publishes no findings; a successful run's
findings move from the staging table into Finding in the transaction that marks it ok.
"""

from __future__ import annotations

import logging
import os
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Max, QuerySet
from django.utils import timezone

from auditor.lib.claimants import claimant_alive, claimant_name
from auditor.lib.live import publish
from auditor.lib.secrets import MissingEnvError, mask_text
from auditor.pipelines.connectivity import ConnectivityError, check_cluster, check_source
from auditor.pipelines.incarnations import observe_topic_id
from auditor.pipelines.models import Binding
from auditor.pipelines.producers import cluster_send_outcome, observed_producers, processing_bounds
from auditor.pipelines.source_zone import SourceZoneError, source_zone
from auditor.reconcile import conf, job
from auditor.reconcile.alerting import sync_problems
from auditor.reconcile.models import (
    HEADER_COUNTS,
    LATE,
    UNVERIFIABLE,
    Finding,
    FindingStaging,
    ReconcileRun,
)
from auditor.vocabulary import FINDING_KINDS

log = logging.getLogger(__name__)

LIVE_GROUP = "reconcile"
FINDING_COLUMNS = (
    "kind",
    "key",
    "cause",
    "partition",
    "offset",
    "offsets",
    "timestamp",
    "session",
    "seq",
    "seq_end",
    "group",
    "evidence",
)


class RunInProgress(Exception):
    """The binding has a queued or running run already."""

    def __init__(self, binding: Binding, active: ReconcileRun | None) -> None:
        which = (
            f" (run #{active.pk}, {active.status} since {active.created_at:%Y-%m-%d %H:%M:%S} UTC)" if active else ""
        )
        super().__init__(f"binding {binding.name!r} has a reconciliation run in progress{which}")
        self.binding = binding
        self.active = active


class LoadError(RuntimeError):
    """The staged findings do not match what the job reported."""


def _publish(run: ReconcileRun) -> None:
    publish(LIVE_GROUP, "run", run.as_event())


def _worker_name() -> str:
    return claimant_name(os.getpid())


# --- claiming ------------------------------------------------------------------------------


def _abandoned_because(run: ReconcileRun, now: datetime) -> str | None:
    """Why an active run is taken for abandoned, or None while it may still be running.

    A queued run is judged by when it was queued (no job of it has started: failing it
    cannot put two jobs on one state; a worker that takes it later finds it failed). A running
    run is judged by its claimant when that process is on this host (dead: abandoned at once;
    alive: never), else by when it started against the job's own time limit plus a margin;
    never by when it was queued, as it may have waited in a busy queue.
    """
    limit = timedelta(seconds=conf.stale_after_seconds())
    if run.status == ReconcileRun.QUEUED:
        if run.created_at < now - limit:
            return f"abandoned: not started {limit.total_seconds():.0f}s after it was queued (its task was lost?)"
        return None
    alive = claimant_alive(run.claimed_by, run.started_at)
    if alive is False:
        return f"abandoned: the process that ran it ({run.claimed_by}) is gone"
    if alive is True:
        return None
    started = run.started_at or run.created_at
    if started < now - limit:
        return (
            f"abandoned: no result {limit.total_seconds():.0f}s after it started on {run.claimed_by or 'a worker'}"
            " (its worker stopped?)"
        )
    return None


def recover_stale_runs(binding: Binding) -> int:
    """Fail the binding's queued/running runs whose worker is gone (_abandoned_because),
    each judged again under its row lock so a run claimed meanwhile is left alone."""
    failed = 0
    for run in ReconcileRun.objects.filter(binding=binding, status__in=ReconcileRun.ACTIVE):
        if _abandoned_because(run, timezone.now()) is None:
            continue
        with transaction.atomic():
            locked = ReconcileRun.objects.select_for_update().select_related("binding").get(pk=run.pk)
            reason = _abandoned_because(locked, timezone.now()) if locked.status in ReconcileRun.ACTIVE else None
            if reason is None:
                continue
            _fail_locked(locked, reason)
        failed += 1
    return failed


def start_run(binding: Binding, trigger: str, full: bool = False, requested_by: User | None = None) -> ReconcileRun:
    """Claim the binding: create its queued run, or raise RunInProgress."""
    recover_stale_runs(binding)
    try:
        with transaction.atomic():
            run = ReconcileRun.objects.create(
                binding=binding, trigger=trigger, full=full, requested_by=requested_by, status=ReconcileRun.QUEUED
            )
    except IntegrityError:
        active = ReconcileRun.objects.filter(binding=binding, status__in=ReconcileRun.ACTIVE).first()
        raise RunInProgress(binding, active) from None
    _publish(run)
    return run


def claim_run(run: ReconcileRun) -> bool:
    """queued → running, for one worker only (a task delivered twice runs once)."""
    job_run_id = f"{timezone.now():%Y%m%dT%H%M%S}-{run.pk}-{uuid.uuid4().hex[:6]}"
    claimed = ReconcileRun.objects.filter(pk=run.pk, status=ReconcileRun.QUEUED).update(
        status=ReconcileRun.RUNNING, started_at=timezone.now(), claimed_by=_worker_name(), job_run_id=job_run_id
    )
    if claimed != 1:
        return False
    run.refresh_from_db()
    _publish(run)
    return True


# --- running -------------------------------------------------------------------------------


def execute_run(run: ReconcileRun, runner: str = conf.SUBMIT) -> ReconcileRun:
    """Run a queued run to its end, its job run by `runner` (conf.SUBMIT, IN_PROCESS or
    RESIDENT); never raises for a failed run (it is marked failed)."""
    if not claim_run(run):
        log.info("reconcile run %s was taken by another worker or finished", run.pk)
        run.refresh_from_db()
        return run
    binding = Binding.objects.select_related("cluster", "source").get(pk=run.binding_id)
    try:
        job_input = job.job_input(binding)
    except MissingEnvError as exc:
        return fail_run(run, f"binding {binding.name!r}: {exc}")
    try:
        check_cluster(binding.cluster, spark=True)
        check_source(binding.source)
    except ConnectivityError as exc:
        if exc.security:  # otherwise the job reports what it meets (a broker down, a source away)
            return fail_run(run, f"binding {binding.name!r}: {exc}")
        reachable = False
    else:
        reachable = True
    # One read of the clients topic: how long the cluster's probed producers retry a send (the
    # job judges none sooner), and how long each probed consumer session may still be
    # processing what its commits passed (its max.poll.interval.ms: the job waits that long).
    reported = observed_producers(binding.cluster.client_config()) if reachable else None
    job_input.payload["send_outcome_ms"], note = cluster_send_outcome(
        binding.cluster, read=reachable, observed=None if reported is None else reported.outcome
    )
    if note:
        log.info("reconcile run %s of %s: %s", run.pk, binding.name, note)
    job_input.payload["processing_bound_ms"], job_input.payload["session_bounds_ms"] = processing_bounds(
        {} if reported is None else reported.poll_intervals_ms
    )
    # A created column without a time zone is read in the binding's zone or the database's.
    try:
        job_input.payload["timestamp_zone"] = source_zone(binding)
    except SourceZoneError as exc:
        return fail_run(run, str(exc))
    try:
        if runner == conf.RESIDENT:
            from auditor.reconcile.resident import run_resident  # deferred: loads pyspark

            result = run_resident(job_input, run.job_run_id, run.full)
        elif runner == conf.IN_PROCESS:
            result = job.run_in_process(job_input, run.job_run_id, run.full)
        else:
            result = job.run_spark_submit(job_input, run.job_run_id, run.full)
    except Exception as exc:  # any failure fails the run, with its error
        log.exception("reconcile run %s crashed", run.pk)
        result = job.failed(job_input.scrub(f"{type(exc).__name__}: {exc}"))
    except BaseException:  # Ctrl-C on the CLI, a worker shutting down: do not leave it "running"
        fail_run(run, "interrupted before the job finished")
        raise
    try:
        return finish_run(run, result)
    except Exception as exc:  # a run whose result could not be published must not stay "running"
        log.exception("reconcile run %s: publishing its result failed", run.pk)
        return fail_run(run, job_input.scrub(f"publishing the result failed: {type(exc).__name__}: {exc}"))
    except BaseException:
        fail_run(run, "interrupted while its result was published")
        raise


def _staged(run: ReconcileRun) -> QuerySet[FindingStaging]:
    return FindingStaging.objects.filter(run_id=run.job_run_id)


def _move_staged_findings(run: ReconcileRun) -> int:
    """INSERT … SELECT the run's staged findings into Finding; returns how many."""
    quote = connection.ops.quote_name
    columns = ", ".join(quote(c) for c in FINDING_COLUMNS)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quote(Finding._meta.db_table)} (run_id, binding_id, {columns}, is_new) "
            f"SELECT %s, %s, {columns}, coalesce(is_new, false) FROM {quote(FindingStaging._meta.db_table)} "
            "WHERE run_id = %s",
            [run.pk, run.binding_id, run.job_run_id],
        )
        moved = cursor.rowcount
    _staged(run).delete()
    return moved


def _cause_counts(run: ReconcileRun) -> list[dict[str, Any]]:
    """The run's findings per (kind, cause), kept on the run: prune_findings deletes the rows of
    all but the newest RECONCILE_KEEP_FINDING_RUNS runs, often before a daily report is built."""
    rows = Finding.objects.filter(run=run).values("kind", "cause").annotate(count=Count("id")).order_by("kind", "cause")
    return [{"kind": r["kind"], "cause": r["cause"], "count": r["count"]} for r in rows]


def _apply_result(run: ReconcileRun, result: dict[str, Any]) -> None:
    run.finished_at = timezone.now()
    duration = result.get("duration_s")
    if duration is None and run.started_at:
        duration = (run.finished_at - run.started_at).total_seconds()
    run.duration_seconds = duration
    run.mode = str(result.get("mode") or "")
    run.window = result.get("window") or {}
    run.offset_ranges = result.get("offset_ranges") or {}
    run.records_read = int(result.get("records_read") or 0)
    run.warnings = list(result.get("warnings") or [])
    run.timings = result.get("timings") or {}


def finish_run(run: ReconcileRun, result: dict[str, Any]) -> ReconcileRun:
    """Publish a finished job's result: its findings appear at once, or the run fails."""
    if result.get("status") != "ok":
        return fail_run(run, str(result.get("error") or "the job failed without saying why"), result)
    counts = {name: int(n) for name, n in (result.get("counts") or {}).items()}
    total_findings = sum(counts.get(kind, 0) for kind in FINDING_KINDS)
    try:
        with transaction.atomic():
            locked = ReconcileRun.objects.select_for_update().select_related("binding").get(pk=run.pk)
            if locked.status != ReconcileRun.RUNNING:
                _staged(locked).delete()
                log.warning("reconcile run %s finished after it was marked %s", run.pk, locked.status)
                return locked
            moved = _move_staged_findings(locked)
            if moved != total_findings:
                raise LoadError(
                    f"findings load incomplete: the job counted {total_findings}, the staging table held {moved}"
                )
            _apply_result(locked, result)
            locked.status = ReconcileRun.OK
            locked.counts = {name: counts.get(name, 0) for name in (*FINDING_KINDS, UNVERIFIABLE, LATE, *HEADER_COUNTS)}
            locked.new_findings = int(result.get("new_findings") or 0)
            locked.cause_counts = _cause_counts(locked)
            locked.save()
            _publish(locked)
            # In the run's transaction: a run is never published without its alerts (sync_problems
            # itself logs, and never raises for, a problem it could not raise or resolve).
            sync_problems(locked)
    except LoadError as exc:
        return fail_run(run, str(exc), result)
    if result.get("topic_id") and locked.started_at:
        # the id the job read before its reads: what later diagnoses compare theirs with
        observe_topic_id(locked.binding.cluster, locked.binding.topic, str(result["topic_id"]), locked.started_at)
    prune_findings(locked.binding)
    return locked


def fail_run(run: ReconcileRun, error: str, result: dict[str, Any] | None = None) -> ReconcileRun:
    """Mark the run failed with ``error``; whatever it staged is discarded."""
    with transaction.atomic():
        locked = ReconcileRun.objects.select_for_update().select_related("binding").get(pk=run.pk)
        if locked.status not in ReconcileRun.ACTIVE:
            if locked.job_run_id:
                _staged(locked).delete()
            return locked
        _fail_locked(locked, error, result)
    return locked


def _fail_locked(locked: ReconcileRun, error: str, result: dict[str, Any] | None = None) -> None:
    """fail_run's work on a row already locked in the caller's transaction and still active."""
    if locked.job_run_id:
        _staged(locked).delete()
    _apply_result(locked, result or {})
    locked.status = ReconcileRun.FAILED
    locked.error = mask_text(error)[:10_000]  # a last guard: the callers mask what they know of
    locked.counts = {}
    locked.save()
    _publish(locked)
    log.warning("reconcile run %s of %s failed: %s", locked.pk, locked.binding.name, locked.error)


# --- after a run -----------------------------------------------------------------------------


def prune_findings(binding: Binding) -> int:
    """Delete the findings of all but the newest successful runs (their counts stay)."""
    ids = list(
        ReconcileRun.objects.filter(binding=binding, status=ReconcileRun.OK, findings_pruned=False)
        .order_by("-id")
        .values_list("id", flat=True)
    )
    old = ids[conf.keep_finding_runs() :]
    if not old:
        return 0
    with transaction.atomic():
        deleted, _ = Finding.objects.filter(run_id__in=old).delete()
        ReconcileRun.objects.filter(id__in=old).update(findings_pruned=True)
    return deleted


def current_run_ids(binding: Binding | None = None) -> list[int]:
    """The latest successful run of each binding: its findings are the binding's current ones."""
    runs = ReconcileRun.objects.filter(status=ReconcileRun.OK)
    if binding is not None:
        runs = runs.filter(binding=binding)
    return list(runs.values("binding").annotate(last=Max("id")).values_list("last", flat=True))
