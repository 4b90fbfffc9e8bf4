"""How a topic removes records: its cleanup.policy, and what log compaction means for an audit.

Retention moves the log start, which every reader sees. Compaction (cleanup.policy=compact)
leaves the log start alone and removes records from the middle of the log: the log cleaner
drops a record once a later record has the same record key (and drops a tombstone, a record
with no value, after delete.retention.ms). What it drops was delivered. So on a compacted
topic "no record at that offset" or "no record with this key" is not evidence of a loss,
unless compaction cannot have removed it:

- the cleaner keeps every record key's last record, so when the binding's key is the record
  key, a key with no record at all was not compacted away, unless its last record was a
  tombstone: the cleaner removes a tombstone delete.retention.ms after it cleaned it, and
  with it every trace of the key. Only records written up to now - delete.retention.ms can
  have gone that way (emptied_horizon_ms), and a run that read the tombstone remembers it;
- the cleaner leaves records younger than min.compaction.lag.ms alone (by record timestamp),
  so records produced after now - min.compaction.lag.ms are all still there.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from spark_jobs.kafka_offsets import KafkaReadError

# Record timestamps come from producers' clocks (CreateTime): the same margin as the stuck
# diagnosis's completeness checks.
CLOCK_SLACK_MS = 60_000
# Kafka's default delete.retention.ms (log.cleaner.delete.retention.ms): a day
DEFAULT_DELETE_RETENTION_MS = 86_400_000


@dataclass(frozen=True)
class TopicCleanup:
    policy: str  # cleanup.policy as the broker reports it: delete, compact or compact,delete
    compaction_lag_ms: int = 0  # min.compaction.lag.ms
    retention_ms: int | None = None  # retention.ms (-1: forever)
    # message.timestamp.before.max.ms: the broker refuses records stamped longer ago than
    # this (None: no limit; record_times.stamp_lag_ms)
    timestamp_before_max_ms: int | None = None
    # delete.retention.ms: how long the cleaner keeps a tombstone after it cleaned it
    delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS

    @property
    def compacted(self) -> bool:
        return "compact" in {p.strip() for p in self.policy.split(",")}

    def describe(self) -> str:
        return f"cleanup.policy={self.policy}, min.compaction.lag.ms={self.compaction_lag_ms}"

    def horizon_ms(self, now_ms: int) -> int | None:
        """Records produced at or before this instant may have been removed by the cleaner
        although they were delivered (None: the topic is not compacted). Only those younger
        than min.compaction.lag.ms are certainly still there.

        Which absences it explains depends on the binding: a record superseded by a later one
        with the same record key, always; an item with no record at all, only when the
        binding's key is not the record key (absent_keys_explained)."""
        if not self.compacted:
            return None
        return now_ms - self.compaction_lag_ms + CLOCK_SLACK_MS

    def emptied_horizon_ms(self, now_ms: int) -> int | None:
        """Records written at or before this instant may have lost every record of their
        record key, a tombstone after them included (None: the topic is not compacted).

        The cleaner removes a record once a later one has its key, a tombstone included, and
        the tombstone delete.retention.ms after it cleaned it, which it does no sooner than
        it was written: a key whose tombstone was written after this instant keeps a trace.
        min.compaction.lag.ms is not counted: it holds a tombstone back by its timestamp,
        which a producer may have backdated."""
        if not self.compacted:
            return None
        return now_ms - self.delete_retention_ms + CLOCK_SLACK_MS


def absent_keys_explained(record_key_source: str) -> bool:
    """Can compaction remove every record of an item? Only when the item's key is not the
    record key (a header, a JSON path): the cleaner keeps each record key's last record."""
    return record_key_source != "key"


def read_topic_cleanup(admin: AdminClient, topic: str, timeout_s: float = 10.0) -> TopicCleanup:
    """The topic's cleanup settings (DescribeConfigs on the topic)."""
    try:
        futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)], request_timeout=timeout_s)
        configs = next(iter(futures.values())).result(timeout=timeout_s)
    except (KafkaException, TimeoutError) as exc:
        raise KafkaReadError(
            f"the configuration of topic {topic!r} could not be read from Kafka (DescribeConfigs): "
            f"{exc or type(exc).__name__}; the auditor needs its cleanup.policy to tell records removed by log "
            "compaction from lost ones"
        ) from exc

    def value(name: str) -> str | None:
        entry = configs.get(name)
        return None if entry is None or entry.value is None else str(entry.value)

    try:
        lag = int(value("min.compaction.lag.ms") or 0)
        retention = value("retention.ms")
        before_max = value("message.timestamp.before.max.ms")
        delete_retention = value("delete.retention.ms")
        return TopicCleanup(
            value("cleanup.policy") or "delete",
            lag,
            None if retention is None else int(retention),
            None if before_max is None else int(before_max),
            DEFAULT_DELETE_RETENTION_MS if delete_retention is None else int(delete_retention),
        )
    except ValueError as exc:
        raise KafkaReadError(f"topic {topic!r} reports an unreadable cleanup setting: {exc}") from exc
