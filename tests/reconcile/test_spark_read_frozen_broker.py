"""Spark's Kafka source while one of three brokers is frozen (SIGSTOP). The frozen broker's
kernel still accepts connections, so a fresh Java client that bootstraps from it waits for an
answer that never comes: every reconciliation run of the lab's frozen-broker scenario failed
(`Timed out waiting for a node assignment. Call: listNodes`) and published nothing. Once the
controller has fenced the broker, the reads must go to the brokers that answer, and return
every acked record."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from auditor.lab.cluster import Cluster, wait_until
from spark_jobs.binding import Binding, RecordKeySpec
from spark_jobs.kafka_offsets import live_bootstrap_servers
from spark_jobs.reconcile_extract import OffsetRange, extract_topic

pytestmark = [pytest.mark.alone, pytest.mark.integration]

PER_PARTITION = 10


def test_a_fenced_frozen_broker_is_left_out_of_the_spark_reads_bootstrap(
    spark: SparkSession, make_topic: Callable[..., str], kafka_bootstrap: str, kafka_brokers: int
) -> None:
    if kafka_brokers < 3:
        pytest.skip("needs the 3-broker test stack")
    topic = make_topic("frozen-read", partitions=3, replication_factor=3, config={"min.insync.replicas": "2"})
    acked: set[tuple[int, int, str]] = set()

    def report(error: object, message: object) -> None:
        if error is None:
            acked.add((message.partition(), message.offset(), message.key().decode()))  # type: ignore[attr-defined]

    producer = Producer({"bootstrap.servers": kafka_bootstrap, "acks": "all"})
    for partition in range(3):
        for i in range(PER_PARTITION):
            producer.produce(topic, b"v", f"{partition}-{i}".encode(), partition=partition, on_delivery=report)
    assert producer.flush(30) == 0
    assert len(acked) == 3 * PER_PARTITION  # the truth: the delivery reports

    cluster = Cluster(kafka_bootstrap)
    brokers = {b.id: f"{b.host}:{b.port}" for b in cluster.admin.list_topics(timeout=10).brokers.values()}
    victim = cluster.partition(topic, 0).leader
    # the list as a user writes it, the frozen broker first
    configured = ",".join([brokers[victim], *(a for b, a in sorted(brokers.items()) if b != victim)])
    binding = Binding("frozen-read", topic, configured, "unused", "t", "id", "c", RecordKeySpec("key"))
    plan = OffsetRange(topic, {p: (0, PER_PARTITION) for p in range(3)})
    assert extract_topic(spark, binding, plan).count() == len(acked)  # warm: the source's code loaded

    cluster.broker("pause", victim)
    try:
        # the controller fences it after broker.session.timeout.ms (9 s)
        wait_until(lambda: _fenced(brokers, victim, topic), 60, f"broker {victim} fenced")
        live = live_bootstrap_servers(configured, {}, topic)
        reads = []
        for _ in range(3):  # each read makes fresh Java clients, each picking an address at random
            started = time.monotonic()
            rows = extract_topic(spark, binding, plan).select("partition", "offset", "key").collect()
            reads.append(time.monotonic() - started)
            assert {(r.partition, r.offset, bytes(r.key).decode()) for r in rows} == acked
    finally:
        cluster.broker("resume", victim)
        for partition in range(3):
            cluster.wait_for_isr(topic, 3, partition, timeout=90)

    assert sorted(live.split(",")) == sorted(a for b, a in brokers.items() if b != victim), live
    # No read bootstrapped from the frozen broker: a Java client that does waits a request
    # timeout (10 s) or more before it asks another broker, and each read makes four (an admin,
    # a consumer per partition), so on the configured list most reads wait (old settings: 60.9 s
    # and 30.5 s). One read in three may still wait once for another reason: Spark's executor
    # consumer pool, shared by the whole test session, closes idle consumers of earlier reads
    # when it is full, in the borrowing task, and a consumer that fetched from the frozen broker
    # waits a request timeout to close its fetch session there (make test, stop 31: reads of
    # 10.2, 0.2 and 0.2 s, with "Pool exceeds its soft max size, cleaning up idle objects").
    # The session's pool now evicts idle consumers after 20 s, as the resident reconciler's
    # does (the `spark` fixture), so it should no longer fill; the allowance stays until
    # suites show it unused.
    assert sorted(reads)[1] < 10, reads


def _fenced(brokers: dict[int, str], victim: int, topic: str) -> bool:
    """Every other broker's metadata leaves the frozen one out and names another leader for
    each partition of the topic (asked of each broker alone, on a new client: an old one may
    be waiting on the frozen broker itself). The controller fences a broker and moves its
    leaderships at once, but each broker learns it when it replays the metadata log; a read
    whose clients asked one that had not yet could still be sent to the frozen leader, in the
    window before fencing this test does not claim to cover."""
    for broker, address in brokers.items():
        if broker == victim:
            continue
        try:
            metadata = AdminClient({"bootstrap.servers": address}).list_topics(topic, timeout=5)
        except KafkaException:
            return False
        partitions = metadata.topics[topic].partitions.values()
        if victim in metadata.brokers or any(p.leader in (victim, -1) for p in partitions):
            return False
    return True
