"""Unset keys take each client's real default, and results say so."""

from __future__ import annotations

import pytest

from auditor.lint.engine.defaults import parse_version
from auditor.lint.engine.effective import effective_settings, read_explicit
from auditor.lint.engine.errors import LintInputError
from auditor.lint.engine.linter import lint, reported_java_client_version
from auditor.lint.engine.terms import LintContext, Overtaken

ALO, AMO, EOS = "at-least-once", "at-most-once", "exactly-once"


@pytest.mark.parametrize(
    ("client", "kind", "guarantee", "expected"),
    [
        # librdkafka: idempotence off and 1000000 requests in flight
        ("librdkafka", "producer", AMO, ["P006"]),
        ("librdkafka", "producer", ALO, ["P006", "P007"]),
        ("librdkafka", "producer", EOS, ["P006", "P007", "P008"]),
        # Java 3.0+: idempotent with at most 5 in flight
        ("java", "producer", AMO, []),
        ("java", "producer", ALO, []),
        ("java", "producer", EOS, ["P008"]),
        # librdkafka stores the offset when poll() returns; reads committed only
        ("librdkafka", "consumer", AMO, ["C004"]),
        ("librdkafka", "consumer", ALO, ["C001", "C003"]),
        ("librdkafka", "consumer", EOS, ["C003", "C006"]),
        # Java reads uncommitted records by default
        ("java", "consumer", AMO, ["C004"]),
        ("java", "consumer", ALO, ["C001", "C003"]),
        ("java", "consumer", EOS, ["C002", "C003", "C006"]),
        ("java", "topic", ALO, ["T001", "T002"]),
        ("java", "broker", ALO, ["B007", "B008"]),
        ("java", "streams", EOS, ["S001", "S003"]),
    ],
)
def test_it_lints_an_empty_config_with_the_clients_defaults(
    client: str, kind: str, guarantee: str, expected: list[str]
) -> None:
    results = lint({}, client=client, kind=kind, guarantee=guarantee)
    assert sorted(r.rule for r in results) == expected
    assert {r.source for r in results} <= {"default"}


def test_it_names_librdkafka_defaults_the_way_librdkafka_does() -> None:
    results = lint({"enable.idempotence": True}, client="librdkafka", kind="producer", guarantee=ALO)
    assert results == []
    results = lint(
        {"enable.idempotence": True, "linger.ms": 200_000}, client="librdkafka", kind="producer", guarantee=ALO
    )
    (p004,) = results
    assert "message.timeout.ms=300000 (default)" in p004.message
    assert p004.expected == "< message.timeout.ms / 2 (150000 ms)"


def test_it_reports_an_alias_under_the_name_the_user_typed() -> None:
    results = lint(
        {"request.required.acks": "1", "enable.idempotence": "true"},
        client="librdkafka",
        kind="producer",
        guarantee=ALO,
    )
    p001 = next(r for r in results if r.rule == "P001")
    assert (p001.config, p001.value, p001.source) == ("request.required.acks", "1", "explicit")


def test_it_folds_aliases_so_the_last_one_set_wins_as_in_librdkafka() -> None:
    config = {"queue.buffering.max.ms": 200_000, "linger.ms": 10, "enable.idempotence": True}
    assert lint(config, client="librdkafka", kind="producer", guarantee=ALO) == []
    config = {"linger.ms": 10, "queue.buffering.max.ms": 200_000, "enable.idempotence": True}
    assert [r.rule for r in lint(config, client="librdkafka", kind="producer", guarantee=ALO)] == ["P004"]


