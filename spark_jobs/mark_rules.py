"""Where and when processed marks may be of records the broker lost (reconcile_rewrites), in
the form state.json keeps them (`marks_rewritten`) and both the reconciliation job and the
stuck diagnosis read: without Spark."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

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
