"""Polling for something a real service does asynchronously."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Message


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def handed(consumer: Any, count: int, timeout: float = 60) -> list[Message]:
    """The next `count` records a consumer is handed (fewer if `timeout` seconds pass first);
    error events are left out."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg)
    return got
