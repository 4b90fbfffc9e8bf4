"""Find the stuck keys' records in the topic and their entries in the ledgers.

Two engines give the same LocateResult:

- ``python``: confluent-kafka consumers stream the ranges; only matches are kept, so
  memory follows the stuck items, never the topic. For small topics (no JVM start).
- ``spark``: spark_jobs/stuck_locate.py joins the topic and the ledgers with the stuck keys
  (broadcast) on the executors; the driver receives only the matches. In-process with a
  given SparkSession, else as a subprocess (``python spark_jobs/stuck_locate.py``).

``auto`` picks Spark when the ranges to read exceed AUDITOR_STUCK_SPARK_THRESHOLD records.

The topic is read twice only where it has to be: the read_committed view up to the last
stable offset first; the read_uncommitted view when a partition shows offset holes
(transaction markers or aborted records) or has an open transaction.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from auditor.lib.secrets import mask_text
from auditor.probes.config import MASK, is_secret_key
from auditor.reconcile import conf as reconcile_conf
from auditor.stuck.locate_python import locate_with_python
from auditor.stuck.locate_request import LocateError, LocateRequest, LocateResult
from spark_jobs.kafka_security import explain

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
SPARK_JOB = REPO_ROOT / "spark_jobs" / "stuck_locate.py"
# On one 2-core host the Python engine reads ~300k records/s, faster than local Spark up to
# a few million records; past that (and on a Spark cluster) Spark wins and scales out.
DEFAULT_SPARK_THRESHOLD = 2_000_000
ENGINES = ("auto", "python", "spark")


def choose_engine(engine: str, records_to_read: int) -> str:
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine != "auto":
        return engine
    threshold = int(os.environ.get("AUDITOR_STUCK_SPARK_THRESHOLD", DEFAULT_SPARK_THRESHOLD))
    return "spark" if records_to_read > threshold else "python"


def locate(request: LocateRequest, engine: str = "auto", spark: Any = None) -> LocateResult:
    chosen = choose_engine(engine, request.records_to_read)
    if not request.keys:
        return LocateResult(engine=chosen)
    if request.records_to_read == 0:
        # The key index stands in for the whole topic and the ledgers are empty: nothing is
        # read, so no engine (no Spark job, no JVM) has to start; the known records stand.
        result = locate_with_python(request)
        result.engine = chosen
        return result
    if chosen == "python":
        return locate_with_python(request)
    if spark is not None:
        from spark_jobs.stuck_locate import locate_json  # deferred: it imports pyspark

        return LocateResult.from_json(locate_json(spark, request.to_json()))
    return locate_with_spark_subprocess(request)


def locate_with_spark_subprocess(request: LocateRequest, timeout_s: float = 3600) -> LocateResult:
    """Run spark_jobs/stuck_locate.py in its own process (its own JVM), exchanging JSON files."""
    with tempfile.TemporaryDirectory(prefix="auditor-stuck-") as folder:
        keys_path = Path(folder) / "keys.jsonl"
        with keys_path.open("w", encoding="utf-8") as out:
            for key in request.keys:
                out.write(json.dumps({"key": key}) + "\n")
        request_path = Path(folder) / "request.json"
        # The request carries the cluster's resolved secrets: readable by the owner only.
        descriptor = os.open(request_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(json.dumps(request.to_json(str(keys_path))))
        output_path = Path(folder) / "result.json"
        env = dict(os.environ)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        completed = subprocess.run(
            [
                sys.executable,
                str(SPARK_JOB),
                "--request",
                str(request_path),
                "--output",
                str(output_path),
                # the master reconciliation runs on: a Spark cluster serves the stuck engine too
                "--master",
                reconcile_conf.spark_master(),
            ],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if completed.returncode != 0 or not output_path.exists():
            tail = failure_tail(completed.stderr or completed.stdout or "", request.kafka_config)
            raise LocateError(f"the Spark locate job failed (exit {completed.returncode}): {explain(tail)}")
        return LocateResult.from_json(json.loads(output_path.read_text()))


def failure_tail(output: str, kafka_config: dict[str, Any]) -> str:
    """The last lines of a failed locate job's output, fit to store and show: each secret
    setting's whole value masked, and any password the output quotes by itself (a JVM error
    may quote part of a sasl.jaas.config: password="…") or in a URL's user info."""
    tail = " | ".join(output.strip().splitlines()[-5:])
    for key, value in kafka_config.items():
        if is_secret_key(str(key)) and value:
            tail = tail.replace(str(value), MASK)
    return mask_text(tail)
