"""Configs in each input format, and malformed input."""

from __future__ import annotations

from typing import Any

import pytest

from auditor.lint.engine.effective import effective_settings, read_explicit
from auditor.lint.engine.errors import LintInputError
from auditor.lint.engine.linter import lint, lint_text, lint_text_described
from auditor.lint.engine.parsers import guess_format, parse_librdkafka, parse_properties, parse_spring_yaml, parse_text
from auditor.lint.engine.terms import LintContext

ALO, AMO, EOS = "at-least-once", "at-most-once", "exactly-once"

LIBRDKAFKA_JSON = """{
  "bootstrap.servers": "127.0.0.1:9092",
  "acks": "1",
  "linger.ms": 10
}"""

JAVA_PROPERTIES = """\
# the orders producer
bootstrap.servers=127.0.0.1:9092
! old-style comment
acks = 1
max.in.flight.requests.per.connection: 10
transactional.id=orders-tx-\\
    0
"""

SPRING_YAML = """\
spring:
  kafka:
    bootstrap-servers: 127.0.0.1:9092
    properties:
      security.protocol: SASL_SSL
    producer:
      acks: 1
      transaction-id-prefix: orders-tx-
      properties:
        enable.idempotence: false
    consumer:
      enable-auto-commit: true
      auto-commit-interval: 2m
      isolation-level: read-uncommitted
      auto-offset-reset: earliest
    streams:
      replication-factor: 3
      properties:
        "[processing.guarantee]": exactly_once_v2
"""


def test_it_lints_a_librdkafka_config_given_as_json_text() -> None:
    results = lint_text(LIBRDKAFKA_JSON, fmt="json", client="librdkafka", kind="producer", guarantee=ALO)
    assert sorted(r.rule for r in results) == ["P001", "P006", "P007"]
    p001 = next(r for r in results if r.rule == "P001")
    assert (p001.config, p001.value, p001.source) == ("acks", "1", "explicit")


def test_it_lints_a_librdkafka_dict_with_the_old_nested_topic_config() -> None:
    config = parse_librdkafka({"enable.idempotence": True, "default.topic.config": {"acks": "1"}})
    assert dict(config) == {"enable.idempotence": True, "acks": "1"}
    results = lint(config, client="librdkafka", kind="producer", guarantee=ALO)
    assert sorted(r.rule for r in results) == ["P001", "P101"]


@pytest.mark.parametrize(
    ("config", "rules"),
    [
        # confluent-kafka 2.16 accepts the first and refuses the second ("`acks` must be set to
        # `all` when `enable.idempotence` is true"): default.topic.config wins whatever the order
        ({"enable.idempotence": True, "default.topic.config": {"acks": "all"}, "acks": 1}, []),
        ({"enable.idempotence": True, "default.topic.config": {"acks": 1}, "acks": "all"}, ["P001", "P101"]),
        (
            {"enable.idempotence": True, "acks": "all", "default.topic.config": {"request.required.acks": 1}},
            ["P001", "P101"],
        ),
        ({"enable.idempotence": True, "request.required.acks": 1, "default.topic.config": {"acks": "all"}}, []),
        ({"request.required.acks": 1, "acks": "all", "default.topic.config": {"request.required.acks": 0}}, ["P001"]),
    ],
)
def test_it_lets_the_nested_topic_config_win_over_the_top_level_as_confluent_kafka_does(
    config: dict[str, object], rules: list[str]
) -> None:
    results = lint(parse_librdkafka(config), client="librdkafka", kind="producer", guarantee=ALO)
    assert sorted(r.rule for r in results) == rules


def test_it_lints_java_properties() -> None:
    config = parse_properties(JAVA_PROPERTIES, source="orders.properties")
    assert config["transactional.id"] == "orders-tx-0"
    assert config.lines["max.in.flight.requests.per.connection"] == 5
    results = lint(config, client="java", kind="producer", guarantee=EOS)
    # Java 4.x checks max.in.flight before turning its default idempotence off for acks=1
    assert sorted(r.rule for r in results) == ["P001", "P006", "P007", "P103", "P104"]


def test_it_reads_properties_escapes_like_java() -> None:
    config = parse_properties("a\\=b = 1\nunicode=caf\\u00e9\ntab=x\\ty\nempty\n")
    assert dict(config) == {"a=b": "1", "unicode": "café", "tab": "x\ty", "empty": ""}