def test_it_does_not_take_librdkafkas_legacy_auto_commit_enable_for_enable_auto_commit() -> None:
    # a topic-level property of the simple legacy consumer: the KafkaConsumer keeps auto-committing
    config = {"auto.commit.enable": False, "auto.offset.reset": "earliest"}
    results = lint(config, client="librdkafka", kind="consumer", guarantee=ALO)
    c001 = next(r for r in results if r.rule == "C001")
    assert (c001.severity, c001.source) == ("error", "default")
    assert "enable.auto.commit=true (default)" in c001.message
    c007 = next(r for r in results if r.rule == "C007")
    assert (c007.severity, c007.config, c007.value, c007.source) == ("info", "auto.commit.enable", False, "explicit")
    assert c007.message == (
        "auto.commit.enable=false only configures librdkafka's simple legacy consumer: this consumer ignores it "
        "and runs with enable.auto.commit=true (default)"
    )


def test_it_names_the_setting_librdkafka_refuses_under_the_consumer_group_protocol() -> None:
    config = {"group.id": "x", "group.protocol": "consumer", "session.timeout.ms": 45_000}
    results = lint(config, client="librdkafka", kind="consumer", guarantee=ALO)
    c102 = next(r for r in results if r.rule == "C102")
    assert (c102.severity, c102.config, c102.value, c102.source) == ("error", "session.timeout.ms", 45_000, "explicit")
    assert c102.message == (
        "the client refuses to start: session.timeout.ms is not supported for group.protocol=consumer "
        "(the broker's group.consumer.session.timeout.ms applies)"
    )
    config = {"group.id": "x", "group.protocol": "consumer", "max.poll.interval.ms": 30_000}
    assert "C101" not in {r.rule for r in lint(config, client="librdkafka", kind="consumer", guarantee=ALO)}


def test_it_names_the_settings_the_java_consumer_refuses_under_the_consumer_group_protocol_from_4_0() -> None:
    config = {"group.protocol": "consumer", "heartbeat.interval.ms": "3000", "session.timeout.ms": "45000"}
    results = lint(config, client="java", kind="consumer", guarantee=ALO)
    refused = [(r.config, r.value, r.source) for r in results if r.rule == "C102"]
    assert refused == [("session.timeout.ms", "45000", "explicit"), ("heartbeat.interval.ms", "3000", "explicit")]
    heartbeat = next(r for r in results if r.rule == "C102" and r.config == "heartbeat.interval.ms")
    assert heartbeat.message == (
        "the client refuses to start: heartbeat.interval.ms is not supported for group.protocol=consumer "
        "(the broker's group.consumer.heartbeat.interval.ms applies; the Java consumer refuses it from 4.0, "
        "3.7 to 3.9 ignore it)"
    )
    # 3.9 constructs the consumer and ignores them
    older = lint(config, client="java", kind="consumer", guarantee=ALO, context=LintContext(client_version="3.9.2"))
    assert "C102" not in {r.rule for r in older}


def test_it_explains_that_java_turns_its_default_idempotence_off_for_acks_1() -> None:
    results = lint({"acks": "1"}, client="java", kind="producer", guarantee=ALO)
    p006 = next(r for r in results if r.rule == "P006")
    assert p006.source == "default"
    assert p006.value is False
    assert "silently turned off by acks=1" in p006.message


def test_it_knows_librdkafka_turns_idempotence_on_for_a_transactional_id() -> None:
    results = lint(
        {"transactional.id": "orders-tx-0", "acks": "1"}, client="librdkafka", kind="producer", guarantee=EOS
    )
    p101 = next(r for r in results if r.rule == "P101")
    assert p101.message == (
        "the client refuses to start: enable.idempotence=true (turned on by transactional.id) requires "
        "acks=all, got acks=1"
    )


def test_it_uses_the_java_version_for_version_dependent_defaults() -> None:
    old = LintContext(client_version="2.8.1")
    results = lint({}, client="java", kind="producer", guarantee=ALO, context=old)
    assert sorted(r.rule for r in results) == ["P001", "P006", "P007"]
    assert {r.source for r in results} == {"default"}
    # KAFKA-13598: 3.0.0 announced idempotence by default but did not apply it
    results = lint({}, client="java", kind="producer", guarantee=ALO, context=LintContext(client_version="3.0.0"))
    assert sorted(r.rule for r in results) == ["P006", "P007"]
    results = lint({}, client="java", kind="producer", guarantee=ALO, context=LintContext(client_version="3.2.3"))
    assert results == []


