"""Consumer rules: when offsets are committed relative to processing, and what is read."""

from __future__ import annotations

from collections.abc import Iterator

from auditor.lint.engine import defaults as d
from auditor.lint.engine.rules import ignored_keys
from auditor.lint.engine.rules.consumer_startup import spring_container_refuses_auto_commit
from auditor.lint.engine.terms import Finding, Rule, RuleBook, Subject
from auditor.vocabulary import GUARANTEES

ALL = frozenset(GUARANTEES)
NOT_LOST = frozenset({d.AT_LEAST_ONCE, d.EXACTLY_ONCE})
ALO = frozenset({d.AT_LEAST_ONCE})
EOS = frozenset({d.EXACTLY_ONCE})
RK = frozenset({"librdkafka"})
JAVA = frozenset({"java"})
MIN_MAX_POLL_INTERVAL_MS = 60_000
LONG_AUTO_COMMIT_INTERVAL_MS = 60_000

consumer_rules = RuleBook("consumer")


def _commits_automatically(s: Subject) -> bool:
    """Auto-commit is on, and the consumer starts with it: Spring's listener container refuses
    auto-commit under a manual ack mode (C104), and its auto-commit findings would mislead."""
    return bool(s.value("enable.auto.commit")) and spring_container_refuses_auto_commit(s) is None


@consumer_rules.rule(
    "C001",
    "offsets committed before the message is processed",
    ALO,
    "error",
    why="a crash between the commit and the end of processing skips the message: it is never processed",
    fix="librdkafka: enable.auto.offset.store=false and store_offsets(msg) after processing; "
    "Java: enable.auto.commit=false and commitSync() after processing",
)
def check_commit_before_processing(s: Subject) -> Iterator[Finding]:
    auto_commit = s["enable.auto.commit"]
    if not _commits_automatically(s):
        return
    if s.client == "librdkafka":
        store = s["enable.auto.offset.store"]
        if store.value:
            yield Finding(
                store,
                "false, and consumer.store_offsets(msg) after processing each message",
                f"with {auto_commit.describe()} and {store.describe()} the offset is stored when poll() "
                "hands the message over and committed in the background within "
                f"auto.commit.interval.ms: a crash before processing finishes skips the message",
                "error",
            )
        return
    yield Finding(
        auto_commit,
        "false with commitSync() after processing, or process every record before the next poll()",
        f"with {auto_commit.describe()} the next poll() commits everything the previous poll() "
        "returned: records handed to another thread or still being processed are committed before "
        "they are processed, and a crash skips them",
        "warning",
    )


@consumer_rules.rule(
    "C002",
    "exactly-once consumer reads uncommitted records",
    EOS,
    "error",
    why="records of aborted transactions are processed (Java's default is read_uncommitted)",
    fix="set isolation.level=read_committed",
)
def check_isolation_level(s: Subject) -> Iterator[Finding]:
    isolation = s["isolation.level"]
    if isolation.value != "read_committed":
        yield Finding(
            isolation,
            "read_committed",
            f"with {isolation.describe()} the consumer reads records of open and aborted transactions: "
            "aborted output is processed as if it had been committed",
        )


@consumer_rules.rule(
    "C003",
    "auto.offset.reset skips to the end",
    NOT_LOST,
    "warning",
    why="a group without a committed offset skips everything written before it started",
    fix="set auto.offset.reset=earliest",
)
def check_auto_offset_reset(s: Subject) -> Iterator[Finding]:
    reset = s["auto.offset.reset"]
    if reset.value in ("latest", "by_duration"):
        yield Finding(
            reset,
            "earliest (or none/error, to decide by hand)",
            f"with {reset.describe()} a group without a committed offset (new, or whose offsets expired "
            "after offsets.retention.minutes, or was reset) starts at the end of the partition: every "
            "record written before it started is skipped",
        )