def test_it_maps_spring_boot_properties_to_kafka_keys() -> None:
    configs = parse_spring_yaml(SPRING_YAML, source="application.yml")
    assert dict(configs["producer"]) == {
        "security.protocol": "SASL_SSL",
        "enable.idempotence": False,
        "acks": 1,
        "transactional.id": "orders-tx-",
    }
    assert configs["consumer"]["auto.commit.interval.ms"] == 120_000
    assert configs["consumer"]["enable.auto.commit"] is True
    assert configs["consumer"].lines["isolation.level"] == 14
    assert configs["streams"]["processing.guarantee"] == "exactly_once_v2"


def test_it_lints_every_section_of_a_spring_yaml_file_as_the_java_client() -> None:
    results = lint_text(SPRING_YAML, fmt="spring-yaml", client="librdkafka", guarantee=EOS, source="application.yml")
    by_target = {(r.target, r.rule) for r in results}
    assert by_target == {
        ("producer", "P001"),
        ("producer", "P006"),
        ("producer", "P007"),
        ("producer", "P104"),
        ("consumer", "C002"),
        ("consumer", "C006"),
    }


def test_it_knows_spring_kafkas_listener_container_turns_auto_commit_off_when_unset() -> None:
    text = "spring:\n  kafka:\n    consumer:\n      group-id: orders\n"
    results = lint_text(text, fmt="spring-yaml", client="java", guarantee=ALO)
    assert [(r.rule, r.source) for r in results] == [("C003", "default")]
    # no auto-commit, but the container's own commit after the listener (AckMode BATCH)
    results = lint_text(text, fmt="spring-yaml", client="java", guarantee=AMO)
    assert [(r.rule, r.config, r.value, r.source) for r in results] == [
        ("C008", "spring.kafka.listener.ack-mode", "BATCH", "default")
    ]
    # the commit outside a transaction is still reported, as the container's own
    context = LintContext(consume_transform_produce=True, offsets_in_transaction=False)
    results = lint_text(text, fmt="spring-yaml", client="java", guarantee=EOS, context=context)
    c006 = next(r for r in results if r.rule == "C006")
    assert (c006.config, c006.value, c006.source) == ("enable.auto.commit", False, "default")
    # a file whose only consumer is the listener container's, linted with --kind consumer
    producer_only = "spring:\n  kafka:\n    producer:\n      acks: all\n"
    results = lint_text(producer_only, fmt="spring-yaml", client="java", kind="consumer", guarantee=AMO)
    assert [(r.rule, r.source) for r in results] == [("C008", "default")]


SPRING_LISTENER_YAML = """\
spring:
  kafka:
    consumer:
      group-id: orders
      auto-offset-reset: earliest
    listener:
      type: batch
      ack-mode: record
"""


def test_it_reads_the_listener_containers_ack_mode_with_the_consumer() -> None:
    configs = parse_spring_yaml(SPRING_LISTENER_YAML, source="application.yml")
    assert set(configs) == {"consumer"}
    consumer = configs["consumer"]
    assert consumer["spring.kafka.listener.ack-mode"] == "record"
    assert consumer.lines["spring.kafka.listener.ack-mode"] == 8
    (c008,) = lint_text(SPRING_LISTENER_YAML, fmt="spring-yaml", client="java", guarantee=AMO)
    assert (c008.rule, c008.severity, c008.config, c008.value, c008.source) == (
        "C008",
        "error",
        "spring.kafka.listener.ack-mode",
        "record",
        "explicit",
    )
    assert c008.message == (
        "with spring.kafka.listener.ack-mode=record the listener container commits the offsets itself, as the "
        "listener returns from each record: a crash while the listener processes a record delivers that "
        "record again"
    )
    assert lint_text(SPRING_LISTENER_YAML, fmt="spring-yaml", client="java", guarantee=ALO) == []


@pytest.mark.parametrize(
    "text",
    [
        "spring.kafka.listener.ackMode: manualImmediate\n",
        "spring.kafka.listener.ack_mode: MANUAL_IMMEDIATE\n",
        "spring:\n  kafka:\n    listener:\n      ACK_MODE: manual-immediate\n",
    ],
)
def test_it_binds_the_ack_mode_as_leniently_as_spring_boot(text: str) -> None:
    (c008,) = lint_text(text, fmt="spring-yaml", client="java", guarantee=AMO)
    assert (c008.rule, c008.severity, c008.source) == ("C008", "info", "explicit")
    assert c008.message.endswith(
        "at-most-once holds only if the listener acknowledges each record before processing it, and does not "
        "throw once it has begun (the default error handler delivers the record again, up to ten times in all)"
    )


