"""Audit topic names (docs/contracts.md defaults) and an idempotent creator."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

PRODUCER_LEDGER_TOPIC = "_audit.producer-ledger"
CONSUMER_LEDGER_TOPIC = "_audit.consumer-ledger"
CLIENTS_TOPIC = "_audit.clients"
AUDIT_TOPICS: tuple[str, ...] = (PRODUCER_LEDGER_TOPIC, CONSUMER_LEDGER_TOPIC, CLIENTS_TOPIC)


def ensure_audit_topics(
    admin_config: Mapping[str, Any],
    topics: Iterable[str] = AUDIT_TOPICS,
    partitions: int = 3,
    replication_factor: int | None = None,
    topic_config: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
) -> list[str]:
    """Create the audit topics that do not exist yet; returns the names created.

    The replication factor defaults to min(3, brokers in the cluster) with
    min.insync.replicas 2 when it is 3, so ledgers get the durability the
    auditor asks of everyone else. Topics that already exist are left alone.
    """
    admin = AdminClient(dict(admin_config))
    metadata = admin.list_topics(timeout=timeout_s)
    existing = set(metadata.topics)
    wanted = [name for name in topics if name not in existing]
    if not wanted:
        return []
    rf = replication_factor or min(3, max(1, len(metadata.brokers)))
    config = {"min.insync.replicas": "2"} if rf >= 3 else {}
    config.update(topic_config or {})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=rf, config=config) for name in wanted],
        operation_timeout=timeout_s,
        request_timeout=timeout_s,
    )
    created: list[str] = []
    for name, future in futures.items():
        try:
            future.result(timeout=timeout_s)
            created.append(name)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not (isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise
    return created
