"""Offsets read while a partition's leader is frozen (SIGSTOP): its connections hang, and the
controller fences it only after broker.session.timeout.ms. librdkafka's ListOffsets then
answers that partition without an error but with offset -1001; taken for a log start or end,
it would plan a reconciliation's read and a diagnosis's view from nothing."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from auditor.lab.cluster import Cluster

pytestmark = [pytest.mark.alone, pytest.mark.integration]

# In a process of its own: librdkafka's admin client can abort the process while a broker is
# frozen (upstream confluentinc/librdkafka#4605).
PROBE = """
import json, sys
from spark_jobs.kafka_offsets import KafkaReadError, admin_client, partition_offsets
admin = admin_client(sys.argv[1], {}, 3.0)
try:
    offsets = partition_offsets(admin, sys.argv[2], [0, 1, 2], 3.0, *map(float, sys.argv[3:]))
    print(json.dumps({"offsets": {p: [o.low, o.stable, o.high] for p, o in offsets.items()}}))
except KafkaReadError as exc:
    print(json.dumps({"error": str(exc)}))
"""


def _probe(bootstrap: str, topic: str, *failover_s: float) -> dict[str, Any]:
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-c", PROBE, bootstrap, topic, *map(str, failover_s)],
            capture_output=True,
            text=True,
            timeout=90,
        )
        if done.returncode != -signal.SIGABRT:
            assert done.returncode == 0, done.stderr[-2000:]
            answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
            return answer
    raise AssertionError("the probe aborted three times (librdkafka#4605)")


def test_a_partition_whose_leader_does_not_answer_has_no_offsets_until_the_failover(
    make_topic: Callable[..., str], kafka_bootstrap: str, kafka_brokers: int
) -> None:
    if kafka_brokers < 3:
        pytest.skip("needs the 3-broker test stack")
    topic = make_topic("frozen-leader", partitions=3, replication_factor=3)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for partition in range(3):
        for i in range(5):
            producer.produce(topic, b"v", f"k{i}".encode(), partition=partition)
    assert producer.flush(30) == 0
    cluster = Cluster(kafka_bootstrap)
    assert _probe(kafka_bootstrap, topic) == {"offsets": {str(p): [0, 5, 5] for p in range(3)}}

    victim = cluster.partition(topic, 0).leader
    cluster.broker("pause", victim)
    try:
        # not asked again past its 3-s timeout: ~3 s, well before the controller fences it
        unanswered = _probe(kafka_bootstrap, topic, 0.0)
        # asked again through a failover (the default): once the controller has fenced the
        # frozen broker (broker.session.timeout.ms, 9 s) the new leader answers
        failed_over = _probe(kafka_bootstrap, topic)
    finally:
        cluster.broker("resume", victim)
        for partition in range(3):
            cluster.wait_for_isr(topic, 3, partition, timeout=90)

    assert "offsets" not in unanswered, unanswered
    assert "no offset for partition(s) [0" in unanswered["error"] and "did not answer" in unanswered["error"]
    # the truth: the five acked records of each partition (acks=all), no transaction
    assert failed_over == {"offsets": {str(p): [0, 5, 5] for p in range(3)}}, failed_over


TOPIC_ID_PROBE = """
import json, sys, time
from spark_jobs.kafka_offsets import KafkaReadError, admin_client, topic_id
admin = admin_client(sys.argv[1], {}, 3.0)
started = time.monotonic()
try:
    print(json.dumps({"id": topic_id(admin, sys.argv[2], 3.0)}))
except KafkaReadError as exc:
    print(json.dumps({"error": str(exc), "seconds": time.monotonic() - started}))
"""


def test_a_topic_id_no_broker_answers_for_is_a_read_error_not_a_crash(
    make_topic: Callable[..., str], kafka_bootstrap: str, kafka_brokers: int
) -> None:
    """The diagnosis reads the topic's id before the groups' commits. A frozen broker's kernel
    still accepts the connection, so no answer comes: the request times out, or the wait for its
    future does (that TimeoutError once crashed a diagnosis under a frozen coordinator: CI, stop
    36). Either is a read error the caller can note, like any other, within the timeout."""
    if kafka_brokers < 3:
        pytest.skip("needs the 3-broker test stack")
    topic = make_topic("frozen-topic-id", partitions=1, replication_factor=3)
    cluster = Cluster(kafka_bootstrap)
    victim = cluster.partition(topic, 0).leader
    broker = cluster.admin.list_topics(timeout=10).brokers[victim]
    alone = f"{broker.host}:{broker.port}"  # the frozen broker is all this client knows
    cluster.broker("pause", victim)
    try:
        for _ in range(3):
            done = subprocess.run(
                [sys.executable, "-c", TOPIC_ID_PROBE, alone, topic], capture_output=True, text=True, timeout=60
            )
            if done.returncode != -signal.SIGABRT:  # librdkafka#4605: asked again
                break
    finally:
        cluster.broker("resume", victim)
        cluster.wait_for_isr(topic, 3, 0, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert f"topic {topic!r} cannot be described" in answer["error"], answer
    assert answer["seconds"] < 10, answer
