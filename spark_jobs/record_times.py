"""What a record's timestamp says about when it was written.

The auditor bounds when records it never read were written by the oldest record still in
the log: every deleted record was appended before it, so (give or take a slack for clocks)
before its timestamp. Reconciliation's loss horizon and the stuck diagnosis's "the topic
still holds everything since the row was created" both rest on that.

It holds while producers stamp records with the time they send them (CreateTime, the
default) or the broker stamps them on append (LogAppendTime). It fails where a producer
stamps records with older times: a replay or a mirror catching up with the events' own
times, an application setting event time, a clock far behind. Then the oldest remaining
record may be stamped an hour before live records that retention deleted after it, and rows
of those records would read as never produced.

Proof that a topic's producers do that comes from the auditor's own reads: a record at an
offset past the log end a run read was written after that run's read, so a timestamp well
before the read is not its time of writing (Backdated). Once seen, a binding's state keeps it
(state.json `backdated`), and the oldest record's timestamp bounds the deleted ones only
within the topic's message.timestamp.before.max.ms, the age past which the broker refuses
a record: with no such limit (the default), not at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

# Records a run's read of the log end did not include may still have been written shortly
# before it (appended to the leader, not yet replicated), clocks differ, and a producer
# retrying a send writes a record up to its delivery.timeout.ms (120 s by default) after
# stamping it: a timestamp counts as older than its write only past this margin, and past
# the binding's grace, the margin every bound drawn from timestamps already allows.
SLACK_MS = 120_000
# message.timestamp.before.max.ms at or above this is no limit (the default is Long.MAX_VALUE).
UNLIMITED_MS = 1 << 62


def iso_ms(ms: int) -> str:
    """An epoch-ms instant as ISO 8601 (UTC, to the second), for messages."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Backdated:
    """A record written after `written_after_ms` (it lies past the log end `run_id` read
    then) whose timestamp is more than SLACK_MS older."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    written_after_ms: int
    run_id: str

    def describe(self) -> str:
        return (
            f"{self.topic}/{self.partition}@{self.offset} carries the timestamp {iso_ms(self.timestamp_ms)} but was "
            f"written after {iso_ms(self.written_after_ms)}, when reconciliation run {self.run_id} read the log end "
            f"below it: its producer stamps records {(self.written_after_ms - self.timestamp_ms) / 1000:.0f} s or "
            "more before they are written (a replay, a mirror, event time), so the oldest record's timestamp does not "
            "say when the records deleted before it were written"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "timestamp_ms": self.timestamp_ms,
            "written_after_ms": self.written_after_ms,
            "run_id": self.run_id,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Backdated | None:
        if not data:
            return None
        return cls(
            str(data["topic"]),
            int(data["partition"]),
            int(data["offset"]),
            int(data["timestamp_ms"]),
            int(data["written_after_ms"]),
            str(data["run_id"]),
        )


def written_after_read(
    read_highs: Mapping[Any, Any], partitions: Iterable[int], recreated: bool = False
) -> dict[int, int]:
    """Per partition, the offset from which its records were written after a read of the log
    ends `read_highs` (a run's high watermarks, one for every partition the topic had): that
    high watermark, and in each of `partitions` the read did not see, its start (0): the
    partition was added after the read. In a topic `recreated` since (another topic id), every
    partition from its start: the old topic still stood when it was read. Nothing without the
    read's watermarks (no run yet, or a state written before they were kept)."""
    if recreated:
        return dict.fromkeys((int(p) for p in partitions), 0)
    highs = {int(p): int(o) for p, o in read_highs.items()}
    if not highs:
        return {}
    return highs | {int(p): 0 for p in partitions if int(p) not in highs}


def find_backdated(
    topic: str,
    oldest: Mapping[int, tuple[int | None, int | None]],
    read_to: Mapping[int, int],
    read_at_ms: int | None,
    run_id: str | None,
    grace_ms: int = 0,
    known: Mapping[str, Any] | None = None,
) -> Backdated | None:
    """The proof a state kept (state.json `backdated`, `known`), else the first proof of
    backdating among `oldest` (per partition, the smallest timestamp among the records read
    at or past `read_to`, and its offset), against an earlier run `run_id` that read the log
    ends at `read_at_ms` (taken before it asked); `read_to` (written_after_read) is where each
    partition's records written after that read begin. Only records at or past it count:
    they were written after the read (or, not yet replicated, shortly before), stamped more
    than SLACK_MS and `grace_ms` before it. None without one (or without the earlier read's
    time: a state written before it was kept)."""
    proven = Backdated.from_json(known)
    if proven is not None or read_at_ms is None or run_id is None:
        return proven
    for partition, (timestamp_ms, offset) in sorted(oldest.items()):
        end = read_to.get(partition)
        if end is None or timestamp_ms is None or offset is None or offset < end:
            continue
        if timestamp_ms + max(SLACK_MS, grace_ms) < read_at_ms:
            return Backdated(topic, partition, offset, timestamp_ms, read_at_ms, run_id)
    return None


def stamp_lag_ms(backdated: Backdated | None, before_max_ms: int | None) -> int | None:
    """How long before its write a record of the topic may be stamped, beyond the usual
    clock slack: 0 while no backdating was seen; the topic's message.timestamp.before.max.ms
    once it was (the broker refuses records stamped earlier than that); None when nothing
    limits it."""
    if backdated is None:
        return 0
    if before_max_ms is None or before_max_ms >= UNLIMITED_MS:
        return None
    return before_max_ms
