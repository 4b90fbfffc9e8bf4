"""An acknowledged record at or past the high watermark: truncated, or held back by a follower.

With acks=1 (and with acks=0, or acks not known) a leader acks a record once it has written
it, before any follower has it. The high watermark passes the record only once every in-sync
replica has fetched it, and a follower that stops fetching (paused, a long GC, a hung disk)
stays in the in-sync set until its last catch-up, which came before the record was written,
is replica.lag.time.max.ms old; the leader looks for such followers every half of that
(ReplicaManager's isr-expiration task). Until then a record the leader still holds stays
beyond the high watermark: no reader sees it, and it is not lost. An ack with acks=all, or a
reconciliation run's sighting, proves the high watermark once passed the offset; this one
does not, so "beyond the log end at both of the diagnosis's reads" proves a truncation only
once the ack is older than that, as the diagnosis's clock reads it at its second read of the
log end (the later the read, the stronger what it shows), and while the partition is not
under min.insync.replicas: then the leader does not advance the high watermark at all.
"""

from __future__ import annotations

from typing import Any

from auditor.stuck.evidence import ClusterView, ms_to_iso
from spark_jobs.watermark_hold import (  # the mechanism the reconciliation's driver shares
    CLOCK_MARGIN_MS,
    hold_ms,
    lag_bound_unread,
    longest_lag_bound,
    may_be_held,
    under_min_isr,
)

__all__ = ["held_back", "hold_ms", "lag_bound_unread", "longest_lag_bound", "under_min_isr"]


def held_back(
    view: ClusterView, partition: int | None, session: str, acked_ms: int | None, evidence: dict[str, Any]
) -> str | None:
    """Why an ack of producer session `session` at `acked_ms` (its producer's clock) of a record
    not in the topic, at or past the high watermark at both of the diagnosis's reads, may be of
    a record its leader still holds; None when it cannot be (then it was truncated). `partition`
    None: the ack names none (contract v2 ranges), so the record may be beyond the log end of
    any partition, and a stall of any one of them speaks for it.

    An acks=all ack came once the high watermark had passed the record. Another one did not; its
    record, if the leader that acked it still leads, is held back by a follower that stopped
    fetching (for `hold_ms` after it was written) or by the partition being under
    min.insync.replicas (however long). Had the leader changed since, the new one would either
    hold the record below the start offset of its epoch, which its high watermark has passed
    before it answers for the log end (Kafka refuses ListOffsets until then: OFFSET_NOT_AVAILABLE),
    or not hold it: lost."""
    if session in view.acks_all_sessions:
        return None
    alone = f"the producer session {session} is not known to ack with acks=all, so the leader may have acked it alone"
    read_ms = view.read_done_ms or view.now_ms  # (no later than the second read of the log end)
    held_ms = hold_ms(view.replica_lag_max_ms)
    # the ack's time is its producer's clock: the usual margin for clocks that drift
    if not may_be_held(acked_ms, view.replica_lag_max_ms, read_ms):
        if partition is None:
            stalls = sorted(view.stalled.items())
            stall = "; ".join(why for _, why in stalls) if stalls else None
            if view.stalled_error is not None:
                stall = f"whether the partitions of {view.topic} are under min.insync.replicas could not be read ({view.stalled_error})"
            if stall is None:
                return None
            stall = f"the ledger does not say which partition it went to, and {stall}"
        elif view.stalled_error is None and partition not in view.stalled:
            return None
        else:
            stall = view.stalled.get(partition) or (
                f"whether {view.topic}/{partition} is under min.insync.replicas could not be read ({view.stalled_error})"
            )
        evidence["stalled_watermark"] = stall
        return f"{alone}, and {stall}: lost or still held back cannot be told"
    evidence["held_watermark"] = {
        "acked_at": ms_to_iso(acked_ms),
        "log_end_read_at": ms_to_iso(read_ms),
        "replica_lag_time_max_ms": view.replica_lag_max_ms,
        "replica_lag_note": view.replica_lag_note,
    }
    acked = "at an unknown time" if acked_ms is None else f"at {ms_to_iso(acked_ms)}"
    assumed = f" ({view.replica_lag_note})" if view.replica_lag_note else ""
    return (
        f"{alone} ({acked}), and a follower that stopped fetching stays in sync, holding the high watermark below "
        f"it, for up to {held_ms / 1000:g} s after it was written (replica.lag.time.max.ms {view.replica_lag_max_ms}"
        f"{assumed}, checked every half of it) plus {CLOCK_MARGIN_MS // 1000} s for the producer's clock, "
        f"a span not over when this diagnosis read the log end ({ms_to_iso(read_ms)}): lost or still held back "
        "cannot be told"
    )