@pytest.mark.parametrize("version", ["2.8.1", "3.0.0", "3.1.0"])
def test_it_knows_java_before_3_0_1_turns_idempotence_on_for_a_transactional_id(version: str) -> None:
    context = LintContext(client_version=version)
    assert lint({"transactional.id": "app-1"}, client="java", kind="producer", guarantee=EOS, context=context) == []
    explicit = read_explicit({"transactional.id": "app-1"}, client="java", source="config")
    java_version = parse_version(version)
    assert java_version is not None
    settings = effective_settings(explicit, client="java", kind="producer", java_version=java_version)
    idempotence, acks = settings["enable.idempotence"], settings["acks"]
    assert (idempotence.value, idempotence.source, idempotence.note) == (
        True,
        "default",
        "turned on by transactional.id",
    )
    assert (acks.value, acks.source, acks.note) == ("all", "default", "set to all by enable.idempotence")


@pytest.mark.parametrize(
    ("reported", "kafka"),
    [
        ("3.9.2", "3.9.2"),
        (" 4.1.0 ", "4.1.0"),
        ("7.0.0-ccs", "3.0.0"),  # idempotence not yet on by default (KAFKA-13598)
        ("7.0.1-ccs", "3.0.1"),  # a later CP patch: taken to carry the fix (a miss at worst)
        ("7.6.0-ccs", "3.6.0"),
        ("7.9.3-ce", "3.9.1"),
        ("8.0.0-ccs", "4.0.0"),
        ("8.1.2-ce", "4.1.1"),
    ],
)
def test_it_reads_a_java_clients_reported_version_as_the_kafka_version_it_ships(reported: str, kafka: str) -> None:
    assert reported_java_client_version(reported) == kafka


@pytest.mark.parametrize(
    ("reported", "kafka"),
    [
        ("3.7.0.redhat-00007", "3.7.0"),  # Red Hat's AMQ Streams build of Kafka 3.7.0
        ("3.9.0-SNAPSHOT", "3.9.0"),
        ("2.8.1.redhat-00002", "2.8.1"),
    ],
)
def test_it_reads_a_vendor_build_of_a_java_client_as_the_kafka_release_it_names(reported: str, kafka: str) -> None:
    assert reported_java_client_version(reported) == kafka
    # a 3.x producer with max.in.flight 10 and idempotence defaulted starts (idempotence is
    # silently turned off); only 4.0 refuses it (P103): the 4.0 fallback gave a 3.x client P103
    config = {"max.in.flight.requests.per.connection": "10"}
    context = LintContext(client_version=reported_java_client_version(reported))
    assert "P103" not in [
        r.rule for r in lint(config, client="java", kind="producer", guarantee="at-most-once", context=context)
    ]


@pytest.mark.parametrize(
    ("reported", "reason"),
    [
        ("", "got none"),
        ("4.x-custom", "got '4.x-custom'"),
        ("7.6.0", "a Confluent Platform version?"),  # CP's jars say -ccs or -ce: not guessed
        ("6.2.1-ccs", "'6.2.1-ccs' is a Confluent Platform version whose Apache Kafka version is not known"),
        ("8.2.0-ce", "not known (known: 7.0 to 8.1)"),
    ],
)
def test_it_refuses_a_reported_java_version_it_cannot_read_or_map(reported: str, reason: str) -> None:
    with pytest.raises(LintInputError, match=r"^client version: ") as raised:
        reported_java_client_version(reported)
    assert reason in str(raised.value)


