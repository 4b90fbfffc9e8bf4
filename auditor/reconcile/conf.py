"""Reconciliation settings.

Each is read from django.conf.settings when settings.py declares it, else from the
same-named environment variable (strict helpers of auditor.lib.env), so the worker, the
CLI and the web server agree. SPARK_MASTER and SPARK_JARS_DIR are project settings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from auditor.lib.env import envint, envstr
from spark_jobs.state_location import StateLocation, StateLocationError

STAGING_TABLE = "reconcile_finding_staging"

# How a run's Spark job is run (execute_run): a fresh spark-submit per run, in the calling
# process's SparkSession (the CLI's --in-process, tests), or in the reconciler worker's
# resident session (resident.py).
SUBMIT, IN_PROCESS, RESIDENT = "submit", "in-process", "resident"
WORKER_RUNNERS = (SUBMIT, RESIDENT)
RECONCILE_TASKS = ("auditor.reconcile.tasks.reconcile_binding_task", "auditor.reconcile.tasks.execute_run_task")


def _setting(name: str, default: Any, read_env: Any) -> Any:
    value = getattr(settings, name, None)
    return read_env(name, default) if value is None else value


def state_location() -> StateLocation:
    """The job's incremental state, one folder per binding: a local path (local[*]), or where
    a Spark cluster's driver and executors and this process all reach it (a shared mount, or
    a URI such as s3a://bucket/reconcile-state; spark_jobs/state_location.py).
    StateLocationError names a malformed or unsupported value."""
    value = _setting("RECONCILE_STATE_DIR", str(settings.BASE_DIR / "var" / "reconcile-state"), envstr)
    try:
        return StateLocation(value)
    except StateLocationError as exc:
        raise StateLocationError(f"RECONCILE_STATE_DIR: {exc}") from exc


def run_timeout_seconds() -> int:
    """A run still going after this long is killed and marked failed."""
    return int(_setting("RECONCILE_TIMEOUT_SECONDS", 3000, envint))


def stale_after_seconds() -> int:
    """A queued or running run older than this is taken for abandoned (its worker died)."""
    return run_timeout_seconds() + 600


def keep_finding_runs() -> int:
    """Successful runs per binding whose findings are kept (older ones keep their counts only)."""
    return max(1, int(_setting("RECONCILE_KEEP_FINDING_RUNS", 10, envint)))


def driver_memory() -> str:
    """spark-submit --driver-memory; empty: Spark's default."""
    return str(_setting("RECONCILE_DRIVER_MEMORY", "", envstr))


def resident_max_runs() -> int:
    """RECONCILE_RESIDENT_MAX_RUNS: runs one resident driver runs before it is stopped and a
    new one started for the next run (a safety net against what a long-lived JVM gathers); 0:
    never."""
    value = int(_setting("RECONCILE_RESIDENT_MAX_RUNS", 500, envint))
    if value < 0:
        raise ImproperlyConfigured(f"RECONCILE_RESIDENT_MAX_RUNS: {value} is negative (0 keeps one driver for good)")
    return value


def spark_master() -> str:
    return str(getattr(settings, "SPARK_MASTER", "local[*]"))


def spark_jars_dir() -> Path:
    return Path(getattr(settings, "SPARK_JARS_DIR", settings.BASE_DIR / ".cache" / "spark" / "jars"))


def runner() -> str:
    """RECONCILE_RUNNER: how the worker runs reconciliations. `submit` (default): a fresh
    spark-submit per run, each its own driver JVM. `resident`: on the reconciler worker, one
    SparkSession kept across runs (resident.py); stack/run.sh starts that worker."""
    value = str(getattr(settings, "RECONCILE_RUNNER", SUBMIT)).strip()
    if value not in WORKER_RUNNERS:  # settings.py reads the environment strictly; this is an override
        raise ImproperlyConfigured(f"RECONCILE_RUNNER: {value!r} is not one of {', '.join(WORKER_RUNNERS)}")
    return value


def reconciler_queue() -> str:
    """The queue the reconciler worker takes, beside this checkout's default queue."""
    return f"{settings.CELERY_TASK_DEFAULT_QUEUE}.reconcile"


def route_task(name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **_: Any) -> dict[str, str] | None:
    """Celery router (CELERY_TASK_ROUTES): reconciliations go to the reconciler's queue when
    they run resident; everything else to the default queue."""
    if name in RECONCILE_TASKS and runner() == RESIDENT:
        return {"queue": reconciler_queue()}
    return None