@consumer_rules.rule(
    "C004",
    "auto-commit re-delivers processed records",
    frozenset({d.AT_MOST_ONCE, d.AT_LEAST_ONCE}),
    "error",
    why="after a crash the records processed since the last auto-commit are processed again",
    fix="at-most-once: enable.auto.commit=false and commit before processing; "
    "at-least-once: keep auto.commit.interval.ms short",
)
def check_auto_commit_redelivers(s: Subject) -> Iterator[Finding]:
    auto_commit, interval = s["enable.auto.commit"], s["auto.commit.interval.ms"]
    if not _commits_automatically(s):
        return
    if s.guarantee == d.AT_MOST_ONCE:
        yield Finding(
            auto_commit,
            "false, and a synchronous commit before processing each batch",
            f"with {auto_commit.describe()} offsets are committed every {interval.value} ms "
            f"({interval.describe()}): after a crash the records processed since the last commit are "
            "delivered and processed again",
            "error",
        )
    elif interval.value > LONG_AUTO_COMMIT_INTERVAL_MS:
        yield Finding(
            interval,
            f"<= {LONG_AUTO_COMMIT_INTERVAL_MS}",
            f"with {interval.describe()} a crash re-delivers up to {interval.value / 1000:g} s of "
            "already processed records",
            "info",
        )


@consumer_rules.rule(
    "C005",
    "max.poll.interval.ms too short for the processing",
    ALL,
    "warning",
    why="the consumer is removed from the group mid-batch, its commit fails, the batch is processed again",
    fix="raise max.poll.interval.ms above the longest batch processing time, or poll smaller batches",
)
def check_max_poll_interval(s: Subject) -> Iterator[Finding]:
    interval = s["max.poll.interval.ms"]
    processing = s.context.max_processing_ms
    if processing is not None and processing >= interval.value:
        yield Finding(
            interval,
            f"> the observed processing time ({processing} ms)",
            f"processing takes up to {processing} ms but {interval.describe()}: the consumer is "
            "removed from the group mid-batch, its commit fails and the batch is processed again "
            "by another member",
            "error",
        )
    elif interval.value < MIN_MAX_POLL_INTERVAL_MS:
        yield Finding(
            interval,
            f">= {MIN_MAX_POLL_INTERVAL_MS}",
            f"with {interval.describe()} a slow batch (a GC pause, a slow downstream call) removes the "
            "consumer from the group: its commit fails and the batch is processed again",
            "warning",
        )


@consumer_rules.rule(
    "C006",
    "offsets not committed in the transaction",
    EOS,
    "error",
    why="input offsets and output are not atomic: a crash between them loses or duplicates records",
    fix="enable.auto.commit=false and send the offsets with send_offsets_to_transaction()",
)
def check_offsets_in_transaction(s: Subject) -> Iterator[Finding]:
    auto_commit = s["enable.auto.commit"]
    step = "the consume-transform-produce step" if s.context.consume_transform_produce else "the consumer"
    if spring_container_refuses_auto_commit(s) is not None:
        return  # it never starts (C104)
    if auto_commit.value:
        yield Finding(
            auto_commit,
            "false, with the offsets sent through the producer's transaction (send_offsets_to_transaction)",
            f"with {auto_commit.describe()} {step} commits offsets on its own schedule, outside the "
            "transaction: a crash after the commit and before the transaction loses input, a crash "
            "after the transaction and before the commit processes it twice",
        )
    elif s.context.offsets_in_transaction is False:
        yield Finding(
            auto_commit,
            "offsets committed with send_offsets_to_transaction / sendOffsetsToTransaction",
            f"{step} commits its offsets with commit()/commitSync() instead of inside the producer's "
            "transaction: output and input progress are not atomic, so a crash between them "
            "duplicates or loses records",
        )


