"""The canary topic: created when missing, every broker leads a partition."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from auditor.canary.topic import (
    CanaryError,
    LeadershipPlan,
    PartitionInfo,
    _apply_plan,
    ensure_canary_topic,
    leaders_from_stats,
    plan_leadership,
    read_leaders,
)


def test_it_plans_nothing_when_every_broker_leads_a_partition():
    partitions = [PartitionInfo(0, 1, (1, 2, 3)), PartitionInfo(1, 2, (2, 3, 1)), PartitionInfo(2, 3, (3, 1, 2))]
    assert plan_leadership({1, 2, 3}, partitions).empty


def test_it_plans_a_preferred_election_when_the_idle_broker_is_a_preferred_leader():
    # Broker 3 restarted and partition 2's leadership moved to broker 1.
    partitions = [PartitionInfo(0, 1, (1, 2, 3)), PartitionInfo(1, 2, (2, 3, 1)), PartitionInfo(2, 1, (3, 1, 2))]
    plan = plan_leadership({1, 2, 3}, partitions)
    assert plan.elect == [2]
    assert plan.new_partitions == []


def test_it_plans_a_new_partition_led_by_a_broker_that_is_preferred_nowhere():
    # Broker 4 joined after the topic was created.
    partitions = [PartitionInfo(0, 1, (1, 2, 3)), PartitionInfo(1, 2, (2, 3, 1)), PartitionInfo(2, 3, (3, 1, 2))]
    plan = plan_leadership({1, 2, 3, 4}, partitions)
    assert plan.elect == []
    assert plan.new_partitions == [[4, 1, 2]]  # same replication factor, the idle broker first


def test_it_caps_the_replication_factor_of_new_partitions_at_the_broker_count():
    partitions = [PartitionInfo(0, 1, (1, 2, 3))]  # broker 3 left, broker 2 leads nothing
    plan = plan_leadership({1, 2}, partitions)
    assert plan.new_partitions == [[2, 1]]


@pytest.mark.integration
def test_it_creates_a_missing_canary_topic_sized_to_the_cluster(
    kafka_admin, kafka_bootstrap, kafka_brokers, canary_topic
):
    layout = ensure_canary_topic(kafka_admin, kafka_bootstrap, canary_topic)
    assert len(layout.partitions) == max(3, kafka_brokers)
    # Each broker learns a new topic from the controller on its own: the broker this metadata
    # request reaches may not hold its partitions yet (CI saw an empty list once).
    deadline = time.monotonic() + 10
    while True:
        described = kafka_admin.list_topics(topic=canary_topic, timeout=10).topics[canary_topic]
        if len(described.partitions) == len(layout.partitions) or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    assert {len(p.replicas) for p in described.partitions.values()} == {min(3, kafka_brokers)}
    assert set(layout.leaders.values()) == set(layout.brokers)
    assert layout.leading_nothing == []
    assert any("created topic" in action for action in layout.actions)


@pytest.mark.integration
def test_it_adds_partitions_until_every_broker_leads_one(kafka_admin, kafka_bootstrap, kafka_brokers, make_topic):
    topic = make_topic("canary-narrow", partitions=1, replication_factor=1)
    layout = ensure_canary_topic(kafka_admin, kafka_bootstrap, topic)
    assert len(layout.brokers) == kafka_brokers
    assert set(layout.leaders.values()) == set(layout.brokers)
    assert len(layout.partitions) == kafka_brokers  # one partition added per broker that led nothing
    assert layout.leading_nothing == []


@pytest.mark.integration
def test_it_asks_a_real_cluster_for_a_preferred_election_without_raising(kafka_admin, make_topic):
    # confluent-kafka 2.16.1 raised SystemError on elect_leaders' keyword arguments: the canary
    # died the first time a broker back from a pause led nothing (lab canary-leader-pause).
    # Partition 0 is led by its preferred leader already: the broker says no election was
    # needed, which is logged, not raised, and nothing is reported done.
    topic = make_topic("canary-elect", partitions=1)
    assert _apply_plan(kafka_admin, topic, LeadershipPlan(elect=[0]), 1, 10.0) == []


def test_it_names_the_bootstrap_servers_when_the_cluster_is_unreachable():
    admin = AdminClient({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    with pytest.raises(CanaryError, match=r"cannot reach Kafka at 127\.0\.0\.1:1"):
        ensure_canary_topic(admin, "127.0.0.1:1", "_audit.canary", timeout=1.5)


def test_it_reads_the_leaders_a_client_sends_to_from_its_statistics():
    stats = {
        "topics": {
            "t": {"partitions": {"-1": {"leader": -1}, "0": {"leader": 2}, "1": {"leader": -1}, "2": {"leader": 3}}},
            "other": {"partitions": {"0": {"leader": 1}}},
        }
    }
    assert leaders_from_stats(json.dumps(stats), "t") == {0: 2, 2: 3}  # partition 1 has no leader now
    assert leaders_from_stats(json.dumps(stats), "absent") == {}
    assert leaders_from_stats("not json", "t") == {}


@pytest.mark.integration
def test_the_leaders_in_a_real_producers_statistics_are_the_clusters(
    kafka_admin, kafka_bootstrap, kafka_brokers, make_topic
):
    topic = make_topic("canary-stats", partitions=max(3, kafka_brokers), replication_factor=min(3, kafka_brokers))
    seen: list[dict[int, int]] = []
    producer = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "statistics.interval.ms": 100,
            "stats_cb": lambda text: seen.append(leaders_from_stats(text, topic)),
        }
    )
    for partition in range(max(3, kafka_brokers)):
        producer.produce(topic, b"x", partition=partition)
    assert producer.flush(30) == 0
    deadline = time.monotonic() + 10
    while not (seen and len(seen[-1]) == max(3, kafka_brokers)) and time.monotonic() < deadline:
        producer.poll(0.1)
    assert seen and seen[-1] == read_leaders(kafka_admin, topic)
