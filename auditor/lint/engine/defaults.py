"""What each client, broker and Streams does with a key nobody set.

librdkafka values were checked against the installed confluent-kafka 2.16.1
(librdkafka 2.16.0: its start-up checks were exercised by constructing real producers);
Java values against kafka-clients 4.3.1 and 3.9.2 (`ProducerConfig.configDef()`,
`ConsumerConfig.configDef()` and constructing KafkaProducers). KAFKA_FACTS.md has the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from auditor.vocabulary import GUARANTEES

CLIENTS = ("librdkafka", "java")
KINDS = ("producer", "consumer", "topic", "broker", "streams")
AT_MOST_ONCE, AT_LEAST_ONCE, EXACTLY_ONCE = GUARANTEES

INT32_MAX = 2_147_483_647
# librdkafka caps max.in.flight to this when idempotent (RD_KAFKA_IDEMP_MAX_INFLIGHT)
IDEMPOTENT_MAX_IN_FLIGHT = 5

# librdkafka accepts several names for one property; the engine works on the Java name.
# Not auto.commit.enable: a legacy topic-level property of the simple legacy consumer only,
# which the high-level KafkaConsumer ignores (CONFIGURATION.md: "the global enable.auto.commit
# property must be used instead"); rule C007 says so.
LIBRDKAFKA_ALIASES: Mapping[str, str] = {
    "request.required.acks": "acks",
    "queue.buffering.max.ms": "linger.ms",
    "message.timeout.ms": "delivery.timeout.ms",
    "max.in.flight": "max.in.flight.requests.per.connection",
    "message.send.max.retries": "retries",
}
LIBRDKAFKA_LEGACY_AUTO_COMMIT = "auto.commit.enable"
# How librdkafka users know a key when the engine reports a default.
LIBRDKAFKA_DISPLAY_NAMES: Mapping[str, str] = {"delivery.timeout.ms": "message.timeout.ms"}

# Value type of every key a rule reads. Keys not listed are carried along untouched.
KEY_TYPES: Mapping[str, str] = {
    # producer
    "acks": "acks",
    "retries": "int",
    "enable.idempotence": "bool",
    "max.in.flight.requests.per.connection": "int",
    "linger.ms": "number",
    "delivery.timeout.ms": "int",
    "request.timeout.ms": "int",
    "socket.timeout.ms": "int",
    "transaction.timeout.ms": "int",
    "transactional.id": "str",
    # consumer
    "enable.auto.commit": "bool",
    "enable.auto.offset.store": "bool",
    "auto.commit.interval.ms": "int",
    "isolation.level": "isolation",
    "auto.offset.reset": "reset",
    "max.poll.interval.ms": "int",
    "session.timeout.ms": "int",
    "group.protocol": "protocol",
    # topic (replication.factor is also a Streams key for its internal topics)
    "replication.factor": "int",
    "min.insync.replicas": "int",
    "unclean.leader.election.enable": "bool",
    "retention.ms": "int",
    "cleanup.policy": "str",
    "min.compaction.lag.ms": "int",
    "delete.retention.ms": "int",
    # broker
    "offsets.retention.minutes": "int",
    "offsets.topic.replication.factor": "int",
    "transaction.state.log.replication.factor": "int",
    "transaction.state.log.min.isr": "int",
    "transaction.partition.verification.enable": "bool",
    "transaction.max.timeout.ms": "int",
    "default.replication.factor": "int",
    "log.retention.ms": "int",
    "log.retention.minutes": "int",
    "log.retention.hours": "int",
    "log.cleaner.delete.retention.ms": "int",
    # streams
    "processing.guarantee": "processing",
    # Spring Kafka's listener container
    "spring.kafka.listener.ack-mode": "ack_mode",
}
GROUP_PROTOCOLS = ("classic", "consumer")
# Set with group.protocol=consumer (KIP-848), these make librdkafka refuse to create the
# consumer (checked against librdkafka 2.16.0); the value is what takes their place.
LIBRDKAFKA_CLASSIC_ONLY_CONSUMER_KEYS: Mapping[str, str] = {
    "session.timeout.ms": "the broker's group.consumer.session.timeout.ms applies",
    "heartbeat.interval.ms": "the broker's group.consumer.heartbeat.interval.ms applies",
    "partition.assignment.strategy": "group.remote.assignor names the assignor",
    "group.protocol.type": "a classic-protocol setting",
}
# The Java consumer refuses the same three (group.protocol.type is librdkafka's alone) from
# 4.0.0: ConsumerConfig.CONSUMER_PROTOCOL_UNSUPPORTED_CONFIGS (KAFKA-17338) throws
# "ConfigException: session.timeout.ms cannot be set when group.protocol=CONSUMER" for a key
# the config sets, even to its default. 3.7 to 3.9 accept and ignore them. Checked by
# constructing KafkaConsumers of kafka-clients 3.9.0, 3.9.2, 4.0.0 and 4.3.1.
JAVA_CLASSIC_ONLY_CONSUMER_KEYS: Mapping[str, str] = {
    key: LIBRDKAFKA_CLASSIC_ONLY_CONSUMER_KEYS[key]
    for key in ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy")
}
JAVA_REFUSES_CLASSIC_ONLY_CONSUMER_KEYS_FROM = (4, 0, 0)
# The other way round: group.remote.assignor names the broker's assignor under
# group.protocol=consumer, and the Java consumer refuses it under classic from 3.9.0
# (ConsumerConfig.checkGroupRemoteAssignor: "ConfigException: group.remote.assignor cannot be
# set when group.protocol=CLASSIC"); a blank value passes, the value being trimmed. 3.7 and 3.8
# accept and ignore it, and so does librdkafka (2.16.0). Checked by constructing KafkaConsumers
# of kafka-clients 3.7.2, 3.8.1, 3.9.0, 3.9.2, 4.0.0 and 4.3.1, and librdkafka consumers.
GROUP_REMOTE_ASSIGNOR = "group.remote.assignor"
JAVA_REFUSES_REMOTE_ASSIGNOR_UNDER_CLASSIC_FROM = (3, 9, 0)
PROCESSING_GUARANTEES = ("at_least_once", "exactly_once_v2", "exactly_once", "exactly_once_beta")

LIBRDKAFKA_PRODUCER: Mapping[str, Any] = {
    "acks": "all",  # -1, a topic-level property
    "retries": INT32_MAX,
    "enable.idempotence": False,
    "max.in.flight.requests.per.connection": 1_000_000,
    "linger.ms": 5,
    "delivery.timeout.ms": 300_000,  # message.timeout.ms, topic-level; 0 = infinite
    "request.timeout.ms": 30_000,  # topic-level
    "socket.timeout.ms": 60_000,
    "transaction.timeout.ms": 60_000,
    "transactional.id": None,
}
LIBRDKAFKA_CONSUMER: Mapping[str, Any] = {
    "enable.auto.commit": True,
    "enable.auto.offset.store": True,
    "auto.commit.interval.ms": 5_000,
    "isolation.level": "read_committed",
    "auto.offset.reset": "largest",  # topic-level
    "max.poll.interval.ms": 300_000,
    "session.timeout.ms": 45_000,
    "group.protocol": "classic",
}

JAVA_PRODUCER: Mapping[str, Any] = {
    "acks": "all",
    "retries": INT32_MAX,
    "enable.idempotence": True,
    "max.in.flight.requests.per.connection": 5,
    "linger.ms": 5,
    "delivery.timeout.ms": 120_000,
    "request.timeout.ms": 30_000,
    "transaction.timeout.ms": 60_000,
    "transactional.id": None,
}
JAVA_CONSUMER: Mapping[str, Any] = {
    "enable.auto.commit": True,
    "auto.commit.interval.ms": 5_000,
    "isolation.level": "read_uncommitted",
    "auto.offset.reset": "latest",
    "max.poll.interval.ms": 300_000,
    "session.timeout.ms": 45_000,
    "group.protocol": "classic",
}
# Spring Kafka sets these on the consumers of its listener containers when the key is unset:
# since 2.3, enable.auto.commit=false unless set explicitly, and the container commits after
# the listener ran (AckMode BATCH: once the records of a poll are processed).
SPRING_KAFKA = "spring-kafka"
# How the listener container commits when enable.auto.commit is false (ContainerProperties.
# AckMode, default BATCH; Spring Boot's spring.kafka.listener.ack-mode, unset by default). The
# spring-kafka reference, "Committing Offsets" (docs.spring.io/spring-kafka/reference/kafka/
# receiving-messages/message-listener-container.html#committing-offsets): RECORD commits "when
# the listener returns after processing the record"; BATCH "when all the records returned by
# the poll() have been processed"; TIME and COUNT (and COUNT_TIME) the same, once ackTime or
# ackCount is exceeded; MANUAL: the listener calls acknowledge(), "after that, the same
# semantics as BATCH are applied" (the ack is queued and committed before the next poll,
# KafkaMessageListenerContainer.processCommits); MANUAL_IMMEDIATE commits at once when the
# listener acknowledges on the consumer thread. With enable.auto.commit=true the container
# does not commit (and refuses MANUAL and MANUAL_IMMEDIATE).
SPRING_ACK_MODE = "spring.kafka.listener.ack-mode"
SPRING_ACK_MODES = ("RECORD", "BATCH", "TIME", "COUNT", "COUNT_TIME", "MANUAL", "MANUAL_IMMEDIATE")
SPRING_ACKNOWLEDGED_AT_ONCE = "MANUAL_IMMEDIATE"  # the one mode whose commit the listener times
# The modes whose listener acknowledges: the container refuses to start with auto-commit on
# (KafkaMessageListenerContainer.ListenerConsumer.determineAutoCommit: Assert.state(
# !this.isAnyManualAck || !isAutoCommit, "Consumer cannot be configured for auto commit for
# ackMode " + ackMode), an IllegalStateException from the container's start()).
SPRING_MANUAL_ACK_MODES = ("MANUAL", "MANUAL_IMMEDIATE")
SPRING_KAFKA_CONSUMER: Mapping[str, tuple[Any, str]] = {
    "enable.auto.commit": (False, "Spring Kafka's listener container, 2.3+: commits after the listener"),
    SPRING_ACK_MODE: ("BATCH", "Spring Kafka's listener container default"),
}
STREAMS: Mapping[str, Any] = {
    "processing.guarantee": "at_least_once",
    "replication.factor": -1,  # the broker's default.replication.factor (since 3.0)
}
# Kafka Streams' internal topics (changelogs, repartition topics) got replication.factor 1
# unless set before 3.0: StreamsConfig defines it with default 1 in 2.0.0 to 2.8.x and -1
# from 3.0.0 (KIP-733, KAFKA-8531, apache/kafka 6a5992a8143; -1 needs brokers 2.4+).
STREAMS_RF_FROM_BROKER_FROM = (3, 0, 0)

BROKER: Mapping[str, Any] = {
    "offsets.retention.minutes": 10_080,
    "offsets.topic.replication.factor": 3,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
    "transaction.partition.verification.enable": True,
    "transaction.max.timeout.ms": 900_000,
    "unclean.leader.election.enable": False,
    "default.replication.factor": 1,
    "min.insync.replicas": 1,
    "log.retention.hours": 168,
}
TOPIC: Mapping[str, Any] = {
    "replication.factor": 1,  # default.replication.factor
    "min.insync.replicas": 1,
    "unclean.leader.election.enable": False,
    "retention.ms": 604_800_000,
    "cleanup.policy": "delete",
    "min.compaction.lag.ms": 0,
    "delete.retention.ms": 86_400_000,  # how long a compacted topic keeps a tombstone
}
# Topic settings that inherit a broker-wide default, and the broker key holding it.
TOPIC_FROM_BROKER: Mapping[str, str] = {
    "replication.factor": "default.replication.factor",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "cleanup.policy": "log.cleanup.policy",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
}

DEFAULT_JAVA_VERSION = (4, 0, 0)
DEFAULT_JAVA_VERSION_TEXT = "4.0"


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """'3.9.2' -> (3, 9, 2); None or an unreadable version -> None."""
    if not text:
        return None
    parts: list[int] = []
    for piece in str(text).split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    if not parts:
        return None
    while len(parts) < 3:
        parts.append(0)
    return (parts[0], parts[1], parts[2])


def java_idempotence_opt_in(version: tuple[int, int, int]) -> bool:
    """Java versions whose producer is idempotent only when asked to be.

    Before 3.0.1, and in 3.1.0 (KAFKA-13598: 3.0.0 and 3.1.0 announced the default true but
    did not apply it), ``ProducerConfig.idempotenceEnabled()`` is ``userConfiguredTransactions
    || (userConfiguredIdempotence && enable.idempotence)``: an explicit true or a
    transactional.id turns it on, and the producer then overrides an unset acks to all.
    """
    return version < (3, 0, 1) or (3, 1, 0) <= version < (3, 1, 1)


# Before 2.1 the Java producer did not retry unless told to, and had no delivery.timeout.ms:
# ProducerConfig defines retries with default 0 in 0.10.x to 2.0.x and Integer.MAX_VALUE from
# 2.1.0, which added delivery.timeout.ms (default 120000) to bound a send instead (KIP-91,
# KAFKA-5886, apache/kafka 7fc7136ffd2; 2.1's upgrade notes). A 2.0 client given
# delivery.timeout.ms ignores it (AbstractConfig.logUnused: "The configuration
# 'delivery.timeout.ms' was supplied but isn't a known config.").
JAVA_DELIVERY_TIMEOUT_FROM = (2, 1, 0)


def java_has_delivery_timeout(version: tuple[int, int, int]) -> bool:
    """Does the Java producer at ``version`` know delivery.timeout.ms (KIP-91, 2.1+)?"""
    return version >= JAVA_DELIVERY_TIMEOUT_FROM


def java_producer_defaults(version: tuple[int, int, int]) -> dict[str, Any]:
    """The Java producer's defaults for a client version (KIP-91, KIP-679, KIP-1030).

    delivery.timeout.ms is None before 2.1: the client has no such key.
    """
    defaults = dict(JAVA_PRODUCER)
    if version < (4, 0, 0):
        defaults["linger.ms"] = 0
    if version < (3, 0, 0):
        defaults["acks"] = "1"
    if java_idempotence_opt_in(version):
        defaults["enable.idempotence"] = False
    if not java_has_delivery_timeout(version):
        defaults["retries"] = 0
        defaults["delivery.timeout.ms"] = None
    return defaults


def classic_only_consumer_keys(client: str, version: tuple[int, int, int]) -> Mapping[str, str]:
    """The keys a consumer of ``client`` (at Java ``version``) refuses under group.protocol=consumer."""
    if client == "librdkafka":
        return LIBRDKAFKA_CLASSIC_ONLY_CONSUMER_KEYS
    if version >= JAVA_REFUSES_CLASSIC_ONLY_CONSUMER_KEYS_FROM:
        return JAVA_CLASSIC_ONLY_CONSUMER_KEYS
    return {}


def java_consumer_defaults(version: tuple[int, int, int]) -> dict[str, Any]:
    defaults = dict(JAVA_CONSUMER)
    if version < (3, 0, 0):
        defaults["session.timeout.ms"] = 10_000
    return defaults


def streams_defaults(version: tuple[int, int, int]) -> dict[str, Any]:
    """Kafka Streams' defaults for a version (KIP-733)."""
    defaults = dict(STREAMS)
    if version < STREAMS_RF_FROM_BROKER_FROM:
        defaults["replication.factor"] = 1
    return defaults


def client_defaults(client: str, kind: str, version: tuple[int, int, int] | None = None) -> dict[str, Any]:
    """Default values, by the engine's (Java) key names, for one client and kind."""
    if kind == "producer":
        if client == "librdkafka":
            return dict(LIBRDKAFKA_PRODUCER)
        return java_producer_defaults(version or DEFAULT_JAVA_VERSION)
    if kind == "consumer":
        if client == "librdkafka":
            return dict(LIBRDKAFKA_CONSUMER)
        return java_consumer_defaults(version or DEFAULT_JAVA_VERSION)
    if kind == "streams":
        return streams_defaults(version or DEFAULT_JAVA_VERSION)
    if kind == "broker":
        return dict(BROKER)
    return dict(TOPIC)
