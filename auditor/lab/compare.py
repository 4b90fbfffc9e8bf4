"""Compare the auditor's verdicts with the ground truth, key by key.

Pure functions, no Django: a scenario hands over what it expected (from the clients' delivery
reports, a plain read of the topic, the database rows) and what the auditor said.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Verdicts = Mapping[str, Iterable[str]]


@dataclass
class Outcome:
    """What one scenario did and what the auditor answered."""

    injected: str
    expected: dict[str, set[str]] = field(default_factory=dict)
    got: dict[str, set[str]] = field(default_factory=dict)
    detect_s: float | None = None
    notes: list[str] = field(default_factory=list)
    # Verdicts outside the comparison (e.g. stuck `waiting` for a consumer the scenario stopped
    # on purpose): listed, never counted as alarms.
    ignored: frozenset[str] = frozenset()
    # Per key, verdicts the truth allows without requiring them (e.g. `reprocessed` for a record
    # processed twice where no client can tell whether the first processing's marks got out):
    # never an alarm where given, never a miss where not.
    optional: dict[str, set[str]] = field(default_factory=dict)


@dataclass
class Score:
    false_alarms: int
    misses: int
    wrong: list[dict[str, Any]]


def merge(*parts: Verdicts) -> dict[str, set[str]]:
    """One key → verdicts map from several auditor answers (or several parts of the truth)."""
    merged: dict[str, set[str]] = {}
    for part in parts:
        for key, found in part.items():
            merged.setdefault(key, set()).update(found)
    return merged


def verdict_counts(verdicts: Verdicts) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for found in verdicts.values():
        counts.update(found)
    return dict(sorted(counts.items()))


def score(
    expected: Verdicts, got: Verdicts, ignored: frozenset[str] = frozenset(), optional: Verdicts | None = None
) -> Score:
    """A false alarm is a verdict the truth does not support; a miss, one the auditor did not give.
    `optional` (per key): verdicts the truth allows there without requiring them."""
    false_alarms = misses = 0
    wrong: list[dict[str, Any]] = []
    for key in sorted(set(expected) | set(got), key=_natural):
        want = set(expected.get(key, ()))
        allowed = set((optional or {}).get(key, ())) - want
        have = set(got.get(key, ())) - (ignored - want) - allowed
        extra, lacking = have - want, want - have
        false_alarms += len(extra)
        misses += len(lacking)
        if extra or lacking:
            wrong.append({"key": key, "expected": sorted(want), "got": sorted(have)})
    return Score(false_alarms, misses, wrong)


def _natural(key: str) -> tuple[int, int | str]:
    return (0, int(key)) if key.isdigit() else (1, key)
