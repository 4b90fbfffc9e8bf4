"""One diagnosis of a rule at a time, across processes, and what a crashed one leaves behind.

The lock is a cache key (Redis wherever workers share it) whose value names its holder,
``host:pid:token``. A process can end without releasing it: killed, or aborted inside the Kafka
client (librdkafka 2.16's admin client can abort the process while a broker is frozen,
upstream confluentinc/librdkafka#4605). A diagnosis that finds the lock held by a process of
its own host that no longer runs takes the lock over at once; a holder on another host is
waited out (the key expires after LOCK_SECONDS). Once a diagnosis holds the lock, no other
run of the rule can be alive: runs still marked running are failed with the reason.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from django.core.cache import cache

from auditor.pipelines.models import StuckRule

LOCK_SECONDS = 3600
TAKEOVER_SECONDS = 60


class DiagnosisBusy(RuntimeError):
    """Another diagnosis of the same rule is running."""


def _key(rule: StuckRule) -> str:
    return f"stuck:diagnosis-running:{rule.pk}"


def _holder() -> str:
    """This acquisition: host, process and a token of its own (two threads of one process
    are two holders)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def ended_holder(value: object) -> str | None:
    """The holder named by a lock's `value` ("pid N on HOST") when it is a process of this host
    that no longer runs; None when it runs, is elsewhere, or cannot be told."""
    host, _, rest = str(value).partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return f"pid {pid} on {host}"
    except PermissionError:  # it runs, as another user
        return None
    return None


def _acquire(rule: StuckRule, key: str, me: str) -> str | None:
    """Take the lock as `me`; the ended holder taken over, or None when it was free."""
    if cache.add(key, me, timeout=LOCK_SECONDS):
        return None
    current = cache.get(key)
    if current is None:  # it expired meanwhile
        if cache.add(key, me, timeout=LOCK_SECONDS):
            return None
        raise DiagnosisBusy(f"a diagnosis of rule {rule.name} is already running")
    ended = ended_holder(current)
    # Only one process may take over from a given ended holder: the first to add this key.
    if ended is None or not cache.add(f"{key}:takeover:{current}", me, timeout=TAKEOVER_SECONDS):
        raise DiagnosisBusy(f"a diagnosis of rule {rule.name} is already running")
    cache.set(key, me, timeout=LOCK_SECONDS)
    return ended


@contextmanager
def diagnosis_lock(rule: StuckRule) -> Iterator[str | None]:
    """Hold the rule's lock; yields the ended holder it took over (None when it was free).
    DiagnosisBusy when a live (or unknowable) holder has it."""
    key, me = _key(rule), _holder()
    taken_over = _acquire(rule, key, me)
    try:
        yield taken_over
    finally:
        if cache.get(key) == me:
            cache.delete(key)


def diagnosis_running(rule: StuckRule) -> bool:
    """A diagnosis of the rule holds its lock, and its holder has not ended."""
    current = cache.get(_key(rule))
    return current is not None and ended_holder(current) is None
