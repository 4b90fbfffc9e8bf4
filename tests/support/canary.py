"""Helpers of the canary tests: watermarks read beside a running canary, a fault injected next to it."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from auditor.lab.cluster import delete_records
from auditor.pipelines.models import Cluster
from tests.support.waiting import wait_until


def high_watermark(consumer: Consumer, topic: str, partition: int) -> int:
    """The partition's end offset; -1 while a new topic's leader does not serve it yet."""
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=5)[1]
    except KafkaException:
        return -1


def watermark_reader(bootstrap: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}", "log_level": 0})


def start_early_in_a_minute(seconds_needed: float) -> None:
    """Wait for the next minute when fewer than ``seconds_needed`` are left of this one.

    The canary resolves a loss alert at the next minute that received records and lost none, so
    a run whose loss must still be open at its end has to close all its minutes before a
    boundary: a clean partial minute after the boundary would (rightly) resolve it.
    """
    left = 60 - time.time() % 60
    if left < seconds_needed:
        time.sleep(left + 0.2)


class Background(threading.Thread):
    """Runs a fault-injecting function next to the canary; re-raises its failure in join_checked."""

    def __init__(self, target: Any) -> None:
        super().__init__(daemon=True)
        self._target_fn = target
        self.error: BaseException | None = None
        self.result: Any = None

    def run(self) -> None:
        try:
            self.result = self._target_fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            self.error = exc

    def join_checked(self, timeout: float = 30) -> Any:
        self.join(timeout)
        if self.error is not None:
            raise self.error
        return self.result


def delete_first_records(bootstrap: str, admin: AdminClient, topic: str, partition: int = 0) -> int:
    """Once a running canary wrote at least 5 records to the partition, delete every record
    there (before its consumer starts: --consumer-delay); returns how many."""
    reader = watermark_reader(bootstrap)
    try:
        wait_until(lambda: high_watermark(reader, topic, partition) >= 5, 10, "canary records", 0.05)
        upto = high_watermark(reader, topic, partition)
        tp = TopicPartition(topic, partition, upto)
        delete_records(admin, [tp])
        return upto
    finally:
        reader.close()


def sasl_cluster(name: str) -> Cluster:
    """A configured cluster on the test stack's SASL_SSL listener (secrets as ${ENV} references)."""
    return Cluster.objects.create(
        name=name,
        bootstrap_servers="${KAFKA_SECURE_BOOTSTRAP_SERVERS}",
        config={
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "${KAFKA_SASL_USERNAME}",
            "sasl.password": "${KAFKA_SASL_PASSWORD}",
            "ssl.ca.location": "${KAFKA_CA_LOCATION}",
        },
    )
