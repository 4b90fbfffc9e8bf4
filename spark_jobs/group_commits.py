"""What reconciliation runs saw of the binding's consumer groups' committed offsets.

A group's committed offset only says where it stands now. An operator can delete it
(`kafka-consumer-groups --delete-offsets`) or move it back (`--reset-offsets`), and Kafka
expires it once the group has been empty long enough. After that, nothing in the cluster
shows that the group once went past a record. The state keeps, per group and partition,
spans of offsets a run saw the group's committed offset pass while they were in the log:
[the partition's log start as the run read it, the committed offset it read). Runs read the
committed offsets first and the log ends after, so every offset of a span held a record
when the group committed past it. The stuck diagnosis and the runs' `unprocessed` findings
read them (state.json `group_commits`):
- a group with no committed offset now, seen past a record, did go that far (it is not
  waiting for the record);
- a group seen past a deleted record while the record was still in the log went past it
  before retention removed it (it did not expire unread).

A committed offset past the log end the run read (set by hand, or the log truncated since
it was made), or read by a rebuild on a partition it found rewritten, proves nothing and is
not kept; until the group commits another one, later runs do not take it either
(state.json `unproven_commits`). Offsets mean the records a run read only while
the log is not rewritten: a rebuild after a truncation forgets the rewritten partitions, one
after the topic was re-created forgets all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

MAX_SPANS = 16  # per group and partition; the lowest go first (a lost span only proves less)


@dataclass(frozen=True)
class Span:
    """Offsets [start, end) that held records when the group's committed offset passed them,
    as runs `first_run` to `last_run` saw (the last at `seen_ms`, epoch ms)."""

    start: int
    end: int
    first_run: str
    last_run: str
    seen_ms: int

    def describe(self) -> str:
        runs = self.last_run if self.first_run == self.last_run else f"{self.first_run} to {self.last_run}"
        return f"reconciliation run(s) {runs} saw its committed offset pass offsets {self.start}-{self.end - 1}"

    def to_json(self) -> list[Any]:
        return [self.start, self.end, self.first_run, self.last_run, self.seen_ms]

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> Span:
        start, end, first_run, last_run, seen_ms = data
        if not int(start) < int(end):
            raise ValueError(f"empty span {list(data)!r}")
        return cls(int(start), int(end), str(first_run), str(last_run), int(seen_ms))


@dataclass(frozen=True)
class SeenCommits:
    """One group's spans on one partition, ascending and apart."""

    spans: tuple[Span, ...]

    @property
    def offset(self) -> int:
        """The highest committed offset a run saw."""
        return self.spans[-1].end

    @property
    def latest(self) -> Span:
        return self.spans[-1]

    def passed(self, offset: int) -> bool:
        """The group's committed offset went past the record at `offset`."""
        return offset < self.offset

    def passed_in_log(self, offset: int) -> Span | None:
        """The span proving it did while that record was still in the log (retention had not
        removed it yet), if any."""
        return next((s for s in self.spans if s.start <= offset < s.end), None)

    def below(self, bound: int) -> SeenCommits | None:
        """Only what lies below `bound` (where the log is known not to be rewritten)."""
        kept = tuple(
            s if s.end <= bound else Span(s.start, bound, s.first_run, s.last_run, s.seen_ms) for s in self.spans
        )
        kept = tuple(s for s in kept if s.start < s.end)
        return SeenCommits(kept) if kept else None

    def to_json(self) -> list[list[Any]]:
        return [s.to_json() for s in self.spans]

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> SeenCommits:
        spans = tuple(Span.from_json(s) for s in data)
        if not spans or any(a.end > b.start for a, b in pairwise(spans)):
            raise ValueError(f"spans not ascending and apart: {list(data)!r}")
        return cls(spans)


GroupCommits = dict[str, dict[int, SeenCommits]]  # group -> partition -> what runs saw


Unproven = dict[str, dict[int, int]]  # group -> partition -> a committed offset that proves nothing


