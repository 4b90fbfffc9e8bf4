"""Kafka Streams rules: the processing guarantee and its internal topics."""

from __future__ import annotations

from collections.abc import Iterator

from auditor.lint.engine import defaults as d
from auditor.lint.engine.terms import REFUSES_TO_START, Finding, Rule, RuleBook, Subject
from auditor.vocabulary import GUARANTEES

ALL = frozenset(GUARANTEES)
NOT_LOST = frozenset({d.AT_LEAST_ONCE, d.EXACTLY_ONCE})
EOS = frozenset({d.EXACTLY_ONCE})
REMOVED_GUARANTEES = ("exactly_once", "exactly_once_beta")

# Kafka Streams is a Java library: its rules apply to the Java client only.
streams_rules = RuleBook("streams", clients=frozenset({"java"}))


@streams_rules.rule(
    "S001",
    "Streams app declared exactly-once runs at_least_once",
    EOS,
    "error",
    why="a crash between output and commit re-processes input: duplicated output and state updates",
    fix="set processing.guarantee=exactly_once_v2",
)
def check_guarantee_weaker(s: Subject) -> Iterator[Finding]:
    guarantee = s["processing.guarantee"]
    if guarantee.value == "at_least_once":
        yield Finding(
            guarantee,
            "exactly_once_v2",
            f"with {guarantee.describe()} a task that crashes after writing its output and before "
            "committing its input offsets re-processes that input: output records and state-store "
            "updates are applied twice",
        )


@streams_rules.rule(
    "S002",
    "processing.guarantee exactly_once / exactly_once_beta",
    ALL,
    "error",
    why="removed in Kafka Streams 4.0 (the app refuses to start); deprecated in 3.x",
    fix="set processing.guarantee=exactly_once_v2 (brokers 2.5+)",
)
def check_guarantee_removed(s: Subject) -> Iterator[Finding]:
    guarantee = s["processing.guarantee"]
    if guarantee.value not in REMOVED_GUARANTEES:
        return
    if s.java_version >= (4, 0, 0):
        yield Finding(
            guarantee,
            "exactly_once_v2",
            f"{REFUSES_TO_START}: Kafka Streams 4.0 removed {guarantee.describe()}; it accepts only "
            "at_least_once and exactly_once_v2",
            "error",
        )
    else:
        yield Finding(
            guarantee,
            "exactly_once_v2",
            f"{guarantee.describe()} is deprecated since 3.0 and removed in 4.0 "
            "(exactly_once runs one producer per task): upgrading Streams will refuse to start",
            "warning",
        )


@streams_rules.rule(
    "S003",
    "Streams internal topics replicated fewer than 3 times",
    NOT_LOST,
    "warning",
    why="a broker failure loses changelog or repartition records",
    fix="set replication.factor=3 (or -1 with the brokers' default.replication.factor=3)",
)
def check_internal_replication(s: Subject) -> Iterator[Finding]:
    rf = s["replication.factor"]
    effective = rf.value
    broker_key = s.unknown_broker_default("replication.factor")
    if broker_key:
        yield Finding(
            rf,
            ">= 3",
            f"with {rf.describe()} the changelog and repartition topics get the brokers' {broker_key}, not "
            "given here: whether a broker failure loses state-store history is not known",
            "info",
        )
        return
    if effective == -1:
        effective = s.broker["default.replication.factor"].value
    if effective < 3:
        yield Finding(
            rf,
            ">= 3",
            f"with {rf.describe()} the changelog and repartition topics get {effective} "
            "replica(s): a broker failure loses state-store history and records in flight between "
            "sub-topologies",
        )


RULES: tuple[Rule, ...] = streams_rules.rules
