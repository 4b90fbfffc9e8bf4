"""Processes a test session starts beside itself (ASGI server, Celery workers, beat), each
logging to var/test-logs/<name>.log (var/test-logs/<worker>/ under pytest-xdist)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def daphne(env: dict[str, str], name: str = "daphne") -> Iterator[str]:
    """Daphne serving the real ASGI app (HTTP and websockets) with `env`, on a free port: its URL."""
    port = free_port()
    procs = LiveProcesses(env)
    procs.start(name, [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "auditor.asgi:application"])

    def answers() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            return False

    try:
        wait_until(answers, 60, "Daphne to listen")
    except AssertionError:
        procs.stop()
        raise AssertionError("Daphne did not start:\n" + procs.log_text(name)) from None
    try:
        # Daphne names its host in ALLOWED_HOSTS checks: 127.0.0.1 is allowed by default.
        yield f"http://127.0.0.1:{port}"
    finally:
        procs.stop()


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