def test_it_leaves_the_commits_to_an_auto_commit_a_spring_file_turns_on() -> None:
    text = "spring.kafka.consumer.enable-auto-commit: true\nspring.kafka.listener.ack-mode: record\n"
    assert [r.rule for r in lint_text(text, fmt="spring-yaml", client="java", guarantee=AMO)] == ["C004"]


def test_it_rejects_an_ack_mode_spring_does_not_know() -> None:
    text = "spring:\n  kafka:\n    listener:\n      ack-mode: sometimes\n"
    with pytest.raises(LintInputError) as error:
        lint_text(text, fmt="spring-yaml", client="java", guarantee=AMO, source="application.yml")
    assert str(error.value) == (
        "application.yml: line 4: spring.kafka.listener.ack-mode: expected one of RECORD, BATCH, TIME, COUNT, "
        "COUNT_TIME, MANUAL, MANUAL_IMMEDIATE, got 'sometimes'"
    )


SPRING_PROPERTIES = """\
# application.properties
spring.kafka.bootstrap-servers=broker:9092
spring.kafka.consumer.group-id=orders
spring.kafka.consumer.auto-offset-reset=earliest
spring.kafka.consumer.properties[isolation.level]=read_committed
spring.kafka.listener.ack-mode=MANUAL
spring.kafka.producer.acks=1
"""


def test_it_reads_spring_boot_properties_like_its_yaml() -> None:
    configs = parse_text(SPRING_PROPERTIES, fmt="properties", source="application.properties")
    assert set(configs) == {"producer", "consumer"}
    assert dict(configs["consumer"]) == {
        "isolation.level": "read_committed",
        "group.id": "orders",
        "auto.offset.reset": "earliest",
        "spring.kafka.listener.ack-mode": "MANUAL",
    }
    assert configs["consumer"].lines["spring.kafka.listener.ack-mode"] == 6
    assert configs["consumer"].framework == "spring-kafka"
    # every section, as the Java client whatever --client says, without --kind
    results = lint_text(SPRING_PROPERTIES, fmt="properties", client="librdkafka", guarantee=AMO)
    assert [(r.target, r.rule, r.value) for r in results] == [
        ("producer", "P006", False),
        ("consumer", "C008", "MANUAL"),
    ]
    results = lint_text(SPRING_PROPERTIES, fmt="properties", client="librdkafka", guarantee=ALO)
    assert [(r.target, r.rule) for r in results] == [("producer", "P001"), ("producer", "P006"), ("producer", "P007")]


def test_it_does_not_take_a_spring_properties_consumer_for_an_auto_committing_one() -> None:
    # read as plain client keys, spring.kafka.* were ignored and the Java default auto-commit assumed
    text = "spring.kafka.consumer.group-id=orders\n"
    results = lint_text(text, fmt="properties", client="java", kind="consumer", guarantee=ALO)
    assert [(r.rule, r.source) for r in results] == [("C003", "default")]


def test_it_explains_the_spring_default_for_enable_auto_commit() -> None:
    (config,) = parse_text("spring.kafka.consumer.group-id: orders\n", fmt="spring-yaml", source="a.yml").values()
    explicit = read_explicit(config, client="java", source="a.yml")
    settings = effective_settings(
        explicit, client="java", kind="consumer", java_version=(3, 9, 2), framework=config.framework
    )
    assert settings["enable.auto.commit"].describe() == (
        "enable.auto.commit=false (Spring Kafka's listener container, 2.3+: commits after the listener)"
    )


def test_it_still_reports_auto_commit_a_spring_yaml_file_sets() -> None:
    text = "spring:\n  kafka:\n    consumer:\n      group-id: orders\n      enable-auto-commit: true\n"
    (c004,) = lint_text(text, fmt="spring-yaml", client="java", guarantee=AMO)
    assert (c004.rule, c004.severity, c004.value, c004.source) == ("C004", "error", True, "explicit")
    # set through spring.kafka.properties, which every client takes
    text = "spring.kafka.properties.enable.auto.commit: true\nspring.kafka.consumer.group-id: orders\n"
    assert [(r.rule, r.source) for r in lint_text(text, fmt="spring-yaml", client="java", guarantee=AMO)] == [
        ("C004", "explicit")
    ]


