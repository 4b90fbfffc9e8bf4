"""A warning that can repeat hundreds of times a second (every failed send while a cluster is
down), logged once per interval per kind with how many were left out."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

DEFAULT_INTERVAL_S = 60.0


@dataclass
class _Seen:
    logged_at: float
    skipped: int
    msg: str
    args: tuple[object, ...]


class ThrottledLog:
    """``warning(key, msg, *args)`` logs the first message of each key, then at most one per
    ``interval_s``, saying how many like it were not logged before it; ``flush()`` logs the
    last one left out of each key when the caller stops. Not thread-safe: one per thread."""

    def __init__(
        self,
        logger: logging.Logger,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self._clock = clock
        self._seen: dict[Hashable, _Seen] = {}

    def warning(self, key: Hashable, msg: str, *args: object) -> None:
        now = self._clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen.logged_at < self.interval_s:
            seen.skipped += 1
            seen.msg, seen.args = msg, args
            return
        self.logger.warning(msg + "%s", *args, self._left_out(seen.skipped if seen else 0))
        self._seen[key] = _Seen(now, 0, msg, args)

    def flush(self) -> None:
        """Log the last message left out of each key (with how many before it were), and forget."""
        for seen in self._seen.values():
            if seen.skipped:
                self.logger.warning(seen.msg + "%s", *seen.args, self._left_out(seen.skipped - 1))
        self._seen.clear()

    def _left_out(self, skipped: int) -> str:
        return f" (after {skipped} more like it, not logged)" if skipped else ""
