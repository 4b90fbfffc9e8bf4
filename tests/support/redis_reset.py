"""What a test session clears of the test stack's Redis when it starts."""

from __future__ import annotations

import redis


def reset_session_redis(client: redis.Redis, namespace: str) -> None:
    """Forget what the last run of the session `namespace` left in Redis (cached status
    snapshots and counts), so a local run sees what a fresh clone (CI) sees."""
    client.flushdb()