def test_it_reads_flat_and_relaxed_spring_keys_across_documents() -> None:
    text = (
        "spring.kafka.consumer.enableAutoCommit: false\n"
        "---\n"
        "spring.kafka.consumer.properties[isolation.level]: read_committed\n"
        "spring.kafka.consumer.auto_offset_reset: earliest\n"
    )
    assert lint_text(text, fmt="spring-yaml", client="java", guarantee=EOS) == []


@pytest.mark.parametrize("fmt", ["spring-yaml", "properties"])
def test_it_lets_a_kinds_properties_map_win_over_its_named_property_as_spring_boot_does(fmt: str) -> None:
    # Spring Boot's KafkaProperties.Producer/Consumer.buildProperties() put the named values
    # (acks, enable-auto-commit) and then putAll(this.properties): the map wins
    sep = ": " if fmt == "spring-yaml" else "="
    producer = (
        f"spring.kafka.producer.acks{sep}1\n"
        f"spring.kafka.producer.properties[acks]{sep}all\n"
        f"spring.kafka.producer.properties[enable.idempotence]{sep}true\n"
    )
    assert lint_text(producer, fmt=fmt, client="java", guarantee=ALO) == []
    overridden = f"spring.kafka.producer.acks{sep}all\nspring.kafka.producer.properties.acks{sep}0\n"
    results = lint_text(overridden, fmt=fmt, client="java", guarantee=ALO)
    assert [(r.rule, str(r.value), r.source) for r in results if r.rule == "P001"] == [("P001", "0", "explicit")]
    consumer = (
        f"spring.kafka.consumer.enable-auto-commit{sep}false\n"
        f"spring.kafka.consumer.properties.enable.auto.commit{sep}true\n"
        f"spring.kafka.consumer.group-id{sep}orders\n"
    )
    configs = parse_text(consumer, fmt=fmt, source="application")
    assert configs["consumer"]["enable.auto.commit"] in (True, "true")
    # a named property still wins over spring.kafka.properties.*, common to every kind
    common = f"spring.kafka.properties.acks{sep}0\nspring.kafka.producer.acks{sep}all\n"
    assert parse_text(common, fmt=fmt, source="application")["producer"]["acks"] == "all"


def test_it_keeps_the_transaction_id_prefix_over_a_transactional_id_in_the_properties_map() -> None:
    # spring-kafka's DefaultKafkaProducerFactory.doCreateTxProducer sets transactional.id to
    # the prefix plus a suffix on each producer, over whatever the properties map holds
    text = (
        "spring.kafka.producer.transaction-id-prefix: orders-tx-\n"
        "spring.kafka.producer.properties.transactional.id: fixed\n"
    )
    assert parse_spring_yaml(text)["producer"]["transactional.id"] == "orders-tx-"


PROFILED_SPRING_YAML = """\
spring:
  kafka:
    producer:
      acks: all
---
spring:
  config:
    activate:
      on-profile: local
  kafka:
    producer:
      acks: 0
---
spring.profiles: dev | test
spring.kafka.producer.acks: 1
---
spring.config.activate.on-profile: "!local"
spring.kafka.consumer.isolation-level: read_uncommitted
spring.kafka.consumer.auto-offset-reset: earliest
"""


def test_it_lints_no_document_for_a_profile_that_is_not_active_and_says_so() -> None:
    # Spring Boot applies a document with spring.config.activate.on-profile (spring.profiles
    # before 2.4) only when its profile expression matches the active profiles, or, none
    # active, the "default" profile (Spring Boot reference, "Activation Properties")
    described = lint_text_described(PROFILED_SPRING_YAML, fmt="spring-yaml", client="java", guarantee=EOS)
    assert sorted((r.target, r.rule) for r in described.results) == [("consumer", "C002"), ("producer", "P008")]
    assert described.notes == (
        "config: document 2 (line 6) not linted: it applies only with profile 'local' (active: none, so default)",
        "config: document 3 (line 14) not linted: it applies only with profile 'dev | test' (active: none, so default)",
        "config: document 4 (line 17) linted: its profile '!local' is active (active: none, so default)",
    )


@pytest.mark.parametrize(
    ("profiles", "expected"),
    [
        (["local"], [("producer", "P001", 0)]),
        (["test"], [("consumer", "C002", "read_uncommitted"), ("producer", "P001", 1)]),
        (["prod"], [("consumer", "C002", "read_uncommitted")]),
    ],
)
def test_it_lints_the_documents_of_the_profiles_given(
    profiles: list[str], expected: list[tuple[str, str, object]]
) -> None:
    results = lint_text(PROFILED_SPRING_YAML, fmt="spring-yaml", client="java", guarantee=EOS, profiles=profiles)
    assert sorted((r.target, r.rule, r.value) for r in results if r.rule in ("P001", "C002")) == expected


