"""Latency percentiles in bounded memory.

Values are kept as a histogram keyed by the value rounded to three significant digits:
percentiles are within 0.5 % of the exact ones and the number of keys stays in the low
thousands however long the canary runs. The maximum is kept exactly.
"""

from __future__ import annotations

import math
from collections import Counter


def _bucket(value_ms: float) -> float:
    if value_ms <= 0:
        return 0.0
    return float(f"{value_ms:.3g}")


class LatencyDigest:
    __slots__ = ("_counts", "count", "max_ms")

    def __init__(self) -> None:
        self._counts: Counter[float] = Counter()
        self.count = 0
        self.max_ms: float | None = None

    def add(self, value_ms: float) -> None:
        value_ms = max(0.0, value_ms)
        self._counts[_bucket(value_ms)] += 1
        self.count += 1
        if self.max_ms is None or value_ms > self.max_ms:
            self.max_ms = value_ms

    def merge(self, other: LatencyDigest) -> None:
        self._counts.update(other._counts)
        self.count += other.count
        if other.max_ms is not None and (self.max_ms is None or other.max_ms > self.max_ms):
            self.max_ms = other.max_ms

    def percentile(self, p: float) -> float | None:
        """Nearest-rank percentile (the smallest value with at least p % of values at or below it)."""
        if not 0 < p <= 100:
            raise ValueError(f"percentile {p!r} must be in (0, 100]")
        if self.count == 0:
            return None
        rank = max(1, math.ceil(p / 100 * self.count))
        seen = 0
        for value in sorted(self._counts):
            seen += self._counts[value]
            if seen >= rank:
                # A bucket may round up past the exact maximum; a percentile never exceeds it.
                return min(value, self.max_ms) if self.max_ms is not None else value
        return self.max_ms  # unreachable: the counts add up to self.count

    def summary(self) -> dict[str, float | None]:
        def rounded(value: float | None) -> float | None:
            return None if value is None else round(value, 3)

        return {
            "p50_ms": rounded(self.percentile(50)),
            "p99_ms": rounded(self.percentile(99)),
            "max_ms": rounded(self.max_ms),
        }
