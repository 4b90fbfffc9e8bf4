"""Where and when processed marks may be of records the broker lost (reconcile_rewrites), in
the form state.json keeps them (`marks_rewritten`) and both the reconciliation job and the
stuck diagnosis read: without Spark."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from spark_jobs.binding import BindingError

# How long a processed mark may trail its commit. The probes hand marks to their ledger before
# an explicit commit, but not before one auto-commit makes of offsets stored with
# store_offsets (the consumer configuration lint C001 advises), nor do they wait for an
# asynchronous commit's marks to be acked: those marks reach the ledger at the probe's next
# background flush (ledger_flush_interval_s, 1 s by default) plus a produce. Reconciliation
# reads the consumer ledger's end this long after the committed offsets, and the stuck
# diagnosis reads it again this long after them before it calls a record skipped, so every
# mark of a committed record that a live probe will write is inside what they read.
MARK_SETTLE_SECONDS = 3.0

# A record is written before it is processed, but by another host's clock: a record written up
# to this long after a rule's bound is not judged by the marks made after it either.
RECORD_SLACK_MS = 60_000


@dataclass(frozen=True)
class MarkRule:
    """Past `after` on `partition`, marks made and records written up to `until_ms` may be of
    records the broker lost (marks) or be taken for them (records)."""

    partition: int
    after: int  # the last offset known to hold the record an earlier run saw there
    until_ms: int

    def as_json(self) -> list[int]:
        return [self.after, self.until_ms]

    def cause(self, topic: str) -> str:
        return f"{topic}/{self.partition} was truncated and rewritten past offset {self.after}"

    def describe(self, topic: str) -> str:
        until = datetime.fromtimestamp(self.until_ms / 1000, UTC).isoformat()
        return (
            f"{self.cause(topic)}: processed marks made there up to {until} may be of the lost records and are left "
            "out, and records written there up to then are not judged unprocessed"
        )


def rules_from_json(data: Mapping[str, Iterable[Sequence[int]]] | None) -> list[MarkRule]:
    """state.json's `marks_rewritten`: {"<partition>": [[after, until_ms], ...]}."""
    return [MarkRule(int(p), int(after), int(until)) for p, pairs in (data or {}).items() for after, until in pairs]


def rules_to_json(rules: Iterable[MarkRule]) -> dict[str, list[list[int]]]:
    out: dict[str, list[list[int]]] = {}
    for rule in sorted(set(rules), key=lambda r: (r.partition, r.after, r.until_ms)):
        out.setdefault(str(rule.partition), []).append(rule.as_json())
    return out


def covering(rules: Iterable[MarkRule], partition: int, offset: int) -> list[MarkRule]:
    """The rules under which a record or mark at (partition, offset) falls."""
    return [r for r in rules if r.partition == partition and offset > r.after]


def env_seconds(name: str, default: float) -> float:
    """$name as a number of seconds, 0 or more, or `default` when it is not set."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise BindingError(f"{name} must be a number of seconds, got {raw!r}") from None
    if not math.isfinite(value) or value < 0:
        raise BindingError(f"{name} must be 0 or more seconds, got {raw!r}")
    return value


def mark_settle_seconds() -> float:
    """MARK_SETTLE_SECONDS, or $RECONCILE_MARK_SETTLE_SECONDS (probes that flush their ledger
    less often need more)."""
    return env_seconds("RECONCILE_MARK_SETTLE_SECONDS", MARK_SETTLE_SECONDS)