def test_it_takes_the_active_profiles_from_the_files_own_spring_profiles_active() -> None:
    text = "spring.profiles.active: local\n---\n" + PROFILED_SPRING_YAML
    results = lint_text(text, fmt="spring-yaml", client="java", guarantee=ALO)
    assert [(r.rule, r.value) for r in results if r.rule == "P001"] == [("P001", 0)]
    # given profiles replace the file's, as spring.profiles.active on the command line does
    results = lint_text(text, fmt="spring-yaml", client="java", guarantee=ALO, profiles=["prod"])
    assert [r.rule for r in results if r.rule == "P001"] == []


def test_it_splits_spring_properties_into_documents_at_their_separator_lines() -> None:
    # Spring Boot 2.4+: a "#---" line starts another document of an application.properties
    text = (
        "spring.kafka.producer.acks=all\n#---\nspring.config.activate.on-profile=local\nspring.kafka.producer.acks=0\n"
    )
    described = lint_text_described(text, fmt="properties", client="java", guarantee=ALO)
    assert described.results == []
    assert described.notes == (
        "config: document 2 (line 3) not linted: it applies only with profile 'local' (active: none, so default)",
    )
    results = lint_text(text, fmt="properties", client="java", guarantee=ALO, profiles=["local"])
    assert [(r.rule, r.value) for r in results if r.rule == "P001"] == [("P001", "0")]
    assert parse_text(text, fmt="properties", source="app", profiles=["local"])["producer"].lines == {"acks": 4}


def test_it_names_the_documents_left_out_when_no_other_holds_kafka_settings() -> None:
    text = "spring.config.activate.on-profile: local\nspring.kafka.producer.acks: 0\n"
    with pytest.raises(LintInputError, match=r"settings found \(config: document 1 \(line 1\) not linted"):
        lint_text(text, fmt="spring-yaml", client="java", guarantee=ALO)


def test_it_leaves_out_a_document_whose_profile_expression_spring_cannot_read() -> None:
    # Spring refuses "a & b | c" without parentheses: Malformed profile expression
    text = "spring.kafka.producer.acks: all\n---\nspring.config.activate.on-profile: a & b | c\nspring.kafka.producer.acks: 0\n"
    described = lint_text_described(text, fmt="spring-yaml", client="java", guarantee=ALO, profiles=["a", "b"])
    assert described.results == []
    assert "is no profile expression Spring Boot reads" in described.notes[0]


def test_it_binds_spring_boots_typed_properties_as_spring_does_and_hands_the_map_to_the_client_as_written() -> None:
    # enable-auto-commit is a Boolean (StringToBooleanConverter: on/off, yes/no, 1/0) and
    # isolation-level an enum bound leniently and lower-cased by KafkaProperties: the client gets
    # true and read_committed. A properties.* value reaches the Java client as written, and
    # kafka-clients refuses "on" and "READ_COMMITTED" (ConfigDef; tests/lint/test_startup_rejections.py)
    named = (
        "spring.kafka.consumer.enable-auto-commit: 'off'\n"
        "spring.kafka.consumer.isolation-level: READ-COMMITTED\n"
        "spring.kafka.consumer.auto-offset-reset: earliest\n"
    )
    consumer = parse_spring_yaml(named)["consumer"]
    assert (consumer["enable.auto.commit"], consumer["isolation.level"]) == (False, "read_committed")
    assert lint_text(named, fmt="spring-yaml", client="java", guarantee=EOS) == []
    as_written = (
        "spring.kafka.consumer.properties.enable.auto.commit: 'off'\n"
        "spring.kafka.consumer.properties.isolation.level: READ_COMMITTED\n"
        "spring.kafka.consumer.auto-offset-reset: earliest\n"
    )
    results = lint_text(as_written, fmt="spring-yaml", client="java", guarantee=EOS)
    assert sorted((r.rule, r.config, r.value) for r in results) == [
        ("C105", "enable.auto.commit", "off"),
        ("C105", "isolation.level", "READ_COMMITTED"),
    ]
    with pytest.raises(
        LintInputError, match=r"line 1: spring.kafka.consumer.enable-auto-commit: expected true or false"
    ):
        parse_spring_yaml("spring.kafka.consumer.enable-auto-commit: maybe\n", source="a.yml")
    with pytest.raises(LintInputError, match="isolation-level: expected read-committed or read-uncommitted"):
        parse_spring_yaml("spring.kafka.consumer.isolation-level: serializable\n", source="a.yml")


