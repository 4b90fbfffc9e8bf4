"""Driver-side Kafka look-ups: partitions, watermarks, last stable offsets, committed offsets.

These are tiny (one value per partition or per group and partition); everything per record
is read by Spark executors.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka._model import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient, OffsetSpec

# librdkafka settings that are meaningful to the AdminClient (the rest of a cluster's
# config may be producer- or consumer-only and would be rejected or warned about).
_ADMIN_KEYS_PREFIXES = ("security.", "sasl.", "ssl.", "client.", "socket.", "broker.")


class KafkaReadError(RuntimeError):
    """Kafka could not be read (broker unreachable, topic missing, request failed)."""


@dataclass(frozen=True)
class PartitionOffsets:
    partition: int
    low: int  # log start offset (earlier records are gone: retention or deletion)
    stable: int  # last stable offset: read_committed readers stop here
    high: int  # high watermark


def admin_client(bootstrap_servers: str, config: dict[str, str] | None = None, timeout_s: float = 10.0) -> AdminClient:
    conf: dict[str, str | int] = {k: v for k, v in (config or {}).items() if k.startswith(_ADMIN_KEYS_PREFIXES)}
    conf.update(
        {
            "bootstrap.servers": bootstrap_servers,
            "socket.timeout.ms": int(timeout_s * 1000),
            "socket.connection.setup.timeout.ms": int(timeout_s * 1000),
        }
    )
    return AdminClient(conf)


def topic_partitions(admin: AdminClient, topic: str, timeout_s: float = 10.0, required: bool = True) -> list[int]:
    """The topic's partition ids; [] for a missing topic when not required."""
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise KafkaReadError(f"Kafka unreachable while listing topics: {exc}") from exc
    info = metadata.topics.get(topic)
    if info is None or info.error is not None:
        if not required:
            return []
        reason = info.error if info is not None else "not found"
        raise KafkaReadError(f"topic {topic!r} cannot be read: {reason}")
    return sorted(info.partitions)


def partition_offsets(
    admin: AdminClient, topic: str, partitions: list[int], timeout_s: float = 10.0
) -> dict[int, PartitionOffsets]:
    """Log start, last stable and high watermark offsets of each partition."""
    if not partitions:
        return {}
    tps = [TopicPartition(topic, p) for p in partitions]

    def query(spec: OffsetSpec, isolation: IsolationLevel) -> dict[int, int]:
        try:
            futures = admin.list_offsets({tp: spec for tp in tps}, isolation_level=isolation, request_timeout=timeout_s)
            return {tp.partition: future.result().offset for tp, future in futures.items()}
        except KafkaException as exc:
            raise KafkaReadError(f"listing offsets of topic {topic!r} failed: {exc}") from exc

    low = query(OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED)
    stable = query(OffsetSpec.latest(), IsolationLevel.READ_COMMITTED)
    high = query(OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED)
    return {p: PartitionOffsets(p, low[p], stable[p], high[p]) for p in partitions}


def committed_offsets(
    admin: AdminClient, groups: list[str] | tuple[str, ...], topic: str, partitions: list[int], timeout_s: float = 10.0
) -> list[tuple[str, int, int]]:
    """(group, partition, committed offset) for partitions where the group has committed."""
    rows: list[tuple[str, int, int]] = []
    for group in groups:
        request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in partitions])]
        try:
            result = admin.list_consumer_group_offsets(request, request_timeout=timeout_s)[group].result()
        except KafkaException as exc:
            raise KafkaReadError(f"reading committed offsets of group {group!r} failed: {exc}") from exc
        for tp in result.topic_partitions:
            if tp.error is not None:
                raise KafkaReadError(f"committed offset of group {group!r} on {topic}/{tp.partition}: {tp.error}")
            if tp.offset >= 0:
                rows.append((group, tp.partition, tp.offset))
    return rows
