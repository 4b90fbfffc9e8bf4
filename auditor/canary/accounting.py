"""Per-partition delivery accounting of one canary session (pure: no Kafka, no clock).

The sender registers every sequence it hands to the producer, then the producer's
delivery report for it (acknowledged by the broker, or failed); the receiver reports
every record it reads. For each partition:

- a sequence seen for the first time is *received* (and *out of order* when a higher
  sequence was already received), whether or not its delivery report came yet;
- a sequence seen again is *duplicated*;
- a sequence the broker acknowledged and that is not received within the SLA is *lost*
  (never earlier: a restart or a slow consumer within the SLA raises nothing); if it
  turns up after that it is *late*. The SLA runs from the send, or from the
  acknowledgement when that came later: after a partition had no leader for a while, the
  acknowledgements of the records held back arrive together, and the consumer gets the
  SLA to read them before any is called lost;
- a sequence whose delivery failed counts as a *produce error* and is no longer expected:
  the broker never took it, so it is never lost (a copy read anyway counts as received);
- a sequence without a delivery report is never lost (librdkafka reports every record
  within message.timeout.ms); when its SLA runs out unacknowledged it counts once as
  *unacked*, and stays expected until its report comes;
- records of other sessions (an earlier run, another canary) are ignored, only counted;
- a record of this session read at an offset, where another record is read later (the log
  was cut at or below that offset and written again: an unclean election, or an acks=1
  failover, truncated it), is *truncated*, with every record of this session read at or past
  that offset (each once, a duplicate's copies together): read once, the cluster no longer
  holds them. Only the offsets read are compared (the last READ_MEMORY per partition): a cut
  the consumer never reads past again (nothing written after it) is not seen. A topic
  deleted and created again counts the records read from the deleted one as truncated.

A lost record is also counted under the leader broker the sender knew for its partition
when it sent it (``lost_by_leader``): the broker that took it, not the one leading when
its SLA ran out (after a failover, the healthy new leader).

Counts are attributed to the window in which they are observed (a loss to the window in
which its SLA ran out), so a window can be closed as soon as the clock passes its end.
Sequences still pending when the session ends are reported as pending, not lost.
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left
from collections import OrderedDict
from dataclasses import dataclass, field

from auditor.canary.latency import LatencyDigest
from auditor.canary.payload import CanaryRecord

# How many lost (and failed) sequences per partition are remembered so that a late arrival
# is told apart from a duplicate; older ones are forgotten (a record later than that counts
# as a duplicate).
LOST_MEMORY = 100_000
# How many offsets of this session's records read are kept per partition to tell a cut log
# (``truncated``): 16 bytes each.
READ_MEMORY = 100_000

COUNT_FIELDS = (
    "sent",
    "received",
    "lost",
    "duplicated",
    "out_of_order",
    "late",
    "produce_errors",
    "unacked",
    "truncated",
)


@dataclass
class DeliveryCounts:
    sent: int = 0
    received: int = 0
    lost: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    late: int = 0
    produce_errors: int = 0
    unacked: int = 0
    truncated: int = 0  # read, then cut from the log (a later record read at its offset)
    latency: LatencyDigest = field(default_factory=LatencyDigest)
    # lost records per leader broker they were sent to (records sent with no known leader are left out)
    lost_by_leader: dict[int, int] = field(default_factory=dict)

    def merge(self, other: DeliveryCounts) -> None:
        for name in COUNT_FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.latency.merge(other.latency)
        for leader, lost in other.lost_by_leader.items():
            self.lost_by_leader[leader] = self.lost_by_leader.get(leader, 0) + lost

    def as_dict(self) -> dict[str, int | float | None]:
        return {**{name: getattr(self, name) for name in COUNT_FIELDS}, **self.latency.summary()}


@dataclass
class _PartitionState:
    next_seq: int = 0
    highest_received: int = -1
    pending: dict[int, float] = field(default_factory=dict)  # seq -> sent_ms: sent, not read, not failed
    sent_to: dict[int, int] = field(default_factory=dict)  # pending seq -> leader broker known when it was sent
    # Pending sequences without a delivery report whose SLA has not run out yet, in seq order.
    unacked: OrderedDict[int, float] = field(default_factory=OrderedDict)
    # (deadline_ms, seq) of acknowledged sequences; entries of sequences read since are skipped.
    read_deadlines: list[tuple[float, int]] = field(default_factory=list)
    acked_seqs: set[int] = field(default_factory=set)  # pending sequences the broker acknowledged
    lost_seqs: OrderedDict[int, None] = field(default_factory=OrderedDict)
    failed_seqs: OrderedDict[int, float] = field(default_factory=OrderedDict)  # seq -> sent_ms
    # The offsets of this session's records read, ascending (a cut removes those at and past
    # it), and their sequences: the last READ_MEMORY or so.
    read_offsets: array[int] = field(default_factory=lambda: array("q"))
    read_seqs: array[int] = field(default_factory=lambda: array("q"))
    window: DeliveryCounts = field(default_factory=DeliveryCounts)
    total: DeliveryCounts = field(default_factory=DeliveryCounts)


class CanaryAccounting:
    def __init__(self, session: str, partitions: list[int], sla_ms: float) -> None:
        if sla_ms <= 0:
            raise ValueError(f"the SLA must be positive, got {sla_ms!r} ms")
        self.session = session
        self.sla_ms = sla_ms
        self._partitions: dict[int, _PartitionState] = {}
        self.other_sessions = 0  # records of other sessions, ignored
        self.invalid = 0  # records that are no canary record, or name a sequence never sent
        for partition in partitions:
            self.add_partition(partition)

    @property
    def partitions(self) -> list[int]:
        return sorted(self._partitions)

    def add_partition(self, partition: int) -> None:
        self._partitions.setdefault(partition, _PartitionState())

    def _counts(self, state: _PartitionState) -> tuple[DeliveryCounts, DeliveryCounts]:
        return state.window, state.total

    # -- the sending side ------------------------------------------------------------

    def next_record(self, partition: int, now_ms: float) -> CanaryRecord:
        """The record to send next on ``partition`` (registered by record_sent once handed over)."""
        return CanaryRecord(self.session, partition, self._partitions[partition].next_seq, now_ms)

    def record_sent(self, record: CanaryRecord, leader: int | None = None) -> None:
        """``record`` was handed to the producer while ``leader`` led its partition (None: unknown)."""
        state = self._partitions[record.partition]
        if record.seq != state.next_seq:
            raise ValueError(f"partition {record.partition}: sent seq {record.seq}, expected {state.next_seq}")
        state.next_seq += 1
        state.pending[record.seq] = record.sent_ms
        if leader is not None and leader >= 0:
            state.sent_to[record.seq] = leader
        state.unacked[record.seq] = record.sent_ms
        for counts in self._counts(state):
            counts.sent += 1

    def record_acked(self, partition: int, seq: int, now_ms: float) -> None:
        """The broker acknowledged ``seq`` at ``now_ms``: from now on it can be lost."""
        state = self._partitions[partition]
        sent_ms = state.pending.get(seq)
        if sent_ms is None or seq in state.acked_seqs:
            return  # already read (the consumer can beat the delivery report), or a repeated report
        state.unacked.pop(seq, None)
        state.acked_seqs.add(seq)
        heapq.heappush(state.read_deadlines, (max(sent_ms, now_ms) + self.sla_ms, seq))

    def record_produce_error(self, partition: int, seq: int) -> None:
        """The producer reported that ``seq`` failed: the broker never took it, it is no longer expected."""
        state = self._partitions[partition]
        for counts in self._counts(state):
            counts.produce_errors += 1
        sent_ms = state.pending.pop(seq, None)
        if sent_ms is None:
            return  # read already (a timed-out send can still have been written), or never sent
        state.unacked.pop(seq, None)
        state.acked_seqs.discard(seq)
        state.sent_to.pop(seq, None)
        state.failed_seqs[seq] = sent_ms
        if len(state.failed_seqs) > LOST_MEMORY:
            state.failed_seqs.popitem(last=False)

    # -- the receiving side ----------------------------------------------------------

    def record_received(
        self, record: CanaryRecord | None, partition: int, now_ms: float, offset: int | None = None
    ) -> None:
        """A record read from ``partition`` at ``offset`` at ``now_ms`` (None: not a canary
        record; offset None: not known, nothing is compared)."""
        state = self._partitions.get(partition)
        if offset is not None and state is not None:
            self._count_truncated(state, offset, record)
        if record is None:
            self.invalid += 1
            return
        if record.session != self.session:
            self.other_sessions += 1
            return
        if state is None or record.partition != partition or record.seq >= state.next_seq:
            self.invalid += 1
            return
        if offset is not None and (not state.read_offsets or offset > state.read_offsets[-1]):
            state.read_offsets.append(offset)
            state.read_seqs.append(record.seq)
            if len(state.read_offsets) > 2 * READ_MEMORY:  # trimmed now and then, not at every read
                del state.read_offsets[:-READ_MEMORY]
                del state.read_seqs[:-READ_MEMORY]
        sent_ms = state.pending.pop(record.seq, None)
        if sent_ms is not None:
            state.unacked.pop(record.seq, None)
            state.acked_seqs.discard(record.seq)
            state.sent_to.pop(record.seq, None)
        else:
            sent_ms = state.failed_seqs.pop(record.seq, None)  # reported failed, yet written
        if sent_ms is not None:
            out_of_order = record.seq < state.highest_received
            state.highest_received = max(state.highest_received, record.seq)
            for counts in self._counts(state):
                counts.received += 1
                counts.latency.add(now_ms - sent_ms)
                if out_of_order:
                    counts.out_of_order += 1
        elif record.seq in state.lost_seqs:
            del state.lost_seqs[record.seq]  # a second copy of it is a duplicate
            for counts in self._counts(state):
                counts.late += 1
        else:
            for counts in self._counts(state):
                counts.duplicated += 1

    def _count_truncated(self, state: _PartitionState, offset: int, record: CanaryRecord | None) -> None:
        """A record read at ``offset``: if a record of this session read there before was
        another, the log was cut at or below ``offset``, and every record of this session read
        at or past it is gone from the cluster (truncated, each record once)."""
        offsets = state.read_offsets
        at = bisect_left(offsets, offset)
        if at == len(offsets) or offsets[at] != offset:
            return  # none of this session's records was read there
        if record is not None and record.session == self.session and record.seq == state.read_seqs[at]:
            return  # the same record read again (the consumer went back): nothing was cut
        gone = len(set(state.read_seqs[at:]))
        del offsets[at:]
        del state.read_seqs[at:]
        for counts in self._counts(state):
            counts.truncated += gone

    def expire(self, now_ms: float) -> int:
        """Declare lost every acknowledged record not read within its SLA; returns how many.

        Records whose SLA ran out without a delivery report are counted unacked (once),
        not lost: they stay pending until their report comes.
        """
        expired = 0
        for state in self._partitions.values():
            unacked = state.unacked
            while unacked:
                seq, sent_ms = next(iter(unacked.items()))
                if sent_ms + self.sla_ms >= now_ms:
                    break  # sequences are sent in order, so every later one is younger
                unacked.popitem(last=False)
                for counts in self._counts(state):
                    counts.unacked += 1
            deadlines = state.read_deadlines
            while deadlines and deadlines[0][0] < now_ms:
                _deadline, seq = heapq.heappop(deadlines)
                if seq not in state.acked_seqs:
                    continue  # read in time
                state.acked_seqs.remove(seq)
                del state.pending[seq]
                leader = state.sent_to.pop(seq, None)
                state.lost_seqs[seq] = None
                if len(state.lost_seqs) > LOST_MEMORY:
                    state.lost_seqs.popitem(last=False)
                for counts in self._counts(state):
                    counts.lost += 1
                    if leader is not None:
                        counts.lost_by_leader[leader] = counts.lost_by_leader.get(leader, 0) + 1
                expired += 1
        return expired

    # -- reporting -------------------------------------------------------------------

    def pending(self, partition: int) -> int:
        return len(self._partitions[partition].pending)

    def pending_total(self) -> int:
        return sum(len(state.pending) for state in self._partitions.values())

    def close_window(self) -> dict[int, DeliveryCounts]:
        """The counts since the last close, per partition; starts a new window."""
        closed = {}
        for partition, state in sorted(self._partitions.items()):
            closed[partition] = state.window
            state.window = DeliveryCounts()
        return closed

    def totals(self) -> dict[int, DeliveryCounts]:
        return {partition: state.total for partition, state in sorted(self._partitions.items())}

    def report(self) -> dict[str, object]:
        """``{"partitions": {p: {...}}, "totals": {...}}`` for the whole session."""
        overall = DeliveryCounts()
        partitions: dict[str, dict[str, object]] = {}
        for partition, counts in self.totals().items():
            overall.merge(counts)
            partitions[str(partition)] = {**counts.as_dict(), "pending": self.pending(partition)}
        return {
            "partitions": partitions,
            "totals": {
                **overall.as_dict(),
                "pending": self.pending_total(),
                "other_sessions": self.other_sessions,
                "invalid": self.invalid,
            },
        }
