"""What a test session clears of the test stack's Redis when it starts.

Sessions run side by side on one Redis (several checkouts, pytest-xdist's workers), each in
its own namespace (tests/conftest.py _session_namespace): the channel layer's prefix, the
cache's KEY_PREFIX and the Celery queue. A session clears its namespace only: a FLUSHDB also
deleted the live groups of the sessions beside it, and their Daphne sockets silently got no
more events."""

from __future__ import annotations

import re

import redis

# Where the namespace sits in each key: the Celery queue itself and its bindings
# (the default exchange is named after the queue), a priority queue of it (kombu's separator),
# the cache (`<prefix>:<version>:<key>`), the channel layer's groups (`<prefix>:group:<name>`)
# and its process-local channels (`<prefix>specific.<client>!`, `...!$inflight`).
_KOMBU_BINDINGS = (b"_kombu.binding.", b"_kombu.binding_permanent.")
_AFTER_NAMESPACE = rb"(?:\Z|:|specific\.|\x06\x16)"


def session_keys(client: redis.Redis, namespace: str) -> list[bytes]:
    """The keys of the session `namespace` and of its pytest-xdist workers (`<namespace>-gwN`)."""
    own = re.compile(
        rb"(?:_kombu\.binding(?:_permanent)?\.)?" + re.escape(namespace.encode()) + rb"(?:-gw\d+)?" + _AFTER_NAMESPACE
    )
    pattern = re.sub(r"([\[\]*?\\])", r"\\\1", namespace) + "*"
    candidates = set(client.scan_iter(match=pattern, count=1000))
    for binding in _KOMBU_BINDINGS:
        candidates.update(client.scan_iter(match=binding.decode() + pattern, count=1000))
    return sorted(key for key in candidates if own.match(key))


def reset_session_redis(client: redis.Redis, namespace: str) -> None:
    """Forget what the last run of the session `namespace` left in Redis (cached status
    snapshots and counts, live groups, queued tasks), so a local run sees what a fresh clone
    (CI) sees, and leave every other session's keys alone."""
    keys = session_keys(client, namespace)
    for start in range(0, len(keys), 1000):
        client.delete(*keys[start : start + 1000])
