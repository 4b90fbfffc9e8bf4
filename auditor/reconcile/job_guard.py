"""Keeps a spark-submit from outliving the process that started it (run as a script).

    python job_guard.py PARENT_PID TEMP_DIR COMMAND...

job.run_spark_submit starts this guard, and the guard starts COMMAND (spark-submit) in a
session of its own, so a signal to the worker's process group does not cut spark-submit
off halfway while its JVM and Python driver go on. The guard asks the kernel for SIGTERM
when its parent dies (PR_SET_PDEATHSIG: a worker killed with -9 included). On SIGTERM,
SIGINT or SIGHUP, or its parent found gone, it stops COMMAND's whole process group
(TERM, then KILL after GRACE_SECONDS) and removes TEMP_DIR, the private folder with the
resolved-secret binding file (its parent removes it on every path it lives through).
When COMMAND ends by itself the guard ends what it left in its group, and exits with its
status. Standard library only: it runs before, and without, Django.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time
from types import FrameType

PR_SET_PDEATHSIG = 1
GRACE_SECONDS = 5.0
POLL_SECONDS = 0.1

_stop_requested = False


def _request_stop(signum: int, frame: FrameType | None) -> None:
    global _stop_requested
    _stop_requested = True


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def _signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to the group; False when no process of it is left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    if _signal_group(proc.pid, signal.SIGTERM):
        deadline = time.monotonic() + GRACE_SECONDS
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
    _signal_group(proc.pid, signal.SIGKILL)  # the leader's children too, whether it left or not
    proc.wait()


def _exit_status(code: int) -> int:
    return 128 - code if code < 0 else code


def main(argv: list[str]) -> int:
    if len(argv) < 3 or not argv[0].isdigit():
        sys.stderr.write("usage: job_guard.py PARENT_PID TEMP_DIR COMMAND...\n")
        return 2
    parent, temp_dir, command = int(argv[0]), argv[1], argv[2:]
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _request_stop)
    _die_with_parent()
    if os.getppid() != parent:  # it died before the guard asked to be told
        shutil.rmtree(temp_dir, ignore_errors=True)
        return 1
    try:
        proc = subprocess.Popen(command, start_new_session=True)
    except OSError as exc:
        sys.stderr.write(f"cannot start {command[0]}: {exc}\n")
        return 127 if isinstance(exc, FileNotFoundError) else 126
    while proc.poll() is None and not _stop_requested:
        time.sleep(POLL_SECONDS)
    if _stop_requested:
        _stop_group(proc)
        shutil.rmtree(temp_dir, ignore_errors=True)
        return 128 + signal.SIGTERM
    _signal_group(proc.pid, signal.SIGKILL)  # whatever the job left running in its group
    return _exit_status(proc.returncode)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