def remember(
    earlier: Mapping[str, Mapping[int, SeenCommits]],
    unproven: Mapping[str, Mapping[int, int]],
    committed: Iterable[tuple[str, int, int]],
    watermarks: Mapping[int, tuple[int, int]],
    run_id: str,
    seen_ms: int,
    rewritten: Iterable[int] = (),
) -> tuple[GroupCommits, Unproven]:
    """`earlier` with this run's committed offsets ((group, partition, offset), read at
    `seen_ms`, before `watermarks`: partition -> (log start, log end) as the run read them),
    and the offsets that prove nothing.

    An offset past the log end (set by hand, or made before a truncation) proves nothing, now
    or later, when the log has grown past it: it is kept as unproven until the group commits
    another one. So is one on a partition this run found `rewritten` (it may predate the
    truncation). One at or below the log start adds nothing, nor one below what was seen
    (moved back): what is kept only grows."""
    kept: GroupCommits = {group: dict(parts) for group, parts in earlier.items()}
    doubtful: Unproven = {group: dict(parts) for group, parts in unproven.items()}
    again = set(rewritten)
    for group, partition, offset in committed:
        if partition not in watermarks:
            continue
        low, high = watermarks[partition]
        if offset > high or partition in again:
            doubtful.setdefault(group, {})[partition] = offset
            continue
        if doubtful.get(group, {}).get(partition) == offset:
            continue  # not committed again since it proved nothing
        doubtful.get(group, {}).pop(partition, None)
        known = kept.get(group, {}).get(partition)
        start = max(low, known.offset if known is not None else low)
        if offset <= start:
            continue
        spans = list(known.spans) if known is not None else []
        if spans and spans[-1].end >= low:  # adjacent to what was seen: one span
            last = spans[-1]
            spans[-1] = Span(last.start, offset, last.first_run, run_id, seen_ms)
        else:  # retention passed the last offset seen before the group did: a gap
            spans.append(Span(low, offset, run_id, run_id, seen_ms))
        kept.setdefault(group, {})[partition] = SeenCommits(tuple(spans[-MAX_SPANS:]))
    return kept, {group: parts for group, parts in doubtful.items() if parts}


def standing_in(
    committed: Iterable[tuple[str, int, int]], commits: Mapping[str, Mapping[int, SeenCommits]], groups: Iterable[str]
) -> list[tuple[str, int, int, str | None]]:
    """The committed offsets a run judges `unprocessed` by (COMMITTED_SCHEMA: group, partition,
    committed, seen_by): each of `groups`' offsets now, and where a group has none now on a
    partition, the highest a run saw it commit there, with that run (deleted or expired since:
    the group had gone that far). An offset moved back stays as it is: the group reads those
    records again."""
    rows: list[tuple[str, int, int, str | None]] = [(g, p, o, None) for g, p, o in committed]
    now = {(group, partition) for group, partition, _, _ in rows}
    for group in groups:
        for partition, seen in sorted(commits.get(group, {}).items()):
            if (group, partition) not in now:
                rows.append((group, partition, seen.offset, seen.latest.last_run))
    return rows


def forget(commits: Mapping[str, Mapping[int, SeenCommits]], partitions: Iterable[int]) -> GroupCommits:
    """Without the entries of `partitions` (rewritten: their offsets now hold other records)."""
    gone = set(partitions)
    kept = {g: {p: seen for p, seen in parts.items() if p not in gone} for g, parts in commits.items()}
    return {g: parts for g, parts in kept.items() if parts}


def commits_to_json(commits: Mapping[str, Mapping[int, SeenCommits]]) -> dict[str, dict[str, list[list[Any]]]]:
    return {g: {str(p): seen.to_json() for p, seen in sorted(parts.items())} for g, parts in sorted(commits.items())}


def commits_from_json(data: Any) -> GroupCommits:
    """state.json's `group_commits`; ValueError naming what is malformed."""
    if not data:
        return {}
    try:
        return {
            str(group): {int(p): SeenCommits.from_json(seen) for p, seen in parts.items()}
            for group, parts in data.items()
        }
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ValueError(f"state.json's group_commits is malformed ({exc!r})") from exc
