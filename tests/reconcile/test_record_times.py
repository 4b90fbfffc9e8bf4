"""When a record's timestamp bounds when deleted records were written (spark_jobs.record_times),
and what reconciliation's horizons and the stuck diagnosis's completeness make of it. Pure
functions: no broker (tests/stuck/test_memory_verdicts.py runs it against one)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from auditor.pipelines.models import Binding
from auditor.reconcile.memory import recalled_stamps
from auditor.stuck.evidence import ClusterView, PartitionState
from spark_jobs.reconcile_extract import OffsetRange, loss_horizon, recreation_horizon
from spark_jobs.record_times import (
    SLACK_MS,
    UNLIMITED_MS,
    Backdated,
    find_backdated,
    stamp_lag_ms,
    written_after_read,
)

READ_AT = 1_800_000_000_000  # when the earlier run began to read the log ends


def test_only_a_record_past_the_high_watermark_read_proves_a_timestamp_older_than_its_write():
    oldest = {0: (READ_AT - SLACK_MS - 1, 10), 1: (READ_AT - 3_600_000, 4), 2: (READ_AT - 3_600_000, 7)}
    # partition 0 from offset 10 on was written after the read, stamped just past the slack before it
    found = find_backdated("t", oldest, {0: 10, 1: 5, 2: 8}, READ_AT, "run-1")
    assert found == Backdated("t", 0, 10, READ_AT - SLACK_MS - 1, READ_AT, "run-1")
    assert "t/0@10 carries the timestamp" in found.describe() and "run-1" in found.describe()
    # within the slack: a record written just before the read, not yet replicated, a clock, or a
    # send retried until the producer's default delivery.timeout.ms
    assert find_backdated("t", {0: (READ_AT - SLACK_MS, 10)}, {0: 10}, READ_AT, "run-1") is None
    # or within the binding's grace, which the bounds allow already
    assert find_backdated("t", {0: oldest[0]}, {0: 10}, READ_AT, "run-1", grace_ms=600_000) is None
    assert find_backdated("t", {0: (READ_AT - 600_001, 10)}, {0: 10}, READ_AT, "run-1", grace_ms=600_000)
    # below the high watermark read (1, 2) or in a partition the run did not read (3): it may be old
    assert find_backdated("t", {1: oldest[1], 2: oldest[2], 3: (0, 0)}, {1: 5, 2: 8}, READ_AT, "run-1") is None
    # a state from before the read's time was kept proves nothing
    assert find_backdated("t", oldest, {0: 10}, None, "run-1") is None
    assert Backdated.from_json(found.to_json()) == found and Backdated.from_json(None) is None


def test_every_record_of_a_partition_added_after_the_read_was_written_after_it():
    # The read saw partitions 0 and 1 (a run's high watermarks name every partition it had).
    read_to = written_after_read({0: 10, 1: 0}, [0, 1, 2])
    assert read_to == {0: 10, 1: 0, 2: 0}
    oldest = {2: (READ_AT - 3_600_000, 0)}  # partition 2, added since, at its first offset
    assert find_backdated("t", oldest, read_to, READ_AT, "run-1") == Backdated(
        "t", 2, 0, *oldest[2][:1], READ_AT, "run-1"
    )
    # without the read's watermarks (no run yet, an older state) nothing is known to be written after it
    assert written_after_read({}, [0, 1, 2]) == {}
    # state.json's keys are strings: partition 0 is the one read, not one added since
    assert written_after_read({"0": "10"}, [0, 1]) == {0: 10, 1: 0}
    # a topic created again since the read (another id): every record of it came after
    assert written_after_read({0: 10, 1: 4}, [0, 1], recreated=True) == {0: 0, 1: 0}
    assert written_after_read({}, [0], recreated=True) == {0: 0}


def test_the_diagnosis_takes_the_topic_created_again_since_the_read_from_its_start():
    binding = Binding(topic="t", grace_seconds=1)
    old = READ_AT - 3_600_000  # partition 0's oldest record now, at offset 2: below the read's 10
    partitions = {0: PartitionState(0, 2, 12, 12, low_timestamp_ms=old)}
    meta = {"run_id": "run-1", "read_at_ms": READ_AT, "read_highs": {"0": 10}, "topic_id": "A"}
    assert recalled_stamps(binding, partitions, meta, "A") is None  # the topic read: below its watermark
    assert recalled_stamps(binding, partitions, meta, None) is None  # its id unknown now: as read
    assert recalled_stamps(binding, partitions, meta | {"topic_id": None}, "B") is None  # the read's unknown
    # Another topic now: every record of it was written after the read, so one stamped an hour
    # before the read proves its producers backdate.
    assert recalled_stamps(binding, partitions, meta, "B") == Backdated("t", 0, 2, old, READ_AT, "run-1")


def test_once_backdating_is_seen_only_the_brokers_limit_on_a_timestamps_age_bounds_it():
    seen = Backdated("t", 0, 10, 0, 1, "run-1")
    assert stamp_lag_ms(None, None) == 0
    assert stamp_lag_ms(seen, None) is None
    assert stamp_lag_ms(seen, UNLIMITED_MS) is None  # Long.MAX_VALUE, the broker's default
    assert stamp_lag_ms(seen, 7_200_000) == 7_200_000


def test_the_loss_and_recreation_horizons_add_the_lag_or_give_up():
    upper = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    first = int((upper - timedelta(hours=1)).timestamp() * 1000)
    lost = OffsetRange("t", ranges={0: (5, 9)}, lost={0: (0, 5)})
    assert loss_horizon({0: first}, lost, upper, 120) == upper - timedelta(minutes=58)
    assert loss_horizon({0: first}, lost, upper, 120, 1_800_000) == upper - timedelta(minutes=28)
    assert loss_horizon({0: first}, lost, upper, 120, None) == upper
    assert loss_horizon({0: first}, OffsetRange("t", ranges={0: (5, 9)}), upper, 120, None) is None  # nothing lost
    assert recreation_horizon({0: first}, upper, 0, 1_800_000) == upper - timedelta(minutes=30)
    assert recreation_horizon({0: first}, upper, 0, None) == upper


def test_the_diagnosis_takes_the_oldest_records_timestamp_as_its_write_only_while_nothing_says_otherwise():
    view = ClusterView("t", now_ms=READ_AT, partitions={0: PartitionState(0, 5, 9, 9, low_timestamp_ms=READ_AT)})
    assert view.topic_complete_since_ms() == READ_AT
    view.stamp_lag_ms = 600_000
    assert view.topic_complete_since_ms() == READ_AT + 600_000
    view.stamp_lag_ms = None
    assert view.topic_complete_since_ms() is None
    # a partition that never lost a record holds everything whatever its timestamps
    assert view.partition_complete_since_ms(PartitionState(1, 0, 9, 9, low_timestamp_ms=0)) == 0
