"""Topic and broker rules: how many copies of a write exist, and for how long."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace

from auditor.lint.engine import defaults as d
from auditor.lint.engine.terms import Finding, Rule, RuleBook, Setting, Severity, Subject

NOT_LOST = frozenset({d.AT_LEAST_ONCE, d.EXACTLY_ONCE})
EOS = frozenset({d.EXACTLY_ONCE})
SAFE_REPLICATION = 3
LAG_WARNING_SHARE = 0.5

topic_rules = RuleBook("topic")
broker_rules = RuleBook("broker")


def _duration(ms: float) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms >= size:
            return f"{ms / size:.3g} {unit}"
    return f"{ms:g} ms"


# --- topic ------------------------------------------------------------------------------


def _not_given(s: Subject, key: str, broker_key: str) -> Setting:
    """``key`` as a value the engine does not know: the brokers' ``broker_key``, not given."""
    return replace(s[key], shown="unknown", note=f"the brokers' {broker_key}, not given")


@topic_rules.rule(
    "T001",
    "replication factor below 3",
    NOT_LOST,
    "error",
    why="acked records live on too few brokers: a failure loses them",
    fix="recreate or reassign the topic with replication.factor=3",
)
def check_replication_factor(s: Subject) -> Iterator[Finding]:
    rf = s["replication.factor"]
    broker_key = s.unknown_broker_default("replication.factor")
    if broker_key:
        yield Finding(
            _not_given(s, "replication.factor", broker_key),
            f">= {SAFE_REPLICATION}",
            "replication.factor is not a topic config: a topic gets its replication factor when it is created, "
            f"else from the brokers' {broker_key}, not given here: whether a broker failure loses acked records "
            "is not known (lint the live cluster to judge it)",
            "info",
        )
        return
    if rf.value < SAFE_REPLICATION:
        loss = "a single disk or broker failure" if rf.value <= 1 else "two broker failures"
        yield Finding(
            rf,
            f">= {SAFE_REPLICATION}",
            f"with {rf.describe()} {loss} loses acked records for good",
            "error" if rf.value <= 1 else "warning",
        )


@topic_rules.rule(
    "T002",
    "min.insync.replicas is 1",
    NOT_LOST,
    "error",
    why="an acked write is lost when the leader fails over",
    fix="set min.insync.replicas=2 (with RF 3)",
)
def check_min_insync_one(s: Subject) -> Iterator[Finding]:
    min_isr = s["min.insync.replicas"]
    broker_key = s.unknown_broker_default("min.insync.replicas")
    if broker_key:
        yield Finding(
            _not_given(s, "min.insync.replicas", broker_key),
            "2 (with replication.factor 3)",
            f"min.insync.replicas is not set: the topic takes the brokers' {broker_key}, not given here: whether "
            "an acks=all write is acked by the leader alone (and lost when it fails over) is not known",
            "info",
        )
        return
    if min_isr.value <= 1:
        yield Finding(
            min_isr,
            "2 (with replication.factor 3)",
            f"with {min_isr.describe()} an acks=all write is acked by the leader alone once the "
            "followers drop out of the ISR: when that leader fails, the acked write is lost",
        )


@topic_rules.rule(
    "T003",
    "min.insync.replicas not below the replication factor",
    NOT_LOST,
    "warning",
    why="writes with acks=all fail while a replica is down",
    fix="set min.insync.replicas = replication.factor - 1",
)
def check_min_insync_vs_replication(s: Subject) -> Iterator[Finding]:
    min_isr, rf = s["min.insync.replicas"], s["replication.factor"]
    if s.unknown_broker_default("min.insync.replicas"):
        return  # T002 says it is not known
    rf_from = s.unknown_broker_default("replication.factor")
    if rf_from:
        if min_isr.value > 1:
            yield Finding(
                min_isr,
                "< replication.factor",
                f"whether {min_isr.describe()} is below the topic's replication factor is not known: that is set "
                f"when the topic is created, else the brokers' {rf_from}, not given here",
                "info",
            )
        return
    if min_isr.value < rf.value:
        return
    # Current brokers cap it (Partition.scala: effectiveMinIsr = min(min.insync.replicas, replica
    # count); KIP-966, not feature-flagged): above the replication factor it acts as equal to it.
    # Older brokers refuse every acks=all write instead; the broker's version is not known here.
    above = min_isr.value > rf.value
    capped = (
        f"{min_isr.describe()} is above {rf.describe()}: current brokers cap it at the replica count "
        f"({rf.value}); older brokers refuse every acks=all write with NOT_ENOUGH_REPLICAS"
    )
    if rf.value <= 1:
        if above:  # one replica: while it is down nothing is written anyway (T001 reports RF 1)
            yield Finding(min_isr, f"<= replication.factor ({rf.value})", capped, "info")
        return
    equal = (
        f"{min_isr.describe()} equals {rf.describe()}"
        if not above
        else f"{capped}. Capped, it equals the replication factor"
    )
    message = (
        f"{equal}: while any one replica is down every acks=all write fails with NOT_ENOUGH_REPLICAS, "
        "and records whose retries run out are lost unless the application sends them again"
    )
    yield Finding(min_isr, f"< replication.factor ({rf.value}), e.g. {rf.value - 1}", message, "warning")


