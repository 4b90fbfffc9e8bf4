"""Single records read by offset: their timestamps, audit headers and leader epochs.

The diagnosis needs a few records, not ranges: the oldest record of each partition (how far
back the log is complete), the record at a group's committed offset (its lag in time), and
the first record written under a partition's current leader (since when no leader change
can have truncated anything). One consumer reads the first record at or after each offset,
in rounds of at most one offset per partition.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType

from confluent_kafka import Consumer, TopicPartition

from auditor.probes.headers import parse_audit_headers
from auditor.probes.message import record_headers
from spark_jobs.kafka_offsets import PartitionOffsets, single_record_reader_config

Target = tuple[str, int, int]  # topic, partition, offset


@dataclass(frozen=True)
class FoundRecord:
    offset: int
    timestamp_ms: int | None
    leader_epoch: int | None  # the epoch of the leader that appended it (None: not known)
    audit: tuple[str, int] | None  # (producer session, seq) of a valid audit header


class RecordReader:
    """Reads the first record at or after given offsets with one consumer."""

    def __init__(
        self, bootstrap: str, config: dict[str, str], timeout_s: float = 10.0, isolation: str = "read_uncommitted"
    ) -> None:
        self.timeout_s = timeout_s
        self.consumer = Consumer(
            single_record_reader_config(bootstrap, config, f"auditor-stuck-{uuid.uuid4().hex}", isolation, timeout_s)
        )

    def __enter__(self) -> RecordReader:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.consumer.close()

    def read(self, targets: Iterable[Target]) -> dict[Target, FoundRecord | None]:
        """The first record at or after each target; None where there is none (deleted, past
        the end) or it could not be read within the timeout. Raises KafkaException."""
        pending = sorted(set(targets))
        found: dict[Target, FoundRecord | None] = {t: None for t in pending}
        consumer = self.consumer
        while pending:
            # Keyed as poll() reports a position: an error event may carry no topic or partition.
            round_targets: dict[tuple[str | None, int | None], Target] = {}
            rest = []
            for target in pending:
                if (target[0], target[1]) in round_targets:
                    rest.append(target)
                else:
                    round_targets[(target[0], target[1])] = target
            pending = rest
            assigned = [TopicPartition(t, p, o) for t, p, o in round_targets.values()]
            consumer.assign(assigned)
            deadline = time.monotonic() + self.timeout_s
            while round_targets and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                where = (msg.topic(), msg.partition())
                hit = round_targets.get(where)
                if hit is None:
                    continue
                if msg.error() is None:
                    kind, value = msg.timestamp()
                    header = parse_audit_headers(record_headers(msg), msg.key())
                    epoch = msg.leader_epoch()
                    found[hit] = FoundRecord(
                        int(msg.offset() or 0),
                        value if kind != 0 and value >= 0 else None,
                        epoch if epoch is not None and epoch >= 0 else None,
                        (header.pid, header.seq)
                        if header is not None and header.valid and header.pid and header.seq is not None
                        else None,
                    )
                round_targets.pop(where)  # a record, the end of the partition, or an error
                if where[0] is not None and where[1] is not None:
                    consumer.pause([TopicPartition(where[0], where[1])])  # its later records are not wanted
            consumer.resume([TopicPartition(tp.topic, tp.partition) for tp in assigned])  # for the next round
            consumer.unassign()
        return found


def record_timestamps(
    bootstrap: str,
    config: dict[str, str],
    targets: Iterable[Target],
    timeout_s: float = 10.0,
    audit_of: dict[Target, tuple[str, int]] | None = None,
    isolation: str = "read_uncommitted",
) -> dict[Target, int | None]:
    """The timestamp of the first record at or after each (topic, partition, offset).

    A target with no record there (deleted, past the end) maps to None. ``audit_of``, when
    given, receives the (session, seq) of each record found with a valid audit header.
    ``isolation`` read_committed skips aborted records and ends at the last stable offset.
    """
    targets = sorted(set(targets))
    if not targets:
        return {}
    with RecordReader(bootstrap, config, timeout_s, isolation) as reader:
        found = reader.read(targets)
    if audit_of is not None:
        audit_of.update({t: r.audit for t, r in found.items() if r is not None and r.audit is not None})
    return {t: None if r is None else r.timestamp_ms for t, r in found.items()}


def leader_epoch_starts(
    reader: RecordReader, topic: str, offsets: dict[int, PartitionOffsets]
) -> dict[int, int | None]:
    """For each partition whose leader has changed since it was created (leader epoch above
    0): the timestamp of the first record the current leader appended, or None when it has
    appended none yet or that record could not be read.

    Every leader change comes before that record, so a row created after it (by a margin for
    clocks) cannot have lost a record to a leader change. Records carry their leader's epoch
    and epochs never decrease along a partition, so a binary search over the offsets finds
    the first record of the current epoch: about log2(records) rounds, partitions together.
    """
    # partition -> [lo, hi): the first record of the current epoch is at or after lo, and
    # before hi or at best's offset
    search: dict[int, tuple[int, int]] = {}
    best: dict[int, FoundRecord] = {}
    for p, o in offsets.items():
        if o.leader_epoch and o.high > o.low:
            search[p] = (o.low, o.high)
    # first the oldest record: often the current leader's already, which settles it
    probes = {p: lo for p, (lo, _) in search.items()}
    while search:
        found = reader.read((topic, p, offset) for p, offset in probes.items())
        for p, offset in probes.items():
            lo, hi = search[p]
            record = found.get((topic, p, offset))
            epoch = offsets[p].leader_epoch
            if record is None or record.offset >= hi:
                hi = offset  # nothing in [offset, hi)
            elif record.leader_epoch is None:
                hi = lo  # an epoch not known: give up on this partition
                best.pop(p, None)
            elif epoch is not None and record.leader_epoch >= epoch:
                best[p] = record
                hi = offset
            else:
                lo = record.offset + 1  # everything up to it was appended under earlier leaders
            if lo < hi:
                search[p] = (lo, hi)
            else:
                del search[p]
        probes = {p: (lo + hi) // 2 for p, (lo, hi) in search.items()}
    return {p: (best[p].timestamp_ms if p in best else None) for p, o in offsets.items() if o.leader_epoch}
