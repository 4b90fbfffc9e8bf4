"""Which process claimed a piece of work, and whether it still runs: the one way reconcile
runs (``claimed_by``) and stuck diagnoses (their lock) name their claimant and judge it.

A pid means the same process only in its own pid namespace of one boot of one machine:
two hosts may share a name, and so may containers, each with its own pids. A claimant is
therefore named ``host#machine:pid``, the machine a hash of the boot id and the pid
namespace, and judged by its pid only when its machine is this one.
"""

from __future__ import annotations

import functools
import hashlib
import os
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path

# A claimant process that started this much after its claim holds a reused pid (the slack:
# btime is whole seconds, and the clock may have been stepped since boot).
PID_START_SLACK = timedelta(seconds=30)


@functools.cache
def this_machine() -> str:
    """This host and pid namespace, as the claims made here name it: the host's name, then a
    hash of its boot id and the pid namespace; the name alone where they cannot be read (then
    no claim is judged by its pid)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return socket.gethostname()
    return f"{socket.gethostname()}#{hashlib.sha256(f'{boot} {namespace}'.encode()).hexdigest()[:8]}"


def claimant_name(pid: int) -> str:
    """The claimant name of process `pid` of this machine: host#machine:pid."""
    return f"{this_machine()}:{pid}"


def process_started_at(pid: int) -> datetime | None:
    """When process `pid` of this host started (Linux /proc), or None if unknown or gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = next(line for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
    except (OSError, StopIteration):
        return None
    ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, after the name in parentheses
    return datetime.fromtimestamp(int(boot.split()[1]) + ticks / os.sysconf("SC_CLK_TCK"), tz=UTC)


def claimant_alive(claimed_by: str, since: datetime | None) -> bool | None:
    """Is the process a claim names (claimant_name) still running? None when it cannot be
    told from here: another host or pid namespace, or a claim in another form. A pid now held
    by a process that started after the claim was made (`since`) is a reused pid: its
    claimant is gone."""
    machine, _, pid_text = claimed_by.rpartition(":")
    if "#" not in machine or machine != this_machine() or not pid_text.isdigit():
        return None
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    started = process_started_at(pid)
    if started is not None and since is not None and started > since + PID_START_SLACK:
        return False
    return True