@topic_rules.rule(
    "T004",
    "unclean leader election enabled",
    NOT_LOST,
    "error",
    why="an out-of-sync replica becomes leader and committed records are truncated",
    fix="set unclean.leader.election.enable=false",
)
def check_unclean_election(s: Subject) -> Iterator[Finding]:
    unclean = s["unclean.leader.election.enable"]
    if unclean.value:
        yield Finding(
            unclean,
            "false",
            f"with {unclean.describe()} a replica that fell out of sync can become leader: the acked "
            "writes it lacks are truncated from every replica",
        )


def _lag_seconds(s: Subject) -> float | None:
    lag = s.context.consumer_lag_seconds
    if isinstance(lag, Mapping):
        value = lag.get(s.name or "")
        return None if value is None else float(value)
    return None if lag is None else float(lag)


@topic_rules.rule(
    "T005",
    "retention shorter than the consumers' lag",
    NOT_LOST,
    "error",
    why="records are deleted before the consumers reach them",
    fix="raise retention.ms or fix the lag",
)
def check_retention_vs_lag(s: Subject) -> Iterator[Finding]:
    lag = _lag_seconds(s)
    overtaken = sorted(s.context.overtaken.get(s.name or "", ()), key=lambda o: (-o.records, o.group, o.partition))
    retention = s["retention.ms"]
    policy = str(s.value("cleanup.policy") or "delete")
    if retention.value is None or retention.value < 0 or "delete" not in policy:
        return
    lag_ms = None if lag is None else lag * 1000
    expected = "> 2 x the consumers' lag" + ("" if not lag_ms else f" ({_duration(2 * lag_ms)})")
    if overtaken:
        # seen, not inferred: the log start has passed offsets the group never committed
        worst = overtaken[0]
        more = f" ({len(overtaken) - 1} more group partitions likewise)" if len(overtaken) > 1 else ""
        message = (
            f"group {worst.group} committed offset {worst.committed} on partition {worst.partition} but the log "
            f"now starts at {worst.log_start}: {worst.records} records were deleted before the group committed them{more}; "
            f"{retention.describe()} keeps records {_duration(retention.value)}"
        )
        yield Finding(retention, expected, message, "error")
        return
    if lag_ms is None:
        return
    if lag_ms >= retention.value:
        severity: Severity = "error"
        message = (
            f"the consumers are {_duration(lag_ms)} behind but {retention.describe()} keeps records "
            f"{_duration(retention.value)}: records are deleted before they are consumed"
        )
    elif lag_ms >= LAG_WARNING_SHARE * retention.value:
        severity = "warning"
        message = (
            f"the consumers are {_duration(lag_ms)} behind, more than half of {retention.describe()} "
            f"({_duration(retention.value)}): a little more delay and records expire unconsumed"
        )
    else:
        return
    yield Finding(retention, expected, message, severity)


def _compacted(s: Subject) -> bool:
    """The topic's cleanup.policy includes compact ("compact" or "compact,delete")."""
    return "compact" in {p.strip() for p in str(s.value("cleanup.policy") or "").split(",")}