def test_it_reports_a_value_the_client_refuses_as_written_naming_the_clients_message() -> None:
    results = lint(parse_properties("acks=ALL\n"), client="java", kind="producer", guarantee=ALO)
    assert [(r.rule, r.value, r.expected, r.severity) for r in results] == [
        ("P109", "ALL", "one of all, -1, 0, 1", "error")
    ]
    assert results[0].message == (
        "the client refuses to start: acks=ALL "
        "(Invalid value ALL for configuration acks: String must be one of: all, -1, 0, 1)"
    )
    # librdkafka takes ALL, but not yes for a boolean
    results = lint({"acks": "ALL", "enable.idempotence": "yes"}, client="librdkafka", kind="producer", guarantee=ALO)
    assert [(r.rule, r.message) for r in results] == [
        (
            "P109",
            "the client refuses to start: enable.idempotence=yes "
            '(Expected bool value for "enable.idempotence": true or false)',
        )
    ]


def test_it_accepts_spring_durations_in_every_form() -> None:
    for written, ms in (("5000", 5000), ("5s", 5000), ("500ms", 500), ("PT1M", 60_000), ("1h", 3_600_000)):
        configs = parse_spring_yaml(f"spring.kafka.consumer.auto-commit-interval: {written}\n")
        assert configs["consumer"]["auto.commit.interval.ms"] == ms


def test_it_guesses_the_format() -> None:
    assert guess_format(LIBRDKAFKA_JSON) == "json"
    assert guess_format(SPRING_YAML) == "spring-yaml"
    assert guess_format(JAVA_PROPERTIES) == "properties"
    assert guess_format("acks: 1", filename="application.yaml") == "spring-yaml"
    assert guess_format("spring.kafka.producer.acks=1") == "properties"


# --- malformed input -------------------------------------------------------------------------


def test_it_rejects_bad_json_naming_the_line() -> None:
    with pytest.raises(LintInputError) as error:
        parse_librdkafka('{\n  "acks": "1"\n  "linger.ms": 5\n}', source="producer.json")
    assert str(error.value).startswith("producer.json: line 3: invalid JSON at column 3")
    assert "expected an object of config keys" in str(error.value)


def test_it_rejects_json_that_is_not_an_object() -> None:
    with pytest.raises(LintInputError, match=r"^producer.json: expected a JSON object of config keys, got list$"):
        parse_librdkafka('["acks", 1]', source="producer.json")


def test_it_rejects_a_nested_value() -> None:
    with pytest.raises(LintInputError, match=r"^config: acks: expected a string, number or boolean, got list$"):
        lint({"acks": ["all"]}, client="librdkafka", kind="producer", guarantee=ALO)


def test_it_rejects_a_properties_line_without_separator() -> None:
    with pytest.raises(LintInputError) as error:
        parse_properties("acks=all\nlinger.ms 5\n", source="app.properties")
    assert str(error.value) == "app.properties: line 2: expected 'key=value' (or 'key: value'); found no '=' or ':'"


def test_it_rejects_a_properties_line_with_an_empty_key() -> None:
    with pytest.raises(LintInputError, match=r"^app.properties: line 1: expected 'key=value'; the key is empty$"):
        parse_properties("=all\n", source="app.properties")


def test_it_rejects_a_malformed_unicode_escape() -> None:
    with pytest.raises(LintInputError, match=r"^app.properties: line 3: malformed \\uXXXX escape"):
        parse_properties("a=1\n# c\nb=\\u12G4\n", source="app.properties")


def test_it_rejects_a_non_numeric_value_naming_input_line_and_expectation() -> None:
    config = parse_properties("acks=all\nlinger.ms=soon\n", source="app.properties")
    with pytest.raises(LintInputError) as error:
        lint(config, client="java", kind="producer", guarantee=ALO)
    assert str(error.value) == "app.properties: line 2: linger.ms: expected a number, got 'soon'"


