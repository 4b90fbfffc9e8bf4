"""The topic's cleanup settings as the auditor reads them (spark_jobs/kafka_cleanup.py): pure
rules, then the real broker's DescribeConfigs."""

from __future__ import annotations

import pytest

from spark_jobs.kafka_cleanup import CLOCK_SLACK_MS, TopicCleanup, absent_keys_explained, read_topic_cleanup
from spark_jobs.kafka_offsets import KafkaReadError


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


@pytest.mark.integration
def test_it_reads_the_policy_and_lag_from_the_broker_and_names_an_unreadable_topic(make_topic, kafka_admin) -> None:
    compacted = make_topic("compacted", config={"cleanup.policy": "compact,delete", "min.compaction.lag.ms": "60000"})
    plain = make_topic("plain", config={"retention.ms": "3600000"})
    limited = make_topic("limited", config={"message.timestamp.before.max.ms": "7200000"})
    read = read_topic_cleanup(kafka_admin, compacted)
    assert (read.compacted, read.policy.replace(" ", ""), read.compaction_lag_ms) == (True, "compact,delete", 60000)
    # no limit on how old a record's timestamp may be: the broker's default, Long.MAX_VALUE
    assert read_topic_cleanup(kafka_admin, plain) == TopicCleanup("delete", 0, 3600000, (1 << 63) - 1)
    assert read_topic_cleanup(kafka_admin, limited).timestamp_before_max_ms == 7200000
    with pytest.raises(KafkaReadError, match=r"no-such-topic-cleanup.*cleanup\.policy"):
        read_topic_cleanup(kafka_admin, "no-such-topic-cleanup", timeout_s=5)