@topic_rules.rule(
    "T006",
    "compaction removes items that share a record key",
    NOT_LOST,
    "error",
    why="the log cleaner keeps one record per record key: items keyed otherwise replace each other",
    fix="key each record by its item (or bind by the record key), or use cleanup.policy=delete",
)
def check_compaction_vs_item_key(s: Subject) -> Iterator[Finding]:
    policy = s["cleanup.policy"]
    if not _compacted(s):
        return
    item_key = s.context.item_keys.get(s.name or "")
    if not item_key or item_key == "key":
        return
    lag = s["min.compaction.lag.ms"]
    removed = (
        f"{policy.describe()} removes a record once a later record has the same record key, but the items of "
        f"this topic are told apart by {item_key}, not by the record key: items that share a record key replace "
        "each other"
    )
    if not lag.value or lag.value <= 0:
        yield Finding(
            policy,
            "delete, or records keyed by their item",
            f"{removed}, and a consumer that falls behind the cleaner ({lag.describe()}) never receives the "
            "earlier ones: they are delivered, then gone",
            "error",
        )
        return
    yield Finding(
        policy,
        "delete, or records keyed by their item",
        f"{removed}; {lag.describe()} keeps them {_duration(lag.value)}: a consumer further behind never "
        "receives the earlier ones",
        "warning",
    )


@topic_rules.rule(
    "T007",
    "tombstones removed before the consumers reach them",
    NOT_LOST,
    "error",
    why="the log cleaner removes a delete tombstone after delete.retention.ms: a consumer further behind "
    "(or reading from offset 0) never sees the delete and keeps the key's earlier value",
    fix="raise delete.retention.ms above the consumers' lag (and the time a full read from offset 0 takes), "
    "or fix the lag",
)
def check_tombstone_retention_vs_lag(s: Subject) -> Iterator[Finding]:
    if not _compacted(s):
        return
    lag = _lag_seconds(s)
    if lag is None or lag <= 0:
        return
    lag_ms, kept = lag * 1000, s["delete.retention.ms"]
    # the cleaner leaves a record alone until it is min.compaction.lag.ms old, then keeps a
    # tombstone delete.retention.ms more: the least time a tombstone lives
    held_back = max(int(s["min.compaction.lag.ms"].value or 0), 0)
    expected = f"> 2 x the consumers' lag ({_duration(2 * lag_ms)})"
    if held_back:
        expected += f", less min.compaction.lag.ms ({_duration(held_back)})"
    first = f" (after min.compaction.lag.ms, {_duration(held_back)}, kept it from the cleaner)" if held_back else ""
    if lag_ms >= kept.value + held_back:
        severity: Severity = "error"
        message = (
            f"the consumers are {_duration(lag_ms)} behind but {kept.describe()} keeps a tombstone "
            f"{_duration(kept.value)} after compaction reaches it{first}: the cleaner removes deletes before they "
            "are consumed, and the consumers keep the deleted keys' earlier values"
        )
    elif lag_ms >= LAG_WARNING_SHARE * (kept.value + held_back):
        severity = "warning"
        message = (
            f"the consumers are {_duration(lag_ms)} behind, more than half of the "
            f"{_duration(kept.value + held_back)} a tombstone is sure to be kept ({kept.describe()}{first}): a "
            "little more delay and tombstones are removed before they are consumed, so deletes are missed"
        )
    else:
        return
    yield Finding(kept, expected, message, severity)


# --- broker -----------------------------------------------------------------------------


@broker_rules.rule(
    "B001",
    "committed offsets expire too early",
    NOT_LOST,
    "warning",
    why="an idle group loses its offsets and restarts at auto.offset.reset: skips or re-processes",
    fix="set offsets.retention.minutes >= 10080 and >= the longest topic retention",
)
def check_offsets_retention(s: Subject) -> Iterator[Finding]:
    minutes = s["offsets.retention.minutes"]
    offsets_ms = minutes.value * 60_000
    longest = 0
    for config in s.context.topic_configs.values():
        try:
            longest = max(longest, int(config.get("retention.ms", 0) or 0))
        except (TypeError, ValueError):
            continue
    if offsets_ms < longest:
        yield Finding(
            minutes,
            f">= the longest topic retention ({longest // 60_000} minutes)",
            f"{minutes.describe()} is shorter than a topic's retention ({_duration(longest)}): a "
            "group idle that long loses its committed offsets while its records still exist, and "
            "restarts from auto.offset.reset (latest skips them, earliest re-processes them)",
        )
    elif minutes.value < d.BROKER["offsets.retention.minutes"]:
        yield Finding(
            minutes,
            f">= {d.BROKER['offsets.retention.minutes']} (7 days)",
            f"with {minutes.describe()} a consumer group that is empty for {_duration(offsets_ms)} "
            "(a long outage, a paused job) loses its committed offsets and restarts from "
            "auto.offset.reset: latest skips records, earliest re-processes them",
        )


def _low_replication(s: Subject, key: str, what: str) -> Iterator[Finding]:
    rf = s[key]
    if rf.value < SAFE_REPLICATION:
        yield Finding(rf, f">= {SAFE_REPLICATION}", f"with {rf.describe()} {what}")


