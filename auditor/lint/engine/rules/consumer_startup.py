"""Consumer rules for configs that never consume: the client, or Spring's listener container,
refuses to start with them."""

from __future__ import annotations

from collections.abc import Iterator

from auditor.lint.engine import defaults as d
from auditor.lint.engine.rules import refused_values
from auditor.lint.engine.terms import REFUSES_TO_START, Finding, Rule, RuleBook, Setting, Subject
from auditor.vocabulary import GUARANTEES

ALL = frozenset(GUARANTEES)
RK = frozenset({"librdkafka"})
JAVA = frozenset({"java"})
SPRING_REFUSAL = "Consumer cannot be configured for auto commit for ackMode"

startup_rules = RuleBook("consumer")


def spring_container_refuses_auto_commit(s: Subject) -> tuple[Setting, Setting] | None:
    """(enable.auto.commit, ack-mode) when Spring's listener container refuses to start with them:
    auto-commit on and an ack mode whose listener acknowledges (MANUAL, MANUAL_IMMEDIATE)."""
    ack_mode, auto_commit = s.settings.get(d.SPRING_ACK_MODE), s.settings.get("enable.auto.commit")
    if ack_mode is None or auto_commit is None or not auto_commit.value:
        return None
    if ack_mode.value not in d.SPRING_MANUAL_ACK_MODES:
        return None
    return auto_commit, ack_mode


@startup_rules.rule(
    "C101",
    "max.poll.interval.ms below session.timeout.ms",
    ALL,
    "error",
    why="the consumer is never created, so nothing is consumed",
    fix="set max.poll.interval.ms >= session.timeout.ms",
    clients=RK,
)
def check_startup_poll_interval_vs_session(s: Subject) -> Iterator[Finding]:
    # librdkafka checks this for the classic protocol only: under group.protocol=consumer
    # (KIP-848) the session timeout is the broker's (C102 covers a session.timeout.ms set there)
    if s.value("group.protocol") == "consumer":
        return
    interval, session = s["max.poll.interval.ms"], s["session.timeout.ms"]
    if interval.value < session.value:
        yield Finding(
            interval,
            f">= session.timeout.ms ({session.value})",
            f"{REFUSES_TO_START}: {interval.describe()} must be >= {session.describe()}",
        )


@startup_rules.rule(
    "C102",
    "classic-protocol setting with group.protocol=consumer",
    ALL,
    "error",
    why="the consumer is never created, so nothing is consumed",
    fix="remove the setting: under group.protocol=consumer the broker's group.consumer.* settings "
    "hold the session timeout and heartbeat interval, and group.remote.assignor names the assignor",
)
def check_startup_classic_settings_under_consumer_protocol(s: Subject) -> Iterator[Finding]:
    # librdkafka (2.16) and Java from 4.0 refuse them; Java 3.7 to 3.9 ignore them
    protocol = s["group.protocol"]
    if protocol.value != "consumer":
        return
    # the client's version decides, 4.0 unless given (audit lint --client-version): say so
    since = "; the Java consumer refuses it from 4.0, 3.7 to 3.9 ignore it" if s.client == "java" else ""
    for key, instead in d.classic_only_consumer_keys(s.client, s.java_version).items():
        setting = s.settings.get(key)
        if setting is not None and setting.explicit:
            yield Finding(
                setting,
                f"unset with {protocol.describe()}",
                f"{REFUSES_TO_START}: {setting.name} is not supported for {protocol.describe()} ({instead}{since})",
            )


@startup_rules.rule(
    "C103",
    "group.remote.assignor with group.protocol=classic",
    ALL,
    "error",
    why="the consumer is never created, so nothing is consumed",
    fix="remove group.remote.assignor (the classic protocol's assignor is partition.assignment.strategy), "
    "or set group.protocol=consumer",
    clients=JAVA,
)
def check_startup_remote_assignor_under_classic_protocol(s: Subject) -> Iterator[Finding]:
    # the Java consumer refuses it from 3.9.0; 3.7 and 3.8 ignore it, and librdkafka accepts it
    protocol, assignor = s["group.protocol"], s.settings.get(d.GROUP_REMOTE_ASSIGNOR)
    if protocol.value != "classic" or assignor is None or not assignor.explicit:
        return
    if assignor.value is None or not str(assignor.value).strip():
        return  # the client trims the value, and accepts a blank one
    if s.java_version < d.JAVA_REFUSES_REMOTE_ASSIGNOR_UNDER_CLASSIC_FROM:
        return
    yield Finding(
        assignor,
        f"unset with {protocol.describe()}",
        f"{REFUSES_TO_START}: {assignor.name} cannot be set with {protocol.describe()} (it names the broker's "
        "assignor under group.protocol=consumer; the Java consumer refuses it from 3.9.0, 3.7 and 3.8 ignore it)",
    )


@startup_rules.rule(
    "C104",
    "Spring's listener container with auto-commit and a manual ack mode",
    ALL,
    "error",
    why="the listener container never starts (KafkaMessageListenerContainer asserts "
    f'"{SPRING_REFUSAL} MANUAL"), so nothing is consumed',
    fix="remove spring.kafka.consumer.enable-auto-commit (the container then turns auto-commit off) or set it "
    "to false; or choose an ack mode other than MANUAL and MANUAL_IMMEDIATE",
    clients=JAVA,
)
def check_startup_spring_auto_commit_with_manual_ack(s: Subject) -> Iterator[Finding]:
    refused = spring_container_refuses_auto_commit(s)
    if refused is None:
        return
    auto_commit, ack_mode = refused
    yield Finding(
        auto_commit,
        f"false or unset with {ack_mode.describe()}",
        f"Spring's listener container refuses to start: {auto_commit.describe()} with {ack_mode.describe()} "
        f'("{SPRING_REFUSAL} {ack_mode.value}"): the listener acknowledges, so the container must commit',
    )


@startup_rules.rule(
    "C105",
    "a value the consumer does not accept",
    ALL,
    "error",
    why="the consumer is never created, so nothing is consumed",
    fix="write the value as the client spells it: enable.auto.commit=false, isolation.level=read_committed, "
    "auto.offset.reset=earliest (Java: lower case, true or false only; librdkafka: error, not none)",
)
def check_startup_refused_consumer_value(s: Subject) -> Iterator[Finding]:
    yield from refused_values(s)


RULES: tuple[Rule, ...] = startup_rules.rules
