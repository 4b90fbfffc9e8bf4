"""A follower frozen (SIGSTOP) while in sync, and records its leader acks alone (acks=1) beyond
the high watermark it holds back; through a contract-v2 AuditedProducer, whose ledger names no
partition or offset. Ground truth: the producer's delivery reports and full reads of the topic."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from confluent_kafka import KafkaError, Message

from auditor.lab.cluster import Cluster as LabCluster
from auditor.probes.producer import AuditedProducer
from tests.support.demo import DemoPipeline


def produce_v2_acks_1(pipeline: DemoPipeline, ticket_id: str, delivered: dict[str, tuple[int, int]]) -> float:
    """One record of `ticket_id` through a probed contract-v2 producer with acks=1, closed (its
    ledger flushed: an `acked` range and the `keys` record naming the ticket); its delivery
    report, which must be an ack, goes to `delivered` (ticket → partition, offset). Returns
    when it was acked (epoch seconds)."""
    acked_at: list[float] = []

    def report(err: KafkaError | None, msg: Message) -> None:
        assert err is None, err
        delivered[ticket_id] = (msg.partition(), msg.offset())
        acked_at.append(time.time())

    producer = AuditedProducer(
        {**pipeline.kafka_config, "acks": "1", "enable.idempotence": False, "linger.ms": 0},
        ledger_topic=pipeline.probes.producer_ledger,
        clients_topic=pipeline.probes.clients,
        ledger_flush_interval_s=0.2,
        ledger_flush_timeout_s=60,
        delivery_reports="all",
    )
    producer.produce(pipeline.topic, b"{}", ticket_id.encode(), on_delivery=report)
    # the ledger's own acks=all writes wait for the frozen broker to be fenced where it holds a
    # replica of the ledger: up to broker.session.timeout.ms (9 s)
    assert producer.close(90) == 0
    assert ticket_id in delivered and acked_at
    return acked_at[0]


@contextmanager
def frozen_follower(cluster: LabCluster, topic: str, replicated_below: int) -> Iterator[int]:
    """Once the follower of `topic`/0 has every record below `replicated_below` (the high
    watermark passed them), freeze it and yield its id; it is resumed, and back in sync, after."""
    start = cluster.partition(topic)
    follower = next(r for r in start.replicas if r != start.leader)
    cluster.wait_for_isr(topic, 2)
    deadline = time.monotonic() + 30
    while cluster.watermarks(topic)[0][1] < replicated_below:
        assert time.monotonic() < deadline, "the follower did not fetch the records"
        time.sleep(0.2)
    cluster.broker("pause", follower)
    try:
        # the follower's last fetch request may still wait at the leader (replica.fetch.wait.max.ms,
        # 500 ms) and would carry a record appended meanwhile: once it expired, it asks for nothing
        time.sleep(1.0)
        yield follower
    finally:
        cluster.broker("resume", follower)
    cluster.wait_for_isr(topic, 2)


def read_once_thawed(cluster: LabCluster, topic: str, key: str) -> dict[str, int]:
    """A full read of `topic` (key → offset) once it holds `key`, or after a minute."""
    deadline = time.monotonic() + 60
    while True:
        thawed = {record.key: record.offset for record in cluster.read_topic(topic)}
        if key in thawed or time.monotonic() > deadline:
            return thawed
        time.sleep(0.5)
