"""What reconciliation runs saw of the binding's consumer groups' committed offsets.

A group's committed offset only says where it stands now. An operator can delete it
(`kafka-consumer-groups --delete-offsets`) or move it back (`--reset-offsets`), and Kafka
expires it once the group has been empty long enough. After that, nothing in the cluster
shows that the group once read past a record. The state keeps, per group and partition, the
highest offset a run saw the group commit, which run saw it and when, and where the
partition's log started then. The stuck diagnosis and the runs' `unprocessed` findings read it (state.json `group_commits`):
- a group with no committed offset now, seen past a record, did read that far (it is not
  waiting for the record);
- a group seen past a deleted record while the record was still in the log reached it
  before retention removed it (it did not expire unread).

Offsets mean the records a run read only while the log is not rewritten. A rebuild after a
truncation forgets the rewritten partitions; one after the topic was re-created forgets all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SeenCommit:
    """A group's committed offset on a partition as a reconciliation run read it."""

    offset: int  # the committed offset: the group had read every record below it
    seen_ms: int  # when the run read it (epoch ms, the driver's clock)
    run_id: str
    log_start: int  # the partition's log start then: records from it up to `offset` were in the log

    def passed(self, offset: int) -> bool:
        """The group had committed past the record at `offset`."""
        return offset < self.offset

    def passed_in_log(self, offset: int) -> bool:
        """... while that record was still in the log (retention had not removed it yet)."""
        return self.log_start <= offset < self.offset

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "seen_ms": self.seen_ms, "run_id": self.run_id, "log_start": self.log_start}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SeenCommit:
        return cls(int(data["offset"]), int(data["seen_ms"]), str(data["run_id"]), int(data["log_start"]))


GroupCommits = dict[str, dict[int, SeenCommit]]  # group -> partition -> the highest commit seen


def remember(
    earlier: Mapping[str, Mapping[int, SeenCommit]],
    committed: Iterable[tuple[str, int, int]],
    log_starts: Mapping[int, int],
    run_id: str,
    seen_ms: int,
) -> GroupCommits:
    """`earlier` with this run's committed offsets ((group, partition, offset), read at
    `seen_ms`): a higher one replaces what was kept, a lower one (an offset moved back) does
    not, so what is kept only grows."""
    kept: GroupCommits = {group: dict(parts) for group, parts in earlier.items()}
    for group, partition, offset in committed:
        known = kept.setdefault(group, {}).get(partition)
        if known is None or offset > known.offset:
            low = min(log_starts.get(partition, 0), offset)
            kept[group][partition] = SeenCommit(int(offset), seen_ms, run_id, low)
    return kept


def standing_in(
    committed: Iterable[tuple[str, int, int]], commits: Mapping[str, Mapping[int, SeenCommit]], groups: Iterable[str]
) -> list[tuple[str, int, int]]:
    """The committed offsets a run judges `unprocessed` by: each of `groups`' offsets now, and
    where a group has none now on a partition, the highest a run saw it commit there (deleted
    or expired since: the group had read that far). An offset moved back stays as it is: the
    group reads those records again."""
    rows = list(committed)
    now = {(group, partition) for group, partition, _ in rows}
    for group in groups:
        for partition, seen in sorted(commits.get(group, {}).items()):
            if (group, partition) not in now:
                rows.append((group, partition, seen.offset))
    return rows


def forget(commits: Mapping[str, Mapping[int, SeenCommit]], partitions: Iterable[int]) -> GroupCommits:
    """Without the entries of `partitions` (rewritten: their offsets now hold other records)."""
    gone = set(partitions)
    kept = {g: {p: seen for p, seen in parts.items() if p not in gone} for g, parts in commits.items()}
    return {g: parts for g, parts in kept.items() if parts}


def commits_to_json(commits: Mapping[str, Mapping[int, SeenCommit]]) -> dict[str, dict[str, dict[str, Any]]]:
    return {g: {str(p): seen.to_json() for p, seen in sorted(parts.items())} for g, parts in sorted(commits.items())}


def commits_from_json(data: Any) -> GroupCommits:
    """state.json's `group_commits`; ValueError naming what is malformed."""
    if not data:
        return {}
    try:
        return {
            str(group): {int(p): SeenCommit.from_json(seen) for p, seen in parts.items()}
            for group, parts in data.items()
        }
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ValueError(f"state.json's group_commits is malformed ({exc!r})") from exc
