"""A follower frozen (SIGSTOP) while in sync, and records its leader acks alone (acks=1) beyond
the high watermark it holds back; through a probed producer of either contract (a contract-v2
AuditedProducer's ledger names no partition or offset). Ground truth: the producer's delivery
reports and full reads of the topic."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

from confluent_kafka import KafkaError, Message

from auditor.lab.cluster import Cluster as LabCluster
from auditor.probes.producer import AuditedProducer
from auditor.probes.producer_v1 import AuditedProducerV1
from tests.support.demo import DemoPipeline


@dataclass
class HeldWatermark:
    """A demo pipeline whose topic (made by the `make_held_watermark` fixture) has one partition
    on two replicas under min.insync.replicas 2: the follower, once frozen, is its only other
    replica, and once the controller fences it the partition is under min.insync.replicas and
    its high watermark stays. Two of the pipeline's tickets: `before`, to be acked before the
    follower freezes, and `held`, while it is frozen. `delivered`: ticket → (partition, offset),
    from the delivery reports."""

    pipeline: DemoPipeline
    cluster: LabCluster
    before: str
    held: str
    delivered: dict[str, tuple[int, int]] = field(default_factory=dict)

    def produce(self, ticket_id: str) -> float:
        """One record of `ticket_id` through a probed producer of the pipeline's contract with
        acks=1, closed (its ledger flushed; a contract-v2 one: an `acked` range and the `keys`
        record naming the ticket); its delivery report, which must be an ack, goes to
        `delivered`. Returns when it was acked (epoch seconds)."""
        acked_at: list[float] = []

        def report(err: KafkaError | None, msg: Message) -> None:
            assert err is None, err
            self.delivered[ticket_id] = (cast(int, msg.partition()), cast(int, msg.offset()))
            acked_at.append(time.time())

        config = {**self.pipeline.kafka_config, "acks": "1", "enable.idempotence": False, "linger.ms": 0}
        ledgers: dict[str, Any] = {
            "ledger_topic": self.pipeline.probes.producer_ledger,
            "clients_topic": self.pipeline.probes.clients,
            "ledger_flush_interval_s": 0.2,
            "ledger_flush_timeout_s": 60,
        }
        producer: AuditedProducer | AuditedProducerV1
        if self.pipeline.probes.contract == 1:
            producer = AuditedProducerV1(config, **ledgers)
        else:
            producer = AuditedProducer(config, **ledgers, delivery_reports="all")
        producer.produce(self.pipeline.topic, b"{}", ticket_id.encode(), on_delivery=report)
        # the ledger's own acks=all writes wait for the frozen broker to be fenced where it holds a
        # replica of the ledger: up to broker.session.timeout.ms (9 s)
        assert producer.close(90) == 0
        assert ticket_id in self.delivered and acked_at
        return acked_at[0]

    @contextmanager
    def follower_frozen(self) -> Iterator[int]:
        """The topic's follower frozen once it has `before` (see frozen_follower)."""
        with frozen_follower(self.cluster, self.pipeline.topic, self.delivered[self.before][1] + 1) as follower:
            yield follower

    def assert_held_back(self) -> None:
        """Ground truth while the follower is frozen: `held` acked at its offset, and a full read
        of the topic ends before it (the high watermark has not passed it)."""
        frozen_read = {record.key: record.offset for record in self.cluster.read_topic(self.pipeline.topic)}
        assert frozen_read == {self.before: self.delivered[self.before][1]}, frozen_read
        assert self.cluster.watermarks(self.pipeline.topic)[0][1] <= self.delivered[self.held][1]

    def assert_at_the_acked_offsets_once_thawed(self) -> None:
        """Ground truth after the thaw: `held` is at the offset its ack named. Never lost."""
        thawed = read_once_thawed(self.cluster, self.pipeline.topic, self.held)
        assert thawed == {self.before: self.delivered[self.before][1], self.held: self.delivered[self.held][1]}, thawed


@contextmanager
def frozen_follower(cluster: LabCluster, topic: str, replicated_below: int = 0) -> Iterator[int]:
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


def read_once_thawed(cluster: LabCluster, topic: str, key: str) -> dict[str | None, int]:
    """A full read of `topic` (key → offset) once it holds `key`, or after a minute."""
    deadline = time.monotonic() + 60
    while True:
        thawed = {record.key: record.offset for record in cluster.read_topic(topic)}
        if key in thawed or time.monotonic() > deadline:
            return thawed
        time.sleep(0.5)
