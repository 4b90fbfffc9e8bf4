"""Processes a test session starts beside itself (ASGI server, Celery workers, beat), each
logging to var/test-logs/<name>.log (var/test-logs/<worker>/ under pytest-xdist)."""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import ROOT, TEST_LOGS
from tests.support.waiting import wait_until


class LiveProcesses:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs = TEST_LOGS
        self.logs.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.logs / f"{name}.log", "wb")
        proc = subprocess.Popen(args, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.procs[name] = proc
        return proc

    def log_text(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def start_celery_worker(procs: LiveProcesses, name: str, node: str, queue: str, pool: str, concurrency: int) -> None:
    """An auditor Celery worker taking `queue`, started as `name` and waited for until its node
    answers a ping (else stopped, and an AssertionError carries its log)."""
    from auditor.celery import app

    procs.start(
        name,
        [sys.executable, "-m", "celery", "-A", "auditor", "worker", f"--pool={pool}", f"--concurrency={concurrency}",
         "-n", node, "--loglevel=INFO", "--without-mingle", "--without-gossip", "-Q", queue],
    )  # fmt: skip
    try:
        wait_until(lambda: bool(app.control.ping([node], timeout=0.5)), 60, f"the {name} to answer a ping")
    except AssertionError:
        procs.stop()
        raise AssertionError(f"the {name} did not start:\n" + procs.log_text(name)) from None