def test_it_rejects_a_non_numeric_json_value_naming_its_line() -> None:
    config = parse_librdkafka('{\n  "acks": "all",\n  "message.timeout.ms": "5m"\n}', source="p.json")
    with pytest.raises(LintInputError) as error:
        lint(config, client="librdkafka", kind="producer", guarantee=ALO)
    assert str(error.value) == "p.json: line 3: message.timeout.ms: expected a whole number, got '5m'"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"acks": "some"}, "config: acks: expected all, -1, 0 or 1, got 'some'"),
        ({"enable.idempotence": "maybe"}, "config: enable.idempotence: expected true or false, got 'maybe'"),
        ({"retries": True}, "config: retries: expected a number, got True"),
    ],
)
def test_it_rejects_values_of_the_wrong_type(config: dict[str, object], message: str) -> None:
    with pytest.raises(LintInputError) as error:
        lint(config, client="librdkafka", kind="producer", guarantee=ALO)
    assert str(error.value) == message


def test_it_rejects_yaml_that_is_not_a_mapping() -> None:
    with pytest.raises(LintInputError) as error:
        parse_spring_yaml("- spring\n- kafka\n", source="application.yml")
    assert str(error.value) == "application.yml: line 1: expected a YAML mapping (spring: kafka: ...), got a list"


def test_it_rejects_invalid_yaml_naming_the_line() -> None:
    with pytest.raises(LintInputError) as error:
        parse_spring_yaml("spring:\n  kafka:\n    producer: [acks\n", source="application.yml")
    assert str(error.value).startswith("application.yml: line 4: invalid YAML (")


def test_it_rejects_a_bad_spring_duration() -> None:
    with pytest.raises(LintInputError) as error:
        parse_spring_yaml("spring:\n  kafka:\n    consumer:\n      auto-commit-interval: soon\n", source="a.yml")
    assert str(error.value) == (
        "a.yml: line 4: spring.kafka.consumer.auto-commit-interval: expected a duration such as 5000, 5s, "
        "500ms or PT5S, got 'soon'"
    )


def test_it_rejects_a_spring_file_without_kafka_clients() -> None:
    with pytest.raises(LintInputError, match=r"^a.yml: no spring.kafka.producer, .consumer or .streams settings"):
        parse_text("server:\n  port: 8080\n", fmt="spring-yaml", source="a.yml")


def test_it_rejects_an_unknown_format() -> None:
    with pytest.raises(LintInputError, match=r"^x: unknown format 'toml': expected one of json, properties"):
        parse_text("", fmt="toml", source="x")


def test_it_needs_a_kind_for_single_config_formats() -> None:
    with pytest.raises(LintInputError, match=r"^p.json: expected --kind"):
        lint_text("{}", fmt="json", client="librdkafka", guarantee=ALO, source="p.json")
    with pytest.raises(LintInputError, match=r"^c.properties: expected --kind"):
        lint_text("acks=1\n", fmt="properties", client="java", guarantee=ALO, source="c.properties")


@pytest.mark.parametrize(
    ("option", "kwargs", "message"),
    [
        ("client", {"client": "kafka-python"}, "--client: expected one of librdkafka, java, got 'kafka-python'"),
        ("kind", {"kind": "admin"}, "--kind: expected one of producer, consumer, topic, broker, streams, got 'admin'"),
        (
            "guarantee",
            {"guarantee": "twice"},
            "--guarantee: expected one of at-most-once, at-least-once, exactly-once, got 'twice'",
        ),
    ],
)
def test_it_rejects_unknown_options(option: str, kwargs: dict[str, str], message: str) -> None:
    arguments: dict[str, Any] = {"client": "librdkafka", "kind": "producer", "guarantee": ALO, **kwargs}
    with pytest.raises(LintInputError) as error:
        lint({}, **arguments)
    assert str(error.value) == message


def test_it_accepts_guarantee_spellings() -> None:
    for spelling in ("at_least_once", "ALO", "At-Least-Once"):
        results = lint({}, client="java", kind="consumer", guarantee=spelling)
        assert {r.guarantee for r in results} == {ALO}


def _spring_producer(acks: str) -> str:
    return f"spring:\n  kafka:\n    producer:\n      acks: {acks}\n      client-id: orders\n"