@broker_rules.rule(
    "B002",
    "__consumer_offsets replication below 3",
    NOT_LOST,
    "error",
    why="a broker failure loses committed offsets and groups restart at auto.offset.reset",
    fix="set offsets.topic.replication.factor=3 (before __consumer_offsets is created)",
)
def check_offsets_topic_replication(s: Subject) -> Iterator[Finding]:
    yield from _low_replication(
        s,
        "offsets.topic.replication.factor",
        "a broker failure can lose committed offsets: groups restart at auto.offset.reset, "
        "skipping or re-processing records",
    )


@broker_rules.rule(
    "B003",
    "__transaction_state replication below 3",
    EOS,
    "error",
    why="a broker failure loses transaction state: open transactions can neither commit nor abort",
    fix="set transaction.state.log.replication.factor=3 (before __transaction_state is created)",
)
def check_transaction_state_replication(s: Subject) -> Iterator[Finding]:
    yield from _low_replication(
        s,
        "transaction.state.log.replication.factor",
        "a broker failure can lose __transaction_state: open transactions can neither commit "
        "nor abort, and read_committed consumers stall",
    )


@broker_rules.rule(
    "B004",
    "__transaction_state min ISR unsafe",
    EOS,
    "error",
    why="a transaction's outcome is acked by one replica only, or transactions stop with one broker down",
    fix="set transaction.state.log.min.isr=2 with replication factor 3",
)
def check_transaction_log_min_isr(s: Subject) -> Iterator[Finding]:
    min_isr, rf = s["transaction.state.log.min.isr"], s["transaction.state.log.replication.factor"]
    if min_isr.value < 2:
        yield Finding(
            min_isr,
            "2",
            f"with {min_isr.describe()} a transaction's state is acked by one replica of "
            "__transaction_state: losing that broker loses the commit/abort decision",
            "error",
        )
    elif rf.value > 1 and min_isr.value >= rf.value:
        yield Finding(
            min_isr,
            f"< transaction.state.log.replication.factor ({rf.value})",
            f"{min_isr.describe()} is not below {rf.describe()}: while one replica is down no "
            "transaction can begin or commit",
            "warning",
        )


@broker_rules.rule(
    "B005",
    "transaction partition verification disabled",
    EOS,
    "warning",
    why="a hanging transaction stalls read_committed consumers (KIP-890)",
    fix="set transaction.partition.verification.enable=true (the default since 3.6)",
)
def check_partition_verification(s: Subject) -> Iterator[Finding]:
    verification = s["transaction.partition.verification.enable"]
    if not verification.value:
        yield Finding(
            verification,
            "true",
            f"with {verification.describe()} a late write of an aborted transaction can open a "
            "hanging transaction (KIP-890): the last stable offset stops, and read_committed "
            "consumers stall on that partition",
        )


@broker_rules.rule(
    "B006",
    "unclean leader election enabled by default",
    NOT_LOST,
    "error",
    why="topics without their own setting truncate acked records when an out-of-sync replica leads",
    fix="set unclean.leader.election.enable=false",
)
def check_broker_unclean_election(s: Subject) -> Iterator[Finding]:
    yield from check_unclean_election(s)


@broker_rules.rule(
    "B007",
    "default replication factor below 3",
    NOT_LOST,
    "warning",
    why="topics created without an explicit replication factor can lose acked records",
    fix="set default.replication.factor=3",
)
def check_default_replication(s: Subject) -> Iterator[Finding]:
    rf = s["default.replication.factor"]
    if rf.value < SAFE_REPLICATION:
        yield Finding(
            rf,
            f">= {SAFE_REPLICATION}",
            f"with {rf.describe()} topics created without a replication factor (auto-created, or by "
            f"tools) get replication factor {rf.value}: a broker failure can lose their acked records",
        )


@broker_rules.rule(
    "B008",
    "default min.insync.replicas is 1",
    NOT_LOST,
    "warning",
    why="topics without their own setting lose acked writes on failover",
    fix="set min.insync.replicas=2",
)
def check_default_min_insync(s: Subject) -> Iterator[Finding]:
    min_isr = s["min.insync.replicas"]
    if min_isr.value <= 1:
        yield Finding(
            min_isr,
            "2",
            f"with {min_isr.describe()} every topic without its own min.insync.replicas acks "
            "acks=all writes with the leader alone once followers lag: a failover then loses them",
        )


RULES: tuple[Rule, ...] = topic_rules.rules + broker_rules.rules
