"""spark_jobs/reconcile.py's entry point, with a fault injected at the end of one phase of the
run: records deleted with `delete_records` (retention's stand-in), and executors of the
application taken away. The run itself is the real job, handed to spark-submit in place of
reconcile.py (tests/reconcile/test_cluster.py); the faults' moments and kinds are the only
things chosen.

Environment:
- AUDITOR_TEST_FAULT_AFTER: a phase name of the run's `timings`, or `watch_started`: when the
  run's executor watch began (spark_jobs/executor_loss.py), before anything is cached;
- AUDITOR_TEST_FAULT_KILL: how the executors go: `sigkill` (default: every executor's process
  killed with SIGKILL; the master starts another), `sigkill-twice` (then its replacement too,
  once registered, before any phase sees it), `driver` (each removed by the driver,
  SparkContext.killExecutor, as dynamic allocation removes an idle one, and another asked for);
- AUDITOR_TEST_FAULT_DELETE ("topic:partition:before-offset", comma-separated, optional) and
  AUDITOR_TEST_FAULT_DELETE_AFTER (a phase name; default AUDITOR_TEST_FAULT_AFTER);
- AUDITOR_TEST_FAULT_BOOTSTRAP, AUDITOR_TEST_FAULT_REPORT (a file: what was done, as JSON:
  `deleted`, `killed` (pids), `executors` (the ids taken away, with the cached blocks each
  held then as the driver's status store counted them)).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from spark_jobs import executor_loss, reconcile, reconcile_plan

_lap = reconcile_plan.Laps.__call__
_report: dict[str, Any] = {"deleted": [], "killed": [], "executors": {}}
_done: set[str] = set()


def _executor_pids(app_id: str) -> list[int]:
    found = subprocess.run(
        ["pgrep", "-f", f"CoarseGrainedExecutorBackend.*{app_id}"], capture_output=True, text=True, check=False
    )
    return [int(pid) for pid in found.stdout.split()]


def _executor_ids(sc: Any) -> set[str]:
    return {i for i in str(sc.getExecutorIds().mkString(",")).split(",") if i}


def _cached_blocks(sc: Any) -> dict[str, int]:
    listed = sc.statusStore().executorList(True)
    return {str(listed.apply(n).id()): int(listed.apply(n).rddBlocks()) for n in range(listed.size())}


def _wait(until: Any, what: str) -> None:
    deadline = time.monotonic() + 60
    while not until():
        assert time.monotonic() < deadline, f"the fault harness waited 60 s for {what}"
        time.sleep(0.1)


def _delete() -> None:
    for item in filter(None, os.environ.get("AUDITOR_TEST_FAULT_DELETE", "").split(",")):
        topic, partition, before = item.rsplit(":", 2)
        admin = AdminClient({"bootstrap.servers": os.environ["AUDITOR_TEST_FAULT_BOOTSTRAP"]})
        for future in admin.delete_records([TopicPartition(topic, int(partition), int(before))]).values():
            future.result(30)
        _report["deleted"].append(item)


def _take_executors_away(kind: str) -> None:
    session = SparkSession.getActiveSession()
    assert session is not None
    for _ in range(2 if kind == "sigkill-twice" else 1):
        _take_away_once(session.sparkContext._jsc.sc(), session.sparkContext.applicationId, kind)


def _take_away_once(sc: Any, app_id: str, kind: str) -> None:
    before = _executor_ids(sc)
    _report["executors"].update({i: n for i, n in _cached_blocks(sc).items() if i in before})
    if kind == "driver":
        for executor_id in sorted(before):
            assert sc.killExecutor(executor_id), f"the driver did not kill executor {executor_id}"
        sc.requestExecutors(len(before))  # a kill through the driver lowers the target: no replacement
    else:
        pids = _executor_pids(app_id)
        for pid in pids:
            os.kill(pid, 9)
        _report["killed"] += pids
        _wait(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in pids), "the killed executors to end")

    def replaced() -> bool:  # gone from the scheduler, and another registered (the run waits for one anyway)
        now = _executor_ids(sc)
        return bool(now) and not now & before

    _wait(replaced, "a replacement executor")


def _fault(moment: str) -> None:
    if moment == os.environ.get("AUDITOR_TEST_FAULT_DELETE_AFTER", os.environ["AUDITOR_TEST_FAULT_AFTER"]):
        _delete()
    if moment == os.environ["AUDITOR_TEST_FAULT_AFTER"]:
        _take_executors_away(os.environ.get("AUDITOR_TEST_FAULT_KILL", "sigkill"))
    if moment in (os.environ["AUDITOR_TEST_FAULT_AFTER"], os.environ.get("AUDITOR_TEST_FAULT_DELETE_AFTER")):
        with open(os.environ["AUDITOR_TEST_FAULT_REPORT"], "w") as report:
            json.dump(_report, report)


def _faulty_lap(self: reconcile_plan.Laps, name: str) -> None:
    _lap(self, name)
    if name not in _done:
        _done.add(name)
        _fault(name)


class _FaultyWatch(executor_loss.ExecutorWatch):
    def __init__(self, spark: SparkSession) -> None:
        super().__init__(spark)
        _fault("watch_started")


reconcile_plan.Laps.__call__ = _faulty_lap  # type: ignore[method-assign]
reconcile.ExecutorWatch = _FaultyWatch  # type: ignore[misc]

if __name__ == "__main__":
    sys.exit(reconcile.main())