def test_it_knows_java_before_3_0_1_sets_an_unset_acks_to_all_for_explicit_idempotence() -> None:
    old = LintContext(client_version="2.8.1")
    assert lint({"enable.idempotence": True}, client="java", kind="producer", guarantee=ALO, context=old) == []
    results = lint(
        {"enable.idempotence": True, "acks": "1"}, client="java", kind="producer", guarantee=ALO, context=old
    )
    p101 = next(r for r in results if r.rule == "P101")
    assert (p101.severity, p101.value, p101.source) == ("error", "1", "explicit")
    assert p101.message == "the client refuses to start: enable.idempotence=true requires acks=all, got acks=1"


def test_it_knows_java_before_3_0_1_refuses_retries_0_with_a_transactional_id() -> None:
    old = LintContext(client_version="2.8.1")
    results = lint(
        {"transactional.id": "app-1", "retries": 0}, client="java", kind="producer", guarantee=EOS, context=old
    )
    assert sorted(r.rule for r in results) == ["P002", "P102"]
    p102 = next(r for r in results if r.rule == "P102")
    assert p102.message == (
        "the client refuses to start: enable.idempotence=true (turned on by transactional.id) requires "
        "retries >= 1, got retries=0"
    )


def test_it_knows_java_before_2_1_does_not_retry_unless_told_to() -> None:
    """KIP-91 (2.1) made retries 2147483647 and bounded a send with delivery.timeout.ms."""
    (p002,) = [
        r
        for r in lint({}, client="java", kind="producer", guarantee=ALO, context=LintContext(client_version="2.0.1"))
        if r.rule == "P002"
    ]
    (explicit,) = [
        r
        for r in lint(
            {"retries": 0}, client="java", kind="producer", guarantee=ALO, context=LintContext(client_version="2.1.0")
        )
        if r.rule == "P002"
    ]
    assert (p002.severity, p002.value, p002.source) == (explicit.severity, 0, "default")
    assert p002.message.startswith("with retries=0 (default) a transient error")
    assert "before Kafka 2.1 the Java producer's retries default is 0" in p002.message
    results = lint({}, client="java", kind="producer", guarantee=ALO, context=LintContext(client_version="2.1.0"))
    assert "P002" not in {r.rule for r in results}


def test_it_knows_java_before_2_1_sets_an_unset_retries_to_the_maximum_for_idempotence() -> None:
    explicit = read_explicit({"transactional.id": "app-1"}, client="java", source="config")
    settings = effective_settings(explicit, client="java", kind="producer", java_version=(2, 0, 1))
    retries = settings["retries"]
    assert (retries.value, retries.source, retries.note) == (
        2_147_483_647,
        "default",
        "set to 2147483647 by enable.idempotence",
    )


def test_it_knows_java_before_2_1_ignores_delivery_timeout_ms() -> None:
    config = {"delivery.timeout.ms": 10_000}
    old = LintContext(client_version="2.0.1")
    explicit = read_explicit(config, client="java", source="config")
    settings = effective_settings(explicit, client="java", kind="producer", java_version=(2, 0, 1))
    timeout = settings["delivery.timeout.ms"]
    assert (timeout.value, timeout.shown, timeout.source) == (None, 10_000, "explicit")
    unset = effective_settings({}, client="java", kind="producer", java_version=(2, 0, 1))
    assert unset["delivery.timeout.ms"].value is None  # not 120000: the key does not exist yet
    # not "too short" (P003) nor "refuses to start" (P107): the client runs without it
    results = lint(config, client="java", kind="producer", guarantee=ALO, context=old)
    assert sorted(r.rule for r in results) == ["P001", "P002"]
    p002 = next(r for r in results if r.rule == "P002")
    assert p002.message.endswith("and it has no delivery.timeout.ms (it ignores delivery.timeout.ms=10000)")


