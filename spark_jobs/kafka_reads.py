"""Reading whole offset ranges of a topic with a confluent-kafka consumer, on the driver:
the stuck locate's Python engine reads the topic and both ledgers with it, the diagnosis and
reconciliation the groups' partitions of `__consumer_offsets` (spark_jobs.commit_history)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from spark_jobs.kafka_offsets import KafkaReadError
from spark_jobs.kafka_security import connection_settings


def _reader(bootstrap: str, config: dict[str, str], isolation: str, group_prefix: str) -> Consumer:
    return Consumer(
        {
            **connection_settings(config),
            "bootstrap.servers": bootstrap,
            "group.id": f"{group_prefix}-{uuid.uuid4().hex}",  # assigned, never committed
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            # a start offset deleted under the read (retention, delete_records) is an error:
            # librdkafka's default (latest) would skip silently to the end of the partition
            "auto.offset.reset": "error",
            "fetch.queue.backoff.ms": 10,
        }
    )


def read_ranges(
    bootstrap: str,
    config: dict[str, str],
    topic: str,
    ranges: dict[int, tuple[int, int]],
    isolation: str = "read_uncommitted",
    idle_timeout_s: float = 30.0,
    error: Callable[[str], Exception] = KafkaReadError,
    group_prefix: str = "auditor-read",
) -> Iterator[Message]:
    """Every record of ``topic`` in [start, end) per partition, in partition order per partition.

    The range is read whole or not at all: a partition whose end of log comes before `end`
    (its log end moved back since the range was planned: a leader whose high watermark has
    not caught up with its predecessor's, or a truncation) raises `error`, never a read that
    silently stopped short (its records would look absent: never produced, or lost)."""
    wanted = {p: (s, e) for p, (s, e) in ranges.items() if e > s}
    if not wanted:
        return
    consumer = _reader(bootstrap, config, isolation, group_prefix)
    try:
        consumer.assign([TopicPartition(topic, p, s) for p, (s, _) in wanted.items()])
        pending = set(wanted)
        last_progress = time.monotonic()
        while pending:
            batch = consumer.consume(1000, 0.5)
            if not batch and time.monotonic() - last_progress > idle_timeout_s:
                raise error(f"reading {topic} stalled: partitions {sorted(pending)} did not reach their end")
            for msg in batch:
                partition = msg.partition()
                failed = msg.error()
                if failed is not None:
                    if failed.code() == KafkaError._PARTITION_EOF:
                        at = msg.offset()
                        end = wanted[partition][1] if partition is not None and partition in pending else None
                        if end is not None and at is not None and 0 <= at < end:
                            raise error(
                                f"reading {topic}/{partition} reached the end of its log at offset {at}, before "
                                f"offset {end} where it ended when the read was planned: its log end moved back "
                                "(a leader change or a truncation under the read); diagnose again"
                            )
                        pending.discard(partition)
                        continue
                    raise error(f"reading {topic}/{partition} failed: {failed.str()}")
                last_progress = time.monotonic()
                if partition not in pending:
                    continue
                end = wanted[partition][1]
                offset: int = msg.offset()  # type: ignore[assignment]  # a record has its offset
                if offset >= end:
                    pending.discard(partition)
                    continue
                yield msg
                if offset >= end - 1:
                    pending.discard(partition)
    finally:
        consumer.close()
