"""Kafka Streams rules: the processing guarantee and its internal topics."""

from __future__ import annotations

from collections.abc import Iterator

from auditor.lint.engine import defaults as d
from auditor.lint.engine.terms import REFUSES_TO_START, Check, Finding, Rule, Severity, Subject
from auditor.vocabulary import GUARANTEES

ALL = frozenset(GUARANTEES)
NOT_LOST = frozenset({d.AT_LEAST_ONCE, d.EXACTLY_ONCE})
EOS = frozenset({d.EXACTLY_ONCE})
REMOVED_GUARANTEES = ("exactly_once", "exactly_once_beta")


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


def check_internal_replication(s: Subject) -> Iterator[Finding]:
    rf = s["replication.factor"]
    effective = rf.value
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


def _rule(
    id: str, title: str, guarantees: frozenset[str], severity: Severity, why: str, fix: str, check: Check
) -> Rule:
    return Rule(id, title, guarantees, "streams", severity, why, fix, check, frozenset({"java"}))


RULES: tuple[Rule, ...] = (
    _rule(
        "S001",
        "Streams app declared exactly-once runs at_least_once",
        EOS,
        "error",
        "a crash between output and commit re-processes input: duplicated output and state updates",
        "set processing.guarantee=exactly_once_v2",
        check_guarantee_weaker,
    ),
    _rule(
        "S002",
        "processing.guarantee exactly_once / exactly_once_beta",
        ALL,
        "error",
        "removed in Kafka Streams 4.0 (the app refuses to start); deprecated in 3.x",
        "set processing.guarantee=exactly_once_v2 (brokers 2.5+)",
        check_guarantee_removed,
    ),
    _rule(
        "S003",
        "Streams internal topics replicated fewer than 3 times",
        NOT_LOST,
        "warning",
        "a broker failure loses changelog or repartition records",
        "set replication.factor=3 (or -1 with the brokers' default.replication.factor=3)",
        check_internal_replication,
    ),
)