@consumer_rules.rule(
    "C007",
    "auto.commit.enable is ignored by the KafkaConsumer",
    ALL,
    "info",
    why="auto.commit.enable is a legacy topic-level property of the simple legacy consumer: "
    "the high-level consumer keeps committing as enable.auto.commit says",
    fix="set enable.auto.commit instead (and remove auto.commit.enable)",
    clients=RK,
)
def check_legacy_auto_commit_property(s: Subject) -> Iterator[Finding]:
    legacy, auto_commit = s.settings.get(d.LIBRDKAFKA_LEGACY_AUTO_COMMIT), s["enable.auto.commit"]
    if legacy is None or auto_commit.explicit:
        return
    yield Finding(
        legacy,
        "enable.auto.commit instead",
        f"{legacy.describe()} only configures librdkafka's simple legacy consumer: this consumer "
        f"ignores it and runs with {auto_commit.describe()}",
    )


# When Spring's listener container commits, per AckMode (defaults.py cites the reference)
_CONTAINER_COMMITS = {
    "RECORD": "as the listener returns from each record",
    "BATCH": "once the listener has processed every record of a poll",
    "TIME": "once the listener has processed every record of a poll and ack-time has passed",
    "COUNT": "once the listener has processed every record of a poll and ack-count records came in",
    "COUNT_TIME": "once the listener has processed every record of a poll and ack-time has passed "
    "or ack-count records came in",
    "MANUAL": "once the listener has processed every record of a poll (acknowledge() only queues the offset)",
}


@consumer_rules.rule(
    "C008",
    "Spring's listener container commits after processing",
    frozenset({d.AT_MOST_ONCE, d.AT_LEAST_ONCE}),
    "error",
    why="after a crash the records the listener processed since the container's last commit are processed again",
    fix="at-most-once: spring.kafka.listener.ack-mode=MANUAL_IMMEDIATE, with acknowledge() on the listener "
    "thread before processing each record; at-least-once with MANUAL_IMMEDIATE: acknowledge() after processing",
    clients=JAVA,
)
def check_spring_container_commits(s: Subject) -> Iterator[Finding]:
    ack_mode, auto_commit = s.settings.get(d.SPRING_ACK_MODE), s["enable.auto.commit"]
    if ack_mode is None or auto_commit.value:
        return  # no Spring listener container, or it leaves the commits to auto-commit (C004)
    if ack_mode.value == d.SPRING_ACKNOWLEDGED_AT_ONCE:
        # the listener decides when its records are committed: the config cannot tell
        if s.guarantee == d.AT_MOST_ONCE:
            yield Finding(
                ack_mode,
                "acknowledge() on the listener thread before processing each record",
                f"with {ack_mode.describe()} the container commits when the listener calls acknowledge() on "
                "its own thread: at-most-once holds only if the listener acknowledges each record before "
                "processing it, and does not throw once it has begun (the default error handler delivers the "
                "record again, up to ten times in all)",
                "info",
            )
        else:
            yield Finding(
                ack_mode,
                "acknowledge() after processing each record",
                f"with {ack_mode.describe()} the container commits when the listener calls acknowledge() on "
                "its own thread: at-least-once holds only if the listener acknowledges each record after "
                "processing it (an acknowledge() before processing commits the record, and a crash then "
                "skips it)",
                "info",
            )
        return
    if s.guarantee != d.AT_MOST_ONCE:
        return  # committing after processing is what at-least-once needs
    redelivered = (
        "a crash while the listener processes a record delivers that record again"
        if ack_mode.value == "RECORD"
        else "after a crash the records processed since its last commit are delivered and processed again"
    )
    yield Finding(
        ack_mode,
        "MANUAL_IMMEDIATE, with acknowledge() on the listener thread before processing each record",
        f"with {ack_mode.describe()} the listener container commits the offsets itself, "
        f"{_CONTAINER_COMMITS[ack_mode.value]}: {redelivered}",
        "error",
    )


@consumer_rules.rule(
    "C009",
    "a key the consumer does not know",
    ALL,
    "warning",
    why="the Java consumer ignores a key it does not know: the setting meant has no effect",
    fix="write the key without blanks around it",
    clients=JAVA,
)
def check_ignored_consumer_key(s: Subject) -> Iterator[Finding]:
    yield from ignored_keys(s)


RULES: tuple[Rule, ...] = consumer_rules.rules
