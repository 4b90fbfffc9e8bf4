"""spark_jobs/reconcile.py's entry point, with a fault injected at the end of one phase of the
run: records deleted with `delete_records` (retention's stand-in), then every executor of the
application killed with SIGKILL. The run itself is the real job, handed to spark-submit in
place of reconcile.py (tests/reconcile/test_cluster.py); the fault's moment is the only thing
chosen.

Environment: AUDITOR_TEST_FAULT_AFTER (a phase name of the run's `timings`),
AUDITOR_TEST_FAULT_BOOTSTRAP, AUDITOR_TEST_FAULT_DELETE ("topic:partition:before-offset",
comma-separated, optional), AUDITOR_TEST_FAULT_REPORT (a file: what was done, as JSON).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from spark_jobs import reconcile, reconcile_plan

_lap = reconcile_plan.Laps.__call__
_done: list[dict[str, object]] = []


def _executor_pids(app_id: str) -> list[int]:
    found = subprocess.run(
        ["pgrep", "-f", f"CoarseGrainedExecutorBackend.*{app_id}"], capture_output=True, text=True, check=False
    )
    return [int(pid) for pid in found.stdout.split()]


def _fault() -> dict[str, object]:
    deleted = []
    for item in filter(None, os.environ.get("AUDITOR_TEST_FAULT_DELETE", "").split(",")):
        topic, partition, before = item.rsplit(":", 2)
        admin = AdminClient({"bootstrap.servers": os.environ["AUDITOR_TEST_FAULT_BOOTSTRAP"]})
        for future in admin.delete_records([TopicPartition(topic, int(partition), int(before))]).values():
            future.result(30)
        deleted.append(item)
    session = SparkSession.getActiveSession()
    assert session is not None
    pids = _executor_pids(session.sparkContext.applicationId)
    for pid in pids:
        os.kill(pid, 9)
    deadline = time.monotonic() + 30
    while any(os.path.exists(f"/proc/{pid}") for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return {"deleted": deleted, "killed": pids}


def _faulty_lap(self: reconcile_plan.Laps, name: str) -> None:
    _lap(self, name)
    if name == os.environ["AUDITOR_TEST_FAULT_AFTER"] and not _done:
        _done.append(_fault())
        with open(os.environ["AUDITOR_TEST_FAULT_REPORT"], "w") as report:
            json.dump(_done[0], report)


reconcile_plan.Laps.__call__ = _faulty_lap  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(reconcile.main())
