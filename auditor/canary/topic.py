"""The canary topic: created when missing and managed so every broker leads a partition.

A broker that leads no canary partition is invisible to the canary. When one is found:
- if it is the preferred leader (first replica) of a partition, a preferred leader
  election gives that partition back to it (leadership moved away after a restart);
- if it is the preferred leader of none (it joined after the topic was created),
  a partition is added with it as the first replica.
Brokers still leading nothing afterwards are reported, never silently ignored.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field

from confluent_kafka import ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ClusterMetadata, NewPartitions, NewTopic

log = logging.getLogger(__name__)

MIN_PARTITIONS = 3
MAX_REPLICATION_FACTOR = 3


class CanaryError(Exception):
    """The canary cannot run (unreachable cluster, unusable topic, bad option)."""


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int  # -1: no leader
    replicas: tuple[int, ...]


@dataclass(frozen=True)
class LeadershipPlan:
    elect: list[int] = field(default_factory=list)  # partitions to give back to their preferred leader
    new_partitions: list[list[int]] = field(default_factory=list)  # replica lists of partitions to add

    @property
    def empty(self) -> bool:
        return not self.elect and not self.new_partitions


@dataclass(frozen=True)
class TopicLayout:
    topic: str
    leaders: dict[int, int]  # partition -> leader broker id (-1: none)
    brokers: list[int]
    leading_nothing: list[int]
    actions: list[str] = field(default_factory=list)

    @property
    def partitions(self) -> list[int]:
        return sorted(self.leaders)


def brokers_leading_nothing(brokers: set[int], partitions: list[PartitionInfo]) -> list[int]:
    return sorted(brokers - {p.leader for p in partitions})


def plan_leadership(brokers: set[int], partitions: list[PartitionInfo]) -> LeadershipPlan:
    """What to do so that every broker in ``brokers`` leads at least one partition."""
    idle = brokers_leading_nothing(brokers, partitions)
    if not idle:
        return LeadershipPlan()
    elect: list[int] = []
    without_preferred: list[int] = []
    for broker in idle:
        preferred_here = [p.partition for p in partitions if p.replicas and p.replicas[0] == broker]
        if preferred_here:
            elect.append(min(preferred_here))
        else:
            without_preferred.append(broker)
    replication_factor = max((len(p.replicas) for p in partitions), default=1)
    replication_factor = max(1, min(replication_factor, len(brokers)))
    ring = sorted(brokers)
    new_partitions = []
    for broker in without_preferred:
        start = ring.index(broker)
        new_partitions.append([ring[(start + i) % len(ring)] for i in range(replication_factor)])
    return LeadershipPlan(elect=sorted(elect), new_partitions=new_partitions)


def _partition_infos(metadata: ClusterMetadata, topic: str) -> list[PartitionInfo] | None:
    described = metadata.topics.get(topic)
    if described is None or described.error is not None:
        return None
    return [
        PartitionInfo(p.id, p.leader, tuple(p.replicas))
        for p in sorted(described.partitions.values(), key=lambda p: p.id)
    ]


def describe_cluster(admin: AdminClient, bootstrap_servers: str, timeout: float) -> ClusterMetadata:
    """Cluster metadata; an unreachable cluster raises CanaryError naming the bootstrap servers."""
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise CanaryError(f"cannot reach Kafka at {bootstrap_servers}: {exc.args[0].str()}") from None
    if not metadata.brokers:
        raise CanaryError(f"Kafka at {bootstrap_servers} reports no brokers")
    return metadata


def _wait_for_topic(
    admin: AdminClient, topic: str, timeout: float, min_partitions: int = 1
) -> tuple[ClusterMetadata, list[PartitionInfo]]:
    deadline = time.monotonic() + timeout
    while True:
        metadata = admin.list_topics(timeout=max(1.0, deadline - time.monotonic()))
        infos = _partition_infos(metadata, topic)
        if infos and len(infos) >= min_partitions and all(p.leader >= 0 for p in infos):
            return metadata, infos
        if time.monotonic() >= deadline:
            raise CanaryError(f"topic {topic} has no leader for every partition after {timeout:.0f}s")
        time.sleep(0.2)


def _create_topic(admin: AdminClient, topic: str, broker_count: int, timeout: float) -> str:
    partitions = max(MIN_PARTITIONS, broker_count)
    replication_factor = min(MAX_REPLICATION_FACTOR, broker_count)
    future = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor)],
        request_timeout=timeout,
    )[topic]
    try:
        future.result(timeout=timeout)
    except KafkaException as exc:
        if exc.args[0].code() != exc.args[0].TOPIC_ALREADY_EXISTS:  # another canary won the race
            raise CanaryError(f"cannot create the canary topic {topic}: {exc.args[0].str()}") from None
    except TimeoutError:
        raise CanaryError(f"cannot create the canary topic {topic}: no answer within {timeout:g} s") from None
    return f"created topic {topic} with {partitions} partitions, replication factor {replication_factor}"


def _apply_plan(
    admin: AdminClient, topic: str, plan: LeadershipPlan, partition_count: int, timeout: float
) -> list[str]:
    actions = []
    if plan.elect:
        tps = [TopicPartition(topic, p) for p in plan.elect]
        try:
            # No request_timeout/operation_timeout: confluent-kafka 2.16.1's binding raises SystemError
            # ("more argument specifiers than keyword list entries") on any keyword argument of
            # elect_leaders, which ended the canary the first time a broker back from a pause or a
            # restart led nothing (lab canary-leader-pause, stop 66). The request then waits the
            # admin client's socket.timeout.ms (the runner sets it to the connect timeout), and the
            # future's own wait is bounded here.
            results = admin.elect_leaders(ElectionType.PREFERRED, tps).result(timeout=timeout)
        except KafkaException as exc:
            log.warning("preferred leader election on %s failed: %s", topic, exc.args[0].str())
            results = {}
        except TimeoutError:
            log.warning("preferred leader election on %s: no answer within %g s", topic, timeout)
            results = {}
        for tp, error in results.items():
            if error is None:
                actions.append(f"preferred leader election on {topic}/{tp.partition}")
            else:
                log.warning("preferred leader election on %s/%s: %s", topic, tp.partition, error)
    if plan.new_partitions:
        total = partition_count + len(plan.new_partitions)
        future = admin.create_partitions(
            [NewPartitions(topic, total, replica_assignment=plan.new_partitions)], request_timeout=timeout
        )[topic]
        try:
            future.result(timeout=timeout)
            leaders = ", ".join(str(replicas[0]) for replicas in plan.new_partitions)
            actions.append(f"added {len(plan.new_partitions)} partition(s) to {topic} led by broker(s) {leaders}")
        except KafkaException as exc:
            log.warning("could not add partitions to %s: %s", topic, exc.args[0].str())
        except TimeoutError:
            log.warning("could not add partitions to %s: no answer within %g s", topic, timeout)
    return actions


def ensure_canary_topic(admin: AdminClient, bootstrap_servers: str, topic: str, timeout: float = 15.0) -> TopicLayout:
    """Create the canary topic if missing and make every broker lead at least one partition."""
    metadata = describe_cluster(admin, bootstrap_servers, timeout)
    brokers = set(metadata.brokers)
    actions: list[str] = []
    if topic not in metadata.topics:
        actions.append(_create_topic(admin, topic, len(brokers), timeout))
    metadata, infos = _wait_for_topic(admin, topic, timeout)
    plan = plan_leadership(brokers, infos)
    if not plan.empty:
        actions += _apply_plan(admin, topic, plan, len(infos), timeout)
        # Leadership and new partitions take a moment to show in the metadata.
        deadline = time.monotonic() + min(timeout, 10.0)
        expected = len(infos) + len(plan.new_partitions)
        while True:
            metadata, infos = _wait_for_topic(admin, topic, timeout, min_partitions=expected)
            if not brokers_leading_nothing(brokers, infos) or time.monotonic() >= deadline:
                break
            time.sleep(0.3)
    idle = brokers_leading_nothing(set(metadata.brokers), infos)
    for action in actions:
        log.info("%s", action)
    if idle:
        log.warning(
            "broker(s) %s lead no partition of %s: the canary does not measure them", ", ".join(map(str, idle)), topic
        )
    return TopicLayout(
        topic=topic,
        leaders={p.partition: p.leader for p in infos},
        brokers=sorted(metadata.brokers),
        leading_nothing=idle,
        actions=actions,
    )


def read_leaders(admin: AdminClient, topic: str, timeout: float = 5.0) -> dict[int, int] | None:
    """Current partition leaders, or None when the metadata cannot be read right now."""
    try:
        infos = _partition_infos(admin.list_topics(topic=topic, timeout=timeout), topic)
    except KafkaException:
        return None
    return None if infos is None else {p.partition: p.leader for p in infos}


def leaders_from_stats(stats_json: str, topic: str) -> dict[int, int]:
    """The partition leaders a librdkafka client is using for ``topic``, from its statistics
    (``statistics.interval.ms``): for a producer, the brokers its records go to right now.
    Partitions without a leader, the unassigned pseudo-partition and unreadable JSON are left out."""
    try:
        stats = json.loads(stats_json)
        partitions = stats["topics"][topic]["partitions"]
    except (ValueError, KeyError, TypeError):
        return {}
    leaders: dict[int, int] = {}
    for name, partition in partitions.items():
        try:
            number, leader = int(name), int(partition.get("leader", -1))
        except (ValueError, TypeError, AttributeError):
            continue
        if number >= 0 and leader >= 0:
            leaders[number] = leader
    return leaders
