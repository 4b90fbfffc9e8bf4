"""A Spark standalone cluster for tests: a master and one worker from the pyspark
distribution (nothing downloaded), each in its own process group, stopped by the caller.

`private_dir` starts the worker in a mount namespace of its own with an empty tmpfs over that
folder: its executors write there to a disk the driver does not see, as on a cluster whose
nodes do not share a local path.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from auditor.reconcile.job import spark_submit_path
from tests.support.live import free_port


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _alive_workers(webui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{webui_port}/json/", timeout=2) as answer:
            state = json.load(answer)
    except (urllib.error.HTTPError, json.JSONDecodeError):
        return 0  # the master's web UI listens before its /json/ handler is there (404, or an empty body)
    return sum(1 for worker in state.get("workers", []) if worker.get("state") == "ALIVE")


@contextmanager
def standalone_cluster(work: Path, private_dir: Path | None = None) -> Iterator[str]:
    """A master and one worker (2 cores, 1 GiB) logging into `work`; yields the master's URL."""
    home = spark_submit_path().parent.parent
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOG_DIR=str(work), SPARK_WORKER_DIR=str(work / "worker"))
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    port, ui, worker_ui = free_port(), free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = str(home / "bin" / "spark-class")
    procs: list[subprocess.Popen[bytes]] = []

    def start(args: list[str], log_name: str) -> None:
        with open(work / log_name, "wb") as log:
            procs.append(subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    try:
        master = "org.apache.spark.deploy.master.Master"
        start([spark_class, master, "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)], "master.log")
        deadline = time.monotonic() + 90
        while not (_listening(port) and _listening(ui)):
            assert procs[0].poll() is None, (work / "master.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the Spark master did not start in 90 s"
            time.sleep(0.5)
        worker = [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1"]
        worker += ["--cores", "2", "--memory", "1g", "--webui-port", str(worker_ui), "--work-dir", str(work / "worker")]
        if private_dir is not None:
            private_dir.mkdir(parents=True, exist_ok=True)
            hide = 'mount -t tmpfs auditor-test-private "$0" && exec "$@"'
            worker = ["unshare", "--mount", "--propagation", "private", "sh", "-c", hide, str(private_dir), *worker]
        start(worker, "worker.log")
        while _alive_workers(ui) < 1:
            assert procs[1].poll() is None, (work / "worker.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the Spark worker did not register in 90 s"
            time.sleep(0.5)
        yield url
    finally:
        for proc in reversed(procs):
            try:
                os.killpg(proc.pid, 15)
                proc.wait(20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, 9)
