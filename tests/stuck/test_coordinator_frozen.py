"""The diagnosis's view of the cluster while the group's coordinator is frozen (SIGSTOP).

librdkafka 2.16 aborted the whole process (`rd_kafka_enq_once_del_source_return: Assertion
'eonce->refcnt > 0'`, upstream confluentinc/librdkafka#4605) when a committed-offsets request
timed out while its client still waited for the frozen coordinator, and the same client found
the coordinator's replacement afterwards. A diagnosis in a Celery worker or behind the
dashboard died with it. Each coordinator request now has a client of its own, destroyed as
soon as it is answered (spark_jobs.group_offsets.coordinator_request).

Kafka 4's group coordinator answers a committed-offsets request from its offsets partition's
high watermark. A coordinator elected after its predecessor froze, whose high watermark had not
caught up, answered the group's previous commit as the current one, with no error: the first
view of the test below read no committed offsets at all once in CI (stop 30). The auditor now
asks as a read_committed consumer does (require_stable), which waits until what the coordinator
holds is committed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from auditor.lab.cluster import Cluster

pytestmark = [pytest.mark.alone, pytest.mark.integration]

# The views are read in a process of their own: on the old code the process aborted. It reads
# for 25 s with the diagnosis's default timeout (10 s), past broker.session.timeout.ms (9 s),
# when the controller fences the frozen broker and the group's coordinator moves, which the
# pending look-up then finds.
PROBE = """
import json, sys, time
from auditor.stuck.kafka_view import read_cluster_view
bootstrap, topic, group = sys.argv[1:4]
started, views = time.monotonic(), []
while time.monotonic() - started < 25:
    view, _ = read_cluster_view({"bootstrap.servers": bootstrap}, topic, [group], topic + "-pl", topic + "-cl", timeout_s=10.0)
    views.append({"groups_error": view.groups_error, "committed": view.groups[group].committed})
    time.sleep(1)
print(json.dumps(views))
"""


def _crash_report(stderr: str) -> str:
    """faulthandler's dump of a crashed probe (which Python call each thread was in), else the
    end of its output: the librdkafka log lines the clients print after it would hide it."""
    start = stderr.find("Fatal Python error")
    return stderr[start : start + 6000] if start >= 0 else stderr[-3000:]


def test_a_frozen_group_coordinator_does_not_abort_the_diagnosis(
    make_topic: Callable[..., str], kafka_bootstrap: str, kafka_brokers: int
) -> None:
    if kafka_brokers < 3:
        pytest.skip("needs the 3-broker test stack")
    topic = make_topic("frozen-coordinator", partitions=3, replication_factor=3)
    group = f"frozen-coordinator-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for partition in range(3):
        for i in range(5):
            producer.produce(topic, b"v", f"k{i}".encode(), partition=partition)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group, "enable.auto.commit": False})
    truth = {0: 2, 1: 3, 2: 4}  # what the group committed, from the client's own call
    consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in truth.items()], asynchronous=False)
    consumer.close()
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    coordinator = admin.describe_consumer_groups([group])[group].result(timeout=30).coordinator.id

    cluster = Cluster(kafka_bootstrap)
    cluster.broker("pause", coordinator)
    try:
        done = subprocess.run(
            [sys.executable, "-X", "faulthandler", "-c", PROBE, kafka_bootstrap, topic, group],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        cluster.broker("resume", coordinator)
        for partition in range(3):
            cluster.wait_for_isr(topic, 3, partition, timeout=90)

    assert done.returncode != -signal.SIGABRT, _crash_report(done.stderr)
    assert done.returncode == 0, _crash_report(done.stderr)
    views = json.loads(done.stdout.strip().splitlines()[-1])
    # Frozen, the coordinator does not answer until the controller fences it and its offsets
    # partition gets a new leader; the view asks again on a new client meanwhile and reads
    # what the group committed, from the first view on.
    for view in views:
        assert view["groups_error"] is None, views
        assert {int(p): o for p, o in view["committed"].items()} == truth, views


STALE_PROBE = """
import json, sys
from auditor.stuck.kafka_view import read_cluster_view
bootstrap, topic, group = sys.argv[1:4]
view, _ = read_cluster_view({"bootstrap.servers": bootstrap}, topic, [group], topic + "-pl", topic + "-cl")
print(json.dumps({"groups_error": view.groups_error, "committed": view.groups[group].committed}))
"""


def _view(bootstrap: str, topic: str, group: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", STALE_PROBE, bootstrap, topic, group],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, _crash_report(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_a_coordinator_whose_high_watermark_lags_is_not_read_as_the_groups_commit(
    make_topic: Callable[..., str], kafka_bootstrap: str, kafka_brokers: int
) -> None:
    if kafka_brokers < 3:
        pytest.skip("needs the 3-broker test stack")
    topic = make_topic("stale-coordinator", partitions=3, replication_factor=3)
    group = f"stale-coordinator-{uuid.uuid4().hex[:8]}"
    cluster = Cluster(kafka_bootstrap)
    offsets_partition = cluster.offsets_partition(group)
    placed = cluster.partition("__consumer_offsets", offsets_partition)
    coordinator, follower = placed.leader, next(r for r in placed.replicas if r != placed.leader)
    # Two replicas: once the frozen coordinator is fenced, its follower leads alone, below
    # min.insync.replicas (2), and its high watermark cannot advance (KIP-966) until the
    # coordinator is back. What the follower had not learned was committed stays above it.
    cluster.reassign("__consumer_offsets", offsets_partition, [coordinator, follower])
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        earlier = {0: 1, 1: 1, 2: 1}
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in earlier.items()], asynchronous=False)
        time.sleep(2)  # the follower learns the high watermark past the earlier commit
        truth = {0: 2, 1: 3, 2: 4}  # what the group committed last, from the client's own call
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in truth.items()], asynchronous=False)
        # frozen before the follower's next fetch tells it the high watermark (<= 500 ms)
        cluster.broker("pause", coordinator)
        try:
            during = _view(kafka_bootstrap, topic, group)
        finally:
            cluster.broker("resume", coordinator)
        cluster.wait_for_isr("__consumer_offsets", 2, offsets_partition)
        after = _view(kafka_bootstrap, topic, group)
    finally:
        consumer.close()
        cluster.reassign("__consumer_offsets", offsets_partition, sorted(cluster.broker_ids()))

    committed = {int(p): o for p, o in during["committed"].items()}  # type: ignore[attr-defined]
    # While the coordinator cannot know what is committed, the view says so; it never presents
    # the group's earlier commit (or none) as the group's position.
    assert committed != earlier, during
    if during["groups_error"] is None:
        assert committed == truth, during
    else:
        assert group in str(during["groups_error"]), during
        assert "cannot yet say what the group committed" in str(during["groups_error"]), during
        assert committed == {}, during
    assert after["groups_error"] is None, after
    assert {int(p): o for p, o in after["committed"].items()} == truth, after  # type: ignore[attr-defined]