def test_it_lints_a_spring_placeholders_default_and_says_so() -> None:
    linted = lint_text_described(
        _spring_producer("${KAFKA_ACKS:0}"), fmt="spring-yaml", client="java", guarantee="at-least-once"
    )
    assert [(r.rule, r.value) for r in linted.results] == [("P001", "0")]
    assert any("acks (line 4)" in note and "placeholder's default '0'" in note for note in linted.notes)
    clean = lint_text_described(
        _spring_producer("${KAFKA_ACKS:all}"), fmt="spring-yaml", client="java", guarantee="at-least-once"
    )
    assert clean.results == []
    text = "spring.kafka.consumer.enable-auto-commit=${AUTO:false}\nspring.kafka.consumer.auto-commit-interval=${I:${J:5s}}\n"
    consumer = parse_text(text, fmt="properties", source="app.properties")["consumer"]
    assert consumer["enable.auto.commit"] is False and consumer["auto.commit.interval.ms"] == 5000


def test_it_leaves_out_a_spring_placeholder_without_a_default() -> None:
    text = "spring:\n  kafka:\n    consumer:\n      enable-auto-commit: ${AUTO}\n      group-id: g\n    producer:\n      acks: ${ACKS}\n"
    linted = lint_text_described(text, fmt="spring-yaml", client="java", guarantee="at-least-once")
    assert "enable.auto.commit" not in parse_text(text, fmt="spring-yaml", source="app.yml")["consumer"]
    assert any(
        "spring.kafka.producer.acks (line 7)" in note and "no default: not linted" in note for note in linted.notes
    )
    # text values keep the placeholder as written: a transactional.id is set, whatever it holds
    prefix = parse_text(
        "spring:\n  kafka:\n    producer:\n      transaction-id-prefix: ${TX}\n", fmt="spring-yaml", source="app.yml"
    )["producer"]
    assert prefix["transactional.id"] == "${TX}"


def test_a_key_with_blanks_is_no_client_setting() -> None:
    # java.util.Properties keeps "\ acks" as " acks": the producer ignores it and runs with acks=all
    java = lint_text("\\ acks=0\n", fmt="properties", client="java", kind="producer", guarantee=ALO)
    assert [(r.rule, r.severity, r.config) for r in java] == [("P011", "warning", " acks")]
    assert "runs with acks=all (default)" in java[0].message
    quoted = lint_text('{"acks ": "0"}', fmt="json", client="java", kind="producer", guarantee=ALO)
    assert [(r.rule, r.config) for r in quoted] == [("P011", "acks ")]
    # librdkafka: 'No such configuration property: "acks "' when the producer is created
    refused = lint_text('{"acks ": "0"}', fmt="json", client="librdkafka", kind="producer", guarantee=ALO)
    assert [(r.rule, r.severity) for r in refused if r.config == "acks "] == [("P109", "error")]
    assert "P001" not in {r.rule for r in refused}


def test_it_applies_yaml_merge_keys_as_spring_boot_does() -> None:
    text = (
        'kafka-defaults: &kd\n  acks: "0"\n  retries: 0\n'
        "spring:\n  kafka:\n    producer:\n      <<: *kd\n      client-id: orders\n"
    )
    results = lint_text(text, fmt="spring-yaml", client="java", guarantee=ALO)
    assert [(r.rule, r.value) for r in results] == [("P001", "0"), ("P002", 0)]
    # the mapping's own keys win over the merged ones, wherever the merge is written
    own = "base: &b\n  acks: '0'\nspring:\n  kafka:\n    producer:\n      acks: all\n      <<: [*b]\n"
    assert parse_text(own, fmt="spring-yaml", source="app.yml")["producer"] == {"acks": "all"}
    with pytest.raises(LintInputError, match="line 4: a merge key '<<' must merge a mapping") as error:
        parse_text("spring:\n  kafka:\n    producer:\n      <<: hunter2\n", fmt="spring-yaml", source="app.yml")
    assert "hunter2" not in str(error.value)


def test_it_guesses_a_properties_file_written_with_colons() -> None:
    documents = "spring.kafka.producer.acks: all\n#---\nspring.config.activate.on-profile: local\nspring.kafka.producer.acks: 0\n"
    assert guess_format(documents) == "properties"
    assert guess_format(documents.replace("#---", "!---")) == "properties"
    assert guess_format("spring.kafka.producer.acks: 0\nspring.kafka.consumer.group-id: g\n") == "properties"
    # YAML stays YAML: nested, a --- separator, or quoted values
    assert guess_format("spring.kafka.producer.acks: all\n---\nspring.kafka.producer.acks: 0\n") == "spring-yaml"
    assert guess_format('spring.kafka.producer.acks: "0"\n') == "spring-yaml"
    assert guess_format("spring:\n  kafka:\n    producer:\n      acks: 0\n#---\n") == "spring-yaml"
