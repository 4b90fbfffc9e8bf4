"""The resident driver: one SparkSession that the reconciler worker keeps across runs.

Through spark-submit (RECONCILE_RUNNER=submit, the default) every run starts a JVM, loads
Spark's classes and compiles the job's generated code again: a run of a small binding that
has read nothing new took 22.7 s there, against 6.3-8.0 s for the same run in a session that
had run it before. With RECONCILE_RUNNER=resident the worker that takes the reconcile queue
(stack/run.sh's `reconciler`: a Celery worker with the solo pool, so one run at a time, in
its main thread) runs each job here, in the same session:

* A run still going after RECONCILE_TIMEOUT_SECONDS has its Spark jobs cancelled (its job
  group, again every second until the run gives up) and is failed. It commits nothing: the
  state's pointer is written last, and the run checks its deadline at every phase and just
  before that write (RunOptions.cancelled), so a run whose Spark jobs each finished between
  two cancellations, or which was between jobs when the deadline passed, stops all the same.
* A session whose JVM died (killed, out of memory) is found dead before the next run and
  built again; the run that was going fails with the error its driver saw.
* The session's cache is cleared after every run.
* A driver that has run RECONCILE_RESIDENT_MAX_RUNS runs (default 500) is stopped, its JVM
  with it, before the next run, which starts a new one: a safety net against whatever a
  long-lived JVM accumulates (its heap's low points were flat over a 100-run soak once Spark
  stopped cloning a session per cached query, SESSION_SETTINGS), like Celery's
  max-tasks-per-child, which the reconciler's solo pool does not honour.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from auditor.reconcile import conf
from auditor.reconcile.job import JobInput, failed, run_in_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

APP_NAME = "auditor-reconciler"
CANCEL_EVERY_SECONDS = 1.0
# Each run's Kafka reads use a group id of their own, so no later run reuses the consumers
# (and fetched records) Spark's pool keeps idle for 5 minutes by default: a run every few
# seconds filled it past its soft limit (warned 95 times in a 250-run soak) and the heap
# after GC rose with it. Evicted after 20 s idle, the soak's heap rose less (stop 42). A full
# pool also closes its oldest idle consumers inside the task that borrows the next one, and
# closing one that fetched from a frozen broker waits a request timeout there.
KAFKA_POOL_SETTINGS = {
    "spark.kafka.consumer.cache.timeout": "20s",
    "spark.kafka.consumer.cache.evictorThreadRunInterval": "10s",
    "spark.kafka.consumer.fetchedData.cache.timeout": "20s",
    "spark.kafka.consumer.fetchedData.cache.evictorThreadRunInterval": "10s",
}
# Settings of a driver that lives for days. Its status store retains past jobs, stages and
# SQL executions (a reconciliation runs some 20-45 jobs, and Spark keeps 1,000 of each by
# default): a few runs' worth is enough for anyone looking.
SESSION_SETTINGS = {
    "spark.ui.retainedJobs": "200",
    "spark.ui.retainedStages": "200",
    "spark.sql.ui.retainedExecutions": "50",
    **KAFKA_POOL_SETTINGS,
    # Spark plans a query it caches with these two off: when either is on in the session, it
    # clones the session to plan it (CacheManager.getOrCloneSessionWithConfigsOff), and Spark
    # 4.0.0 never frees the clone, its ArtifactManager's cleaner holds it (SPARK-54753, fixed
    # in 4.0.2 and 4.1.1; yet on 4.1.1 the clones still stay: 7 live after three runs without
    # these settings, 1 with them, stop 44). This driver kept three more sessions a run (each
    # reconciliation caches some frames), which is what its heap after GC grew by (stop 43).
    # Off for good in this session, the cached queries are planned as in the clones, and no
    # clone is made. For a query it does not cache, AQE then leaves the last stage's
    # partitions uncoalesced.
    "spark.sql.sources.bucketing.autoBucketedScan.enabled": "false",
    "spark.sql.adaptive.applyFinalStageShuffleOptimizations": "false",
}

_lock = threading.Lock()
_session: SparkSession | None = None
_runs = 0  # runs the current session has run
JVM_EXIT_SECONDS = 30.0


def _jvm_alive() -> bool:
    """The driver JVM that PySpark launched still answers."""
    from py4j.protocol import Py4JError
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return False
    proc = getattr(gateway, "proc", None)  # the JVM PySpark started (spark-submit execs java)
    if proc is not None and proc.poll() is not None:
        return False
    try:
        gateway.jvm.java.lang.System.currentTimeMillis()
    except (Py4JError, OSError):
        return False
    return True


def _forget_dead_driver() -> None:
    """Drop PySpark's handles on a JVM that is gone, so the next session launches a new one."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession, SQLContext

    context = SparkContext._active_spark_context
    if context is not None:
        server = getattr(context, "_accumulatorServer", None)
        if server is not None:
            server.shutdown()
    gateway = SparkContext._gateway
    if gateway is not None:
        try:
            gateway.close()
        except Exception:  # noqa: BLE001 - its sockets may be half gone already
            log.debug("closing the dead driver's gateway failed", exc_info=True)
    SparkContext._active_spark_context = None
    SparkContext._gateway = None
    SparkContext._jvm = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    SQLContext._instantiatedContext = None


