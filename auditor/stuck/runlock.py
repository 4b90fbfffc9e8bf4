"""One diagnosis of a rule at a time, across processes, and what a crashed one leaves behind.

The lock is a cache key (Redis wherever workers share it) whose value names its holder,
``host#machine:pid:token:since``: the claimant as reconcile runs name theirs
(auditor.lib.claimants: the machine is a hash of the boot id and the pid namespace, as two
containers may share a host name), a token of this acquisition and when it was taken (Unix
seconds). A process can end without releasing it: killed, or aborted inside the Kafka
client (librdkafka 2.16's admin client can abort the process while a broker is frozen,
upstream confluentinc/librdkafka#4605). A diagnosis that finds the lock held by a process of
its own machine that no longer runs (or whose pid a process started later now holds) takes
the lock over at once; a holder on another machine, or in another pid namespace, or named in
the form before the machine was (``host:pid:token``), is waited out (the key expires after
LOCK_SECONDS). Once a diagnosis holds the lock, no other run of the rule can be alive: runs
still marked running are failed with the reason.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from django.core.cache import cache
from django.utils import timezone

from auditor.lib.claimants import claimant_alive, claimant_name
from auditor.pipelines.models import StuckRule

LOCK_SECONDS = 3600
TAKEOVER_SECONDS = 60


class DiagnosisBusy(RuntimeError):
    """Another diagnosis of the same rule is running."""


def _key(rule: StuckRule) -> str:
    return f"stuck:diagnosis-running:{rule.pk}"


def holder_value(claimant: str, token: str, since: datetime) -> str:
    """The lock's value for an acquisition by `claimant` (claimant_name) at `since`."""
    return f"{claimant}:{token}:{int(since.timestamp())}"


def _holder() -> str:
    """This acquisition: machine, process and a token of its own (two threads of one process
    are two holders)."""
    return holder_value(claimant_name(os.getpid()), uuid.uuid4().hex[:12], timezone.now())


def ended_holder(value: object) -> str | None:
    """The holder named by a lock's `value` ("pid N on HOST") when it is a process of this
    machine (host, boot and pid namespace) that no longer runs, or whose pid a process started
    after the lock was taken holds; None when it runs, is elsewhere, or cannot be told."""
    claimant, _, since_text = str(value).rpartition(":")
    claimant = claimant.rpartition(":")[0]  # the token off
    if not since_text.isdigit():
        return None  # the form before the machine was named: its pid may be another namespace's
    if claimant_alive(claimant, datetime.fromtimestamp(int(since_text), tz=UTC)) is not False:
        return None
    machine, _, pid = claimant.rpartition(":")
    return f"pid {pid} on {machine.partition('#')[0]}"


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