def test_it_gives_streams_internal_topics_one_replica_before_3_0() -> None:
    """KIP-733 (3.0) made an unset replication.factor the brokers' default.replication.factor."""
    broker = {"default.replication.factor": "3"}
    old = LintContext(client_version="2.8.1", broker_configs=broker)
    (unset,) = lint({}, client="java", kind="streams", guarantee=ALO, context=old)
    (explicit,) = lint({"replication.factor": 1}, client="java", kind="streams", guarantee=ALO, context=old)
    assert (unset.rule, unset.severity, unset.value, unset.source) == (explicit.rule, explicit.severity, 1, "default")
    assert unset.message == explicit.message.replace("replication.factor=1", "replication.factor=1 (default)")
    new = LintContext(client_version="3.0.0", broker_configs=broker)
    assert lint({}, client="java", kind="streams", guarantee=ALO, context=new) == []


def test_it_takes_topic_defaults_from_the_brokers_settings() -> None:
    broker = {"default.replication.factor": "3", "min.insync.replicas": "2", "log.retention.hours": "1"}
    context = LintContext(broker_configs=broker, consumer_lag_seconds=7200)
    (t005,) = lint({}, client="java", kind="topic", guarantee=ALO, context=context, subject="orders")
    assert (t005.rule, t005.value, t005.source, t005.subject) == ("T005", 3_600_000, "default", "orders")


def test_it_compares_the_consumers_lag_with_how_long_a_compacted_topic_keeps_tombstones() -> None:
    compacted = {"replication.factor": 3, "min.insync.replicas": 2, "cleanup.policy": "compact"}
    context = LintContext(consumer_lag_seconds={"orders": 3 * 86400})
    (t007,) = lint(compacted, client="java", kind="topic", guarantee=ALO, context=context, subject="orders")
    assert (t007.rule, t007.severity, t007.config, t007.value, t007.source) == (
        "T007",
        "error",
        "delete.retention.ms",
        86_400_000,
        "default",
    )
    assert t007.message.startswith("the consumers are 3 d behind but delete.retention.ms=86400000 (default)")
    # the broker's log.cleaner.delete.retention.ms is the topic's default
    context = LintContext(
        consumer_lag_seconds=13 * 3600, broker_configs={"log.cleaner.delete.retention.ms": str(2 * 86_400_000)}
    )
    assert lint(compacted, client="java", kind="topic", guarantee=ALO, context=context) == []
    context = LintContext(consumer_lag_seconds=13 * 3600)
    assert [
        (r.rule, r.severity) for r in lint(compacted, client="java", kind="topic", guarantee=ALO, context=context)
    ] == [("T007", "warning")]


def test_it_reads_per_topic_lag_for_the_named_topic() -> None:
    context = LintContext(consumer_lag_seconds={"orders": 8 * 86400, "audit": 60})
    topic = {"replication.factor": 3, "min.insync.replicas": 2}
    assert [
        r.rule for r in lint(topic, client="java", kind="topic", guarantee=ALO, context=context, subject="orders")
    ] == ["T005"]
    assert lint(topic, client="java", kind="topic", guarantee=ALO, context=context, subject="audit") == []


def test_it_calls_a_group_the_log_start_overtook_an_error_whatever_its_lag_in_time() -> None:
    overtaken = {"orders": [Overtaken("audit-g", 0, 5, 7), Overtaken("billing", 2, 10, 50)]}
    context = LintContext(consumer_lag_seconds={"orders": 60, "audit": 60}, overtaken=overtaken)
    topic = {"replication.factor": 3, "min.insync.replicas": 2, "retention.ms": 3_600_000}
    (t005,) = lint(topic, client="java", kind="topic", guarantee=ALO, context=context, subject="orders")
    assert (t005.rule, t005.severity, t005.expected) == ("T005", "error", "> 2 x the consumers' lag (2 min)")
    assert t005.message == (
        "group billing committed offset 10 on partition 2 but the log now starts at 50: 40 records were deleted "
        "before the group committed them (1 more group partitions likewise); retention.ms=3600000 keeps records 1 h"
    )
    assert lint(topic, client="java", kind="topic", guarantee=ALO, context=context, subject="audit") == []
    compacted = {**topic, "cleanup.policy": "compact"}
    assert lint(compacted, client="java", kind="topic", guarantee=ALO, context=context, subject="orders") == []
