"""The topic's cleanup settings as the auditor reads them (spark_jobs/kafka_cleanup.py): pure
rules, then the real broker's DescribeConfigs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from spark_jobs.binding import Binding, RecordKeySpec
from spark_jobs.kafka_cleanup import CLOCK_SLACK_MS, TopicCleanup, absent_keys_explained, read_topic_cleanup
from spark_jobs.kafka_offsets import KafkaReadError
from spark_jobs.reconcile_extract import compaction_horizon


def test_only_a_policy_naming_compact_has_a_compaction_horizon() -> None:
    now = 1_800_000_000_000
    assert TopicCleanup("delete").horizon_ms(now) is None
    assert TopicCleanup("compact").horizon_ms(now) == now + CLOCK_SLACK_MS
    # records younger than min.compaction.lag.ms are left alone (less the clock margin)
    assert TopicCleanup("compact,delete", compaction_lag_ms=3_600_000).horizon_ms(now) == (
        now - 3_600_000 + CLOCK_SLACK_MS
    )
    assert TopicCleanup("delete, compact").compacted


def test_only_an_item_keyed_other_than_by_its_record_key_can_lose_every_record_to_the_cleaner() -> None:
    assert not absent_keys_explained("key")
    assert absent_keys_explained("json") and absent_keys_explained("header")


def test_a_tombstone_takes_every_record_of_its_key_only_delete_retention_ms_after_it_was_cleaned() -> None:
    now = 1_800_000_000_000
    assert TopicCleanup("delete").emptied_horizon_ms(now) is None
    # Kafka's default delete.retention.ms, a day
    assert TopicCleanup("compact").emptied_horizon_ms(now) == now - 86_400_000 + CLOCK_SLACK_MS
    # min.compaction.lag.ms holds a tombstone back by its timestamp, which a producer may
    # backdate: it buys nothing
    lagged = TopicCleanup("compact", compaction_lag_ms=3_600_000, delete_retention_ms=600_000)
    assert lagged.emptied_horizon_ms(now) == now - 600_000 + CLOCK_SLACK_MS


def test_rows_keyed_by_the_record_key_are_unverifiable_only_where_no_run_read_a_tombstone_in_time() -> None:
    upper = datetime(2027, 1, 15, 12, tzinfo=UTC)
    cleanup = TopicCleanup("compact", delete_retention_ms=3_600_000)
    keyed = Binding("b", "t", "x", "unused", "t", "id", "c", RecordKeySpec("key"))
    other = Binding("b", "t", "x", "unused", "t", "id", "c", RecordKeySpec("json", "$.id"))
    lag_horizon = upper + timedelta(milliseconds=CLOCK_SLACK_MS)
    emptied = upper - timedelta(hours=1) + timedelta(milliseconds=CLOCK_SLACK_MS)
    # a first run (or --full) cannot know what a tombstone removed an hour or more ago
    until, rows_until, warnings = compaction_horizon(keyed, cleanup, upper, None)
    assert (until, rows_until) == (lag_horizon, emptied)
    assert "delete.retention.ms=3600000" in warnings[0] and "no earlier run" in warnings[0]
    # the horizon is taken when the read is over: a tombstone removed while it read went unseen
    read_end = upper + timedelta(minutes=10)
    assert compaction_horizon(keyed, cleanup, upper, None, read_end)[1] == emptied + timedelta(minutes=10)
    # a run that read the topic since then saw every tombstone the cleaner could have removed
    since = int((upper - timedelta(minutes=5)).timestamp() * 1000)
    assert compaction_horizon(keyed, cleanup, upper, since) == (lag_horizon, None, [])
    # runs further apart than delete.retention.ms leave a window unread
    long_ago = int((upper - timedelta(hours=2)).timestamp() * 1000)
    until, rows_until, warnings = compaction_horizon(keyed, cleanup, upper, long_ago)
    assert rows_until == emptied and "the last run began to read it at 2027-01-15T10:00:00+00:00" in warnings[0]
    # ... or a read that ends more than delete.retention.ms after the previous one began
    almost = int((upper - timedelta(minutes=58)).timestamp() * 1000)
    assert compaction_horizon(keyed, cleanup, upper, almost)[1] is None
    assert compaction_horizon(keyed, cleanup, upper, almost, upper + timedelta(minutes=5))[1] is not None
    # keyed otherwise, any record past min.compaction.lag.ms may be gone, whatever runs read
    assert compaction_horizon(other, cleanup, upper, since)[:2] == (lag_horizon, lag_horizon)
    assert compaction_horizon(keyed, TopicCleanup("delete"), upper, None) == (None, None, [])


@pytest.mark.integration
def test_it_reads_the_policy_and_lag_from_the_broker_and_names_an_unreadable_topic(make_topic, kafka_admin) -> None:
    compacted = make_topic(
        "compacted",
        config={"cleanup.policy": "compact,delete", "min.compaction.lag.ms": "60000", "delete.retention.ms": "5000"},
    )
    plain = make_topic("plain", config={"retention.ms": "3600000"})
    limited = make_topic("limited", config={"message.timestamp.before.max.ms": "7200000"})
    read = read_topic_cleanup(kafka_admin, compacted)
    assert (read.compacted, read.policy.replace(" ", ""), read.compaction_lag_ms) == (True, "compact,delete", 60000)
    assert read.delete_retention_ms == 5000
    # no limit on how old a record's timestamp may be: the broker's default, Long.MAX_VALUE
    assert read_topic_cleanup(kafka_admin, plain) == TopicCleanup("delete", 0, 3600000, (1 << 63) - 1)
    assert read_topic_cleanup(kafka_admin, limited).timestamp_before_max_ms == 7200000
    with pytest.raises(KafkaReadError, match=r"no-such-topic-cleanup.*cleanup\.policy"):
        read_topic_cleanup(kafka_admin, "no-such-topic-cleanup", timeout_s=5)