def _retire(spark: SparkSession) -> None:
    """Stop the session and the driver JVM PySpark launched for it, then drop PySpark's
    handles, so that the next session launches a new JVM with an empty heap."""
    from pyspark import SparkContext

    try:
        spark.stop()
    except Exception:  # noqa: BLE001 - its JVM is ended below all the same
        log.warning("reconciler: stopping the retired session failed", exc_info=True)
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if proc is not None:
        # PySpark's gateway JVM exits when its stdin closes (it reads it until end of file).
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(JVM_EXIT_SECONDS)
        except subprocess.TimeoutExpired:
            log.warning("reconciler: the retired driver JVM (pid %s) did not exit; killing it", proc.pid)
            proc.kill()
            proc.wait(JVM_EXIT_SECONDS)
    _forget_dead_driver()


def session() -> tuple[SparkSession, bool]:
    """The resident session for the next run, built when there is none, its driver died or it
    has run RECONCILE_RESIDENT_MAX_RUNS runs; (session, built now)."""
    global _session, _runs
    from spark_jobs.common import build_spark_session

    with _lock:
        limit = conf.resident_max_runs()  # read before every run: a bad value fails each one
        if _session is not None:
            if not _jvm_alive():
                log.warning("reconciler: the resident Spark driver is gone; starting a new one")
                _forget_dead_driver()
            elif _session.sparkContext._jsc.sc().isStopped():
                log.warning("reconciler: the resident Spark driver is gone; starting a new one")
                _session.stop()
            elif limit and _runs >= limit:
                log.info(
                    "reconciler: the resident Spark driver ran %d runs (RECONCILE_RESIDENT_MAX_RUNS); starting a new one",
                    _runs,
                )
                _retire(_session)
            else:
                return _session, False
            _session = None
        memory = conf.driver_memory()
        settings = SESSION_SETTINGS | ({"spark.driver.memory": memory} if memory else {})
        _session = build_spark_session(APP_NAME, master=conf.spark_master(), settings=settings)
        _runs = 0
        return _session, True


@contextmanager
def deadline(spark: SparkSession, group: str, seconds: float) -> Iterator[threading.Event]:
    """Run the block's Spark jobs in job group `group`; past `seconds` they are cancelled, and
    any it starts after that too. The event yielded is set once the deadline passed."""
    context = spark.sparkContext
    passed, done = threading.Event(), threading.Event()

    def cancel() -> None:
        if done.wait(seconds):
            return
        passed.set()
        log.warning("reconciler: run %s went past %.0fs; cancelling its Spark jobs", group, seconds)
        while True:
            try:
                context.cancelJobGroup(group)
            except Exception:  # noqa: BLE001 - a dead driver fails the run by itself
                log.debug("cancelling job group %s failed", group, exc_info=True)
            if done.wait(CANCEL_EVERY_SECONDS):
                return

    context.setJobGroup(group, f"reconciliation run {group}", interruptOnCancel=True)
    watchdog = threading.Thread(target=cancel, name=f"deadline-{group}", daemon=True)
    watchdog.start()
    try:
        yield passed
    finally:
        done.set()
        watchdog.join()
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        context.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]


def run_resident(job: JobInput, job_run_id: str, full: bool, timeout: float | None = None) -> dict[str, Any]:
    """The job in the resident session, stopped at `timeout` (RECONCILE_TIMEOUT_SECONDS)."""
    global _runs
    timeout = timeout or conf.run_timeout_seconds()
    started = time.monotonic()
    spark, built = session()
    driver_start = time.monotonic() - started
    _runs += 1
    with deadline(spark, job_run_id, timeout) as passed:
        result = run_in_session(lambda: spark, job, job_run_id, full, cancelled=passed)
    if passed.is_set() and result.get("status") != "ok":
        result = failed(
            f"the run went on longer than {timeout:.0f}s (RECONCILE_TIMEOUT_SECONDS): its Spark jobs were "
            f"cancelled and nothing was committed ({result.get('error')})"
        )
    if built:
        result.setdefault("timings", {})["driver_start"] = round(driver_start, 3)
    try:
        spark.catalog.clearCache()
    except Exception:  # noqa: BLE001 - a driver that died now is found and replaced before the next run
        log.warning("reconciler: clearing the session's cache failed", exc_info=True)
    return result
