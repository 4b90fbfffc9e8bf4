"""Inline evidence for the verdict rules' unit tests (tests/stuck/test_verdicts.py and the
tests beside it): one stuck row and the cluster view around it."""

from __future__ import annotations

from datetime import UTC, datetime

from auditor.stuck.evidence import ClusterView, GroupState, LedgerView, PartitionState, StuckRow

NOW_MS = 1_800_000_000_000
CREATED = datetime.fromtimestamp((NOW_MS - 3600_000) / 1000, UTC)  # an hour ago
ROW = StuckRow("TCK-7", "NEW", 3600.0, CREATED, created=CREATED)  # the age column is the created column
PROBED_SINCE_MS = NOW_MS - 36_000_000  # the producer probed for ten hours


def view(
    low: int = 0, high: int = 10, stable: int | None = None, committed: int | None = None, **extra: object
) -> ClusterView:
    group = GroupState("g", committed={} if committed is None else {0: committed}, members=1, state="stable")
    group.marks_on_topic = 5
    group.first_mark, group.first_mark_ms = {0: 0}, NOW_MS - 36_000_000  # probed for ten hours
    cluster = ClusterView(
        topic="tickets",
        now_ms=NOW_MS,
        partitions={
            0: PartitionState(0, low, high if stable is None else stable, high, NOW_MS - 7200_000 if low else None)
        },
        groups={"g": group},
        producer_ledger=LedgerView("pl", True, entries_for_topic=10, covers_topic_from_ms=PROBED_SINCE_MS),
        consumer_ledger=LedgerView("cl", True),
        records_scanned=high - low,
        keyed_records=high - low,
    )
    for name, value in extra.items():
        setattr(cluster, name, value)
    return cluster
