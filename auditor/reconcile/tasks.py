"""Reconciliation on the worker: beat's per-binding schedule, and runs queued from the UI or API."""

from __future__ import annotations

import logging

from celery import shared_task
from django.contrib.auth.models import User
from django.db import transaction

from auditor.pipelines.models import Binding
from auditor.reconcile import conf
from auditor.reconcile.models import ReconcileRun
from auditor.reconcile.service import RunInProgress, execute_run, fail_run, start_run

log = logging.getLogger(__name__)

# The job stops itself at RECONCILE_TIMEOUT_SECONDS; the task limit is a backstop past it.
TASK_TIME_LIMIT = conf.run_timeout_seconds() + 300


@shared_task(time_limit=TASK_TIME_LIMIT, soft_time_limit=TASK_TIME_LIMIT - 60)
def reconcile_binding_task(binding_id: int, trigger: str = ReconcileRun.SCHEDULE, full: bool = False) -> int | None:
    """Beat's entry point: run the binding now unless a run of it is in progress."""
    binding = Binding.objects.select_related("cluster", "source").filter(pk=binding_id).first()
    if binding is None:
        log.warning("reconcile: binding #%s no longer exists; its schedule is stale", binding_id)
        return None
    try:
        run = start_run(binding, trigger, full=full)
    except RunInProgress as exc:
        log.info("reconcile skipped: %s", exc)
        return None
    return execute_run(run, conf.runner()).pk


@shared_task(time_limit=TASK_TIME_LIMIT, soft_time_limit=TASK_TIME_LIMIT - 60)
def execute_run_task(run_id: int) -> str | None:
    """Run a run queued by "run now" or the API; its status, None when it no longer exists."""
    run = ReconcileRun.objects.filter(pk=run_id).first()
    if run is None:
        return None
    return execute_run(run, conf.runner()).status


def queue_run(binding: Binding, trigger: str, full: bool = False, requested_by: User | None = None) -> ReconcileRun:
    """Claim the binding now (RunInProgress if busy) and hand the run to a worker after commit."""
    run = start_run(binding, trigger, full=full, requested_by=requested_by)

    def send() -> None:
        try:
            execute_run_task.delay(run.pk)
        except Exception as exc:  # the broker being down is shown on the run
            log.exception("could not queue reconcile run %s", run.pk)
            fail_run(run, f"could not queue the run: the task queue is unreachable ({type(exc).__name__})")

    transaction.on_commit(send)
    return run
