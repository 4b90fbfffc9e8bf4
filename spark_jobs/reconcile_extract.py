"""Extract phase of the reconciliation: driver-side offset plans and checks, the topic through
Spark's Kafka source, the source table over JDBC."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka.admin import AdminClient
from pyspark.sql import DataFrame, DataFrameReader, SparkSession
from pyspark.sql import functions as F

from spark_jobs.binding import (
    ZONE_SHIFT,
    Binding,
    BindingError,
    is_naive_timestamp,
    jdbc_url_and_properties,
    redact_url,
)
from spark_jobs.commit_history import (
    PassedSpan,
    names_sessions,
    offsets_history,
    plain_passed_spans,
    probed_passed_spans,
)
from spark_jobs.common import read_kafka_ranges
from spark_jobs.group_offsets import committed_offsets
from spark_jobs.kafka_cleanup import TopicCleanup, absent_keys_explained, read_topic_cleanup
from spark_jobs.kafka_offsets import (
    KafkaReadError,
    PartitionOffsets,
    deleted_while_read,
    first_committed_records,
    partition_offsets,
    record_prints,
    rewritten_partitions,
    topic_id,
    topic_partitions,
)
from spark_jobs.kafka_security import admin_config
from spark_jobs.mark_rules import mark_settle_seconds
from spark_jobs.reconcile_state import StateMeta
from spark_jobs.reconcile_transform import (
    HEADERS_MISSING,
    RECORD_COUNTS,
    UNVERIFIABLE,
    header_problem_counts,
)
from spark_jobs.record_times import iso_ms

ROWS_PER_JDBC_PARTITION = 250_000

NUMERIC_TYPES = {"smallint", "integer", "bigint", "int", "int2", "int4", "int8", "serial", "bigserial"}


class ReconcileError(RuntimeError):
    """The run cannot go on (offsets moved backwards, state unusable, …)."""


@dataclass
class OffsetRange:
    """A topic's offsets to read this run, per partition [start, end)."""

    topic: str
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)
    # [wanted start, log start) per partition: records deleted (retention, delete_records)
    # before this run could read them.
    lost: dict[int, tuple[int, int]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(end - start for start, end in self.ranges.values())

    def to_json(self) -> dict[str, list[int]]:
        return {str(p): [s, e] for p, (s, e) in sorted(self.ranges.items())}


def plan_offsets(
    topic: str,
    offsets: dict[int, PartitionOffsets],
    previous: dict[int, int],
    required: bool = True,
    read_before: dict[int, int] | None = None,
) -> OffsetRange:
    """From where the last run stopped up to the last stable offset.

    A partition the state has not read yet is wanted from offset 0: when its log start is
    past that (or past where the last run stopped), the records in between were deleted
    unread and are recorded in `lost`; reading starts at the log start. read_before: where
    earlier runs stopped when this run reads again from the start (a rebuild): what they
    read was not lost unread.
    """
    plan = OffsetRange(topic)
    for partition, po in sorted(offsets.items()):
        wanted = previous.get(partition, 0)
        if wanted > po.high:
            raise ReconcileError(
                f"topic {topic!r} partition {partition}: the last run read up to offset {wanted} but the "
                f"partition now ends at {po.high}; was the topic re-created? Run with --full"
            )
        unread_from = max(wanted, (read_before or {}).get(partition, 0))
        if unread_from < po.low:
            plan.lost[partition] = (unread_from, po.low)
        start = max(wanted, po.low)
        plan.ranges[partition] = (start, max(start, po.stable))
    missing = set(previous) - set(offsets)
    if missing and required:
        raise ReconcileError(f"topic {topic!r} lost partition(s) {sorted(missing)} since the last run")
    return plan


def extract_topic(
    spark: SparkSession,
    binding: Binding,
    plan: OffsetRange,
    isolation: str = "read_committed",
    admin: AdminClient | None = None,
) -> DataFrame:
    """The records of `plan` through Spark's Kafka source in batch mode, with headers.
    `admin`: the run's admin client (read_kafka_ranges)."""
    return read_kafka_ranges(
        spark, binding.bootstrap_servers, binding.kafka_config, plan.topic, plan.ranges, isolation, admin=admin
    )


# The driver-side reads below take the run's admin client (RunPlan.admin, made once by
# plan_run from the binding's servers and security settings): each new client pays a
# bootstrap and metadata round trip before its first answer.


def extract_topic_cleanup(binding: Binding, admin: AdminClient) -> TopicCleanup:
    """The topic's cleanup.policy and compaction lag (kafka_cleanup), once the topic is known
    to exist (an unreachable cluster or a missing topic fails as every other read does)."""
    topic_partitions(admin, binding.topic)
    return read_topic_cleanup(admin, binding.topic)


def extract_topic_id(binding: Binding, admin: AdminClient) -> str | None:
    """The topic's id now (kafka_offsets.topic_id)."""
    return topic_id(admin, binding.topic)


def find_rewritten_partitions(
    binding: Binding, admin: AdminClient, meta: StateMeta, compacted: bool = False
) -> dict[int, str]:
    """Partitions whose records already read were truncated or replaced since the last run
    (kafka_offsets.rewritten_partitions)."""
    if not meta.topic_offsets:
        return {}
    offsets = partition_offsets(admin, binding.topic, topic_partitions(admin, binding.topic))
    return rewritten_partitions(
        binding.bootstrap_servers,
        binding.kafka_config,
        binding.topic,
        {p: (po.low, po.high) for p, po in offsets.items()},
        meta.topic_offsets,
        meta.checkpoints,
        meta.run_id,
        compacted,
    )


@dataclass
class PartitionSummary:
    """What a run needs to know of the records it read in one partition, from one pass."""

    n: int
    keyed: int
    counts: dict[str, int]  # RECORD_COUNTS
    last: tuple[int, int | None]  # the last record: offset, timestamp ms
    first_ms: int | None  # the timestamp of the first record
    tombstones: int = 0  # records without a value
    # the smallest timestamp ms among the records at or past summarize_partitions' `since`,
    # and its record's offset
    oldest: tuple[int | None, int | None] = (None, None)
    # the latest timestamp ms of a record without any audit header (an unprobed producer's)
    unprobed_ms: int | None = None


def summarize_partitions(records: DataFrame, since: Mapping[int, int] | None = None) -> dict[int, PartitionSummary]:
    """Per partition of transform_records output: counts, its last and first record (one job
    over the cached records for the totals, checkpoint_prints and loss_horizon), and its
    oldest record among those at or past `since` (partition → offset; every record of a
    partition it does not name) for record_times."""
    # The bound per partition, as a literal map: the records are not shuffled for it.
    past = F.unix_millis("timestamp")
    if since:
        bounds = F.create_map(*[F.lit(x) for p, offset in sorted(since.items()) for x in (p, offset)])
        past = F.when(F.col("offset") >= F.coalesce(F.element_at(bounds, F.col("partition")), F.lit(0)), past)
    # Only fixed-width aggregates (no struct): Spark then hashes by partition instead of
    # sorting every record by it (SortAggregate, not code-generated: ~4 s at 10M records).
    rows = (
        records.groupBy("partition")
        .agg(
            F.count("*").alias("n"),
            # a tombstone on a JSON path has no key, and needs none: it is no item's record
            F.count(F.when(F.col("key").isNotNull() | F.col("tombstone"), 1)).alias("keyed"),
            *header_problem_counts(),
            F.max("offset").alias("last_offset"),
            F.max_by(F.unix_millis("timestamp"), "offset").alias("last_ms"),
            F.min_by(F.unix_millis("timestamp"), "offset").alias("first_ms"),
            F.count(F.when(F.col("tombstone"), 1)).alias("tombstones"),
            F.min(past).alias("oldest_ms"),
            F.min_by("offset", past).alias("oldest_offset"),
            F.max(F.when(F.col("header_status") == HEADERS_MISSING, F.unix_millis("timestamp"))).alias("unprobed_ms"),
        )
        .collect()
    )
    return {
        row["partition"]: PartitionSummary(
            row["n"],
            row["keyed"],
            {name: row[name] for name in RECORD_COUNTS},
            (row["last_offset"], row["last_ms"]),
            row["first_ms"],
            row["tombstones"],
            (row["oldest_ms"], row["oldest_offset"]),
            row["unprobed_ms"],
        )
        for row in rows
    }


def checkpoint_prints(
    binding: Binding, summary: dict[int, PartitionSummary], plan: OffsetRange, compacted: bool = False
) -> dict[int, list[int]]:
    """The print of the last record this run read in each partition, read back from Kafka.

    Its timestamp must be the one Spark read: otherwise the partition changed under the run.
    On a compacted topic the cleaner may have removed it since (a later record has its key):
    that partition then keeps no checkpoint.
    """
    read = {p: s.last for p, s in summary.items()}
    prints = record_prints(
        binding.bootstrap_servers, binding.kafka_config, plan.topic, {p: o for p, (o, _) in read.items()}
    )
    changed = [
        p
        for p, (_, ts_ms) in read.items()
        if getattr(prints.get(p), "ts_ms", None) != ts_ms and not (compacted and prints.get(p) is None)
    ]
    if changed:
        raise ReconcileError(
            f"{plan.topic} partition(s) {sorted(changed)} changed while this run read them (the last record read "
            "is no longer at its offset); the run is discarded, run it again"
        )
    return {p: found.to_json() for p, found in prints.items() if found is not None}


# A probed session's consecutive commits merge into one span within this many ms of commit time
# (commit_history._probed_spans): a span waits its session's processing bound from its latest.
SPAN_BUCKET_MS = 10_000


@dataclass
class CommitSpans:
    """What the groups' commit history says of the offsets they passed (plain_commits)."""

    # (group, partition, first, last): a plain instance's commit passed them
    plain: list[tuple[str, int, int, int]] = field(default_factory=list)
    # the last commit of a probed session passed them (commit_history.PassedSpan)
    last: list[PassedSpan] = field(default_factory=list)
    note: str | None = None  # the history could not be read
    named: list[str] = field(default_factory=list)  # StateMeta.sessions_named
    # any commit of a probed session passed them (commit_history.PassedSpan)
    sessions: list[PassedSpan] = field(default_factory=list)
    # when the history was read (epoch ms, taken before): a commit made more than its session's
    # processing bound before it is no longer recent (spark_jobs.processing_bound)
    read_ms: int = 0


def plain_commits(
    binding: Binding, admin: AdminClient, committed: list[tuple[str, int, int]], meta: StateMeta
) -> CommitSpans:
    """(group, partition, first, last offset) a plain instance of a partly probed group committed
    past (commit_history.plain_passed_spans: the commit that took the group past them names no
    probed session, while others of its commits name theirs, now or as an earlier run saw them),
    above what earlier runs judged; read from the groups' partitions of `__consumer_offsets` just
    after their committed offsets. Also a note for the run's warnings where that read failed
    (the marks alone judge the groups then, as before), and the groups known to name sessions
    (StateMeta.sessions_named, kept)."""
    known = sorted(set(meta.sessions_named))
    read_ms = int(time.time() * 1000)
    if not committed:
        return CommitSpans(named=known, read_ms=read_ms)
    groups = sorted({group for group, _, _ in committed})
    try:
        _, history = offsets_history(
            admin,
            binding.bootstrap_servers,
            binding.kafka_config,
            groups,
            binding.topic,
            group_prefix="auditor-reconcile",
        )
    except KafkaReadError as exc:
        return CommitSpans(
            note=(
                f"who committed the offsets of group(s) {', '.join(groups)} could not be read ({exc}): where an instance "
                "of a group runs without the probe, the records it committed past are judged by the group's marks alone"
            ),
            named=known,
            read_ms=read_ms,
        )
    named = set(known) | {group for group, commits in history.items() if names_sessions(commits)}
    judged_below = {
        (group, partition): seen.offset
        for group, parts in meta.group_commits.items()
        for partition, seen in parts.items()
    }
    committed_now = {(g, p): offset for g, p, offset in committed}
    last, sessions = probed_passed_spans(history, judged_below, SPAN_BUCKET_MS)
    return CommitSpans(
        plain=plain_passed_spans(history, committed_now, named, judged_below),
        last=last,
        named=sorted(named),
        sessions=sessions,
        read_ms=read_ms,
    )


def clamped(spans: Sequence[tuple[Any, ...]], offsets: dict[int, PartitionOffsets]) -> list[tuple[Any, ...]]:
    """Spans (group, partition, first, last, anything more) within the partitions' logs as read
    (a commit set by hand far past the log end would make a span of offsets no record can hold)."""
    kept = []
    for group, partition, first, last, *more in spans:
        if partition in offsets:
            last = min(last, offsets[partition].high - 1)
            if first <= last:
                kept.append((group, partition, first, last, *more))
    return kept


def extract_topic_offsets(
    binding: Binding, admin: AdminClient, meta: StateMeta, read_before: dict[int, int] | None = None
) -> dict[str, Any]:
    """Every driver-side Kafka look-up, in the order that keeps the reads consistent.

    Committed offsets first, then the consumer ledger's end, MARK_SETTLE_SECONDS later where
    a group has committed (a processed mark may trail its commit by the probe's flush), then the producer ledger's end, then the topic's own ends (a ledger
    entry acked at an offset is then always inside the topic range read). Committed offsets
    are asked on clients of their own (group_offsets), the rest on `admin`.
    """
    partitions = topic_partitions(admin, binding.topic)
    connection = admin_config(binding.bootstrap_servers, binding.kafka_config)
    committed = committed_offsets(connection, binding.consumer_groups, binding.topic, partitions)
    settled = time.monotonic() + (mark_settle_seconds() if committed else 0.0)
    spans = plain_commits(binding, admin, committed, meta)  # in the settle wait

    ends: dict[str, dict[int, PartitionOffsets]] = {}

    def ledger(topic: str, previous: dict[int, int], settle: bool = False) -> OffsetRange:
        # A ledger topic that never existed means the probes are not in use; one that
        # disappeared after being read is a failure like any other unreadable input.
        parts = topic_partitions(admin, topic, required=bool(previous))
        if settle and parts:
            time.sleep(max(0.0, settled - time.monotonic()))  # MARK_SETTLE_SECONDS
        ends[topic] = partition_offsets(admin, topic, parts)
        return plan_offsets(topic, ends[topic], previous)

    consumer_ledger = (
        ledger(binding.consumer_ledger_topic, meta.consumer_ledger_offsets, settle=True)
        if binding.consumer_groups
        else OffsetRange(binding.consumer_ledger_topic)
    )
    producer_ledger = ledger(binding.producer_ledger_topic, meta.producer_ledger_offsets)
    # Listed again: a partition added since the first list (the settle wait is seconds long)
    # may hold records the ledger end just read acks, which need its log end.
    partitions = sorted(set(partitions) | set(topic_partitions(admin, binding.topic)))
    offsets = partition_offsets(admin, binding.topic, partitions)
    return {
        "partitions": partitions,
        "committed": committed,
        "plain_passed": clamped(spans.plain, offsets),
        # closed sessions left out once the consumer ledger is read (reconcile_inputs)
        "last_passed": clamped(spans.last, offsets),
        # left unjudged above the session's highest mark read, for sessions that did not close
        "session_passed": clamped(spans.sessions, offsets),
        "history_note": spans.note,
        "history_read_ms": spans.read_ms,
        "sessions_named": spans.named,
        "consumer_ledger": consumer_ledger,
        "producer_ledger": producer_ledger,
        # its log ends and leader epochs (failover_hold: a failover there holds probes' entries)
        "producer_ledger_ends": ends[binding.producer_ledger_topic],
        "watermarks": offsets,
        "topic": plan_offsets(binding.topic, offsets, meta.topic_offsets, read_before=read_before),
    }


def check_nothing_deleted_while_read(admin: AdminClient, plan: OffsetRange) -> None:
    """Fail the run when a partition's log start moved past its planned start during the read.

    The Kafka source skips records deleted under it (failOnDataLoss=false, see extract_topic),
    so a read that raced retention or delete_records would look like records that were never
    produced. Call it once every read of `plan` has been materialized.
    """
    moved = deleted_while_read(admin, plan.topic, plan.ranges)
    if moved:
        where = ", ".join(
            f"{plan.topic}/{p} from offset {start} (log start now {low})" for p, (start, low) in moved.items()
        )
        raise ReconcileError(
            f"records were deleted while this run read them: {where}; the run is discarded (nothing was "
            "reported, the incremental state is unchanged), run it again"
        )


def check_read_to_planned_end(binding: Binding, plan: OffsetRange, last_read: Mapping[int, int]) -> None:
    """Fail the run when a partition's read stopped short of its planned end.

    The Kafka source ends a partition early, silently, where its log now ends before the
    planned end (failOnDataLoss=false, see extract_topic): a truncation under the read (an
    unclean leader election) whose offsets new records may fill again, which the next run,
    starting at the planned end, would never read. last_read: per partition, the offset of
    the last record read (none read: left out). Below the planned end only transaction
    markers and aborted records may be left unread: read_committed finds nothing there.
    """
    tails = {
        p: (last_read.get(p, start - 1) + 1, end)
        for p, (start, end) in plan.ranges.items()
        if last_read.get(p, start - 1) + 1 < end
    }
    short = first_committed_records(binding.bootstrap_servers, binding.kafka_config, plan.topic, tails)
    if short:
        where = ", ".join(
            f"{plan.topic}/{p} was read only to offset {tails[p][0]} of its planned end {tails[p][1]} "
            + (f"(its log now ends at {at})" if what == "log-end" else f"(a record at offset {at} was not read)")
            for p, (what, at) in sorted(short.items())
        )
        raise ReconcileError(
            f"{where}: truncated while read? The run is discarded (nothing was reported, the incremental state is "
            "unchanged), run it again"
        )


def loss_horizon(
    first_ms: dict[int, int | None],
    plan: OffsetRange,
    upper: datetime,
    grace_seconds: float,
    stamp_lag_ms: int | None = 0,
) -> datetime | None:
    """The newest time a record among `plan.lost` may carry; None when nothing was lost.

    first_ms: per partition, the timestamp of the first record read. Records are appended in
    offset order, so every lost record came before the first record still in its partition:
    a row created after that record's timestamp cannot have had its record in the lost range.
    The binding's grace is added for producers whose timestamps are a little out of order,
    and `stamp_lag_ms` for those known to stamp records earlier than they write them
    (record_times.stamp_lag_ms; None: no limit, then no timestamp bounds the loss). A
    partition with no record left to read gives no bound: then everything up to `upper` may
    have been lost.
    """
    if not plan.lost:
        return None
    firsts = {p: ms for p, ms in first_ms.items() if p in plan.lost and ms is not None}
    if set(firsts) != set(plan.lost) or stamp_lag_ms is None:
        return upper
    return _after(max(firsts.values()), grace_seconds, stamp_lag_ms)


def recreation_horizon(
    first_ms: dict[int, int | None], upper: datetime, grace_seconds: float, stamp_lag_ms: int | None = 0
) -> datetime:
    """The newest time a record of a deleted topic may carry, read in the topic created again
    under its name: the old topic was gone before the new one was made, so before the first
    record of any of its partitions (first_ms, per partition), give or take the binding's
    grace and `stamp_lag_ms` (as loss_horizon's); `upper` when the new topic has no record yet."""
    firsts = [ms for ms in first_ms.values() if ms is not None]
    if not firsts or stamp_lag_ms is None:
        return upper
    return _after(min(firsts), grace_seconds, stamp_lag_ms)


def _after(ms: int, grace_seconds: float, stamp_lag_ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC) + timedelta(seconds=grace_seconds, milliseconds=stamp_lag_ms)


def first_record_ms(raw: DataFrame) -> tuple[dict[int, int | None], dict[int, int]]:
    """Per partition of a Kafka read, the timestamp of its first record and the offset of its
    last one (one job)."""
    rows = (
        raw.groupBy("partition")
        .agg(F.min_by(F.unix_millis("timestamp"), "offset").alias("first_ms"), F.max("offset").alias("last"))
        .collect()
    )
    return {row["partition"]: row["first_ms"] for row in rows}, {row["partition"]: row["last"] for row in rows}


def deleted_unread_warnings(plan: OffsetRange, consequence: str, what: str = "") -> list[str]:
    """One warning per partition of `plan.lost` (records deleted before any run read them),
    naming the offsets and the consequence; `what` names the ledger ("" for the topic)."""
    return [
        f"{what}{plan.topic}/{partition}: offsets {start}..{low - 1} ({low - start} record(s)) were deleted before "
        f"they could be read; {consequence}"
        for partition, (start, low) in sorted(plan.lost.items())
    ]


def entries_lost_warnings(plan: OffsetRange, horizon: datetime) -> list[str]:
    """What a producer ledger deleted before it was read leaves unjudged."""
    return deleted_unread_warnings(
        plan,
        f"sequence numbers produced up to {horizon.isoformat()} without a record or a ledger entry are not "
        "reported never-sent where the topic no longer holds records that old either",
        "producer ledger ",
    )


def marks_lost_warnings(plan: OffsetRange, horizon: datetime) -> list[str]:
    """What a consumer ledger deleted before it was read leaves unjudged."""
    return deleted_unread_warnings(
        plan,
        f"records written up to {horizon.isoformat()} are not judged unprocessed (their processed marks may have "
        "been among them)",
        "consumer ledger ",
    )


def compaction_horizon(
    binding: Binding,
    cleanup: TopicCleanup,
    upper: datetime,
    last_read_ms: int | None = None,
    read_end: datetime | None = None,
) -> tuple[datetime | None, datetime | None, list[str]]:
    """On a compacted topic: up to when acked records may have been removed by the cleaner
    (find_gaps' `compacted_until`), up to when an item may have lost every record (source
    rows without any record created up to it cannot be called missing, nor acked records gone
    without a trace be gaps), and the run's warnings saying so. (None, None, []) for a topic
    that is not compacted.

    When the binding's key is not the record key, the cleaner may remove every record of an
    item once a later record has the same record key. When it is, only a tombstone written
    after the item's records, then removed delete.retention.ms after it was cleaned, takes
    every trace of it: a record written up to `emptied_horizon_ms` of when this run's read
    was over (`read_end`, else `upper`), and only if no run began to read the topic after that
    instant (`last_read_ms`, when the previous run began to read, None when no run's read
    vouches for it: that run saw every record written before, and a run that reads a
    tombstone remembers it)."""
    now_ms = int(upper.timestamp() * 1000)
    until_ms = cleanup.horizon_ms(now_ms)
    if until_ms is None:
        return None, None, []
    until = datetime.fromtimestamp(until_ms / 1000, UTC)
    if not absent_keys_explained(binding.record_key.source):
        emptied_ms = cleanup.emptied_horizon_ms(int((read_end or upper).timestamp() * 1000))
        if emptied_ms is None or (last_read_ms is not None and last_read_ms > emptied_ms):
            return until, None, []
        emptied = datetime.fromtimestamp(emptied_ms / 1000, UTC)
        read = (
            "no earlier run is known to have read it"
            if last_read_ms is None
            else f"the last run began to read it at {iso_ms(last_read_ms)}, longer ago than that"
        )
        return (
            until,
            emptied,
            [
                f"{binding.topic} is compacted ({cleanup.describe()}, delete.retention.ms="
                f"{cleanup.delete_retention_ms}) and {read}: an item deleted with a tombstone loses every record once "
                f"the cleaner removes the tombstone, so source rows created up to {emptied.isoformat()} without a "
                f"record are counted {UNVERIFIABLE}, not missing (runs that begin less than delete.retention.ms "
                "apart, their reads included, leave nothing unjudged)"
            ],
        )
    return (
        until,
        until,
        [
            f"{binding.topic} is compacted ({cleanup.describe()}) and the binding's key "
            f"({binding.record_key.describe()}) is not the record key: the log cleaner removes a record once a later "
            "record has the same record key, so source rows created up to "
            f"{until.isoformat()} without a record are counted {UNVERIFIABLE}, not missing (raise "
            "min.compaction.lag.ms to keep records long enough to be audited)"
        ],
    )


def lost_warnings(plan: OffsetRange, horizon: datetime) -> list[str]:
    """What the topic deleted before it was read leaves unverifiable."""
    return deleted_unread_warnings(
        plan,
        f"source rows created up to {horizon.isoformat()} without a record are counted {UNVERIFIABLE}, not missing",
    )


def _jdbc_query(spark: SparkSession, binding: Binding, sql: str) -> DataFrame:
    url, props = jdbc_url_and_properties(binding.source_url)
    return spark.read.format("jdbc").option("url", url).option("query", sql).options(**props).load()


def extract_source_columns(spark: SparkSession, binding: Binding) -> tuple[str, dict[str, str]]:
    """The table's qualified name and {column: type} as the database spells them.

    Unknown tables and columns are configuration errors naming what is missing.
    Identifiers are validated by the binding before they reach this SQL.
    """
    table, columns, _ = extract_source_table(spark, binding)
    return table, columns


def extract_source_table(spark: SparkSession, binding: Binding) -> tuple[str, dict[str, str], datetime]:
    """extract_source_columns, and the source database's clock when it answered (UTC): what a
    created column defaulting to now() is stamped with, read in the same query
    (reconcile_plan.window_end ends the window at it where it is behind the driver's)."""
    where = f"lower(table_name) = '{binding.table_name.lower()}'"
    if binding.schema_name:
        where += f" and lower(table_schema) = '{binding.schema_name.lower()}'"
    rows = _jdbc_query(
        spark,
        binding,
        "select table_schema, table_name, column_name, data_type, current_timestamp as source_now "
        f"from information_schema.columns where {where} order by ordinal_position",
    ).collect()
    schemas = sorted({(r["table_schema"], r["table_name"]) for r in rows})
    if not schemas:
        raise BindingError(
            f"binding {binding.name!r}: unknown table {binding.table!r} in source {redact_url(binding.source_url)}"
        )
    if len(schemas) > 1:
        public = [s for s in schemas if s[0] == "public"]
        if not public:
            raise BindingError(
                f"binding {binding.name!r}: table {binding.table!r} exists in several schemas "
                f"({', '.join(s for s, _ in schemas)}); qualify it as schema.table"
            )
        schemas = public
    schema, table = schemas[0]
    columns = {
        r["column_name"]: r["data_type"] for r in rows if (r["table_schema"], r["table_name"]) == (schema, table)
    }
    for what, wanted in (("key_column", binding.key_column), ("created_column", binding.created_column)):
        if not any(c.lower() == wanted.lower() for c in columns):
            raise BindingError(
                f"binding {binding.name!r}: unknown column {wanted!r} ({what}) in table {schema}.{table}; "
                f"it has: {', '.join(columns)}"
            )
    source_now: datetime = rows[0]["source_now"]
    # PySpark gives a TimestampType value as a naive datetime in this process's local zone
    # (TimestampType.fromInternal), whatever spark.sql.session.timeZone says.
    if source_now.tzinfo is None:
        source_now = source_now.astimezone()
    return f'"{schema}"."{table}"', columns, source_now.astimezone(UTC)


def source_key_unique(spark: SparkSession, binding: Binding, table: str, columns: dict[str, str]) -> bool:
    """True when PostgreSQL guarantees one row per key: a valid unique index (a primary key or
    a unique constraint or index) on exactly the key column, without predicate or expression.

    Then the source rows need no grouping by key: a window read by key ranges returns each key
    at most once. Read from pg_catalog, which any user may read (information_schema shows
    constraints only to a table's owner). Any other database, or a key the catalog cannot
    vouch for, answers False and the rows are grouped as before.
    """
    url, _ = jdbc_url_and_properties(binding.source_url)
    if not url.startswith("jdbc:postgresql:"):
        return False
    key = actual_column(columns, binding.key_column).replace("'", "''")
    quoted = table.replace("'", "''")  # '"schema"."table"' from extract_source_columns
    row = _jdbc_query(
        spark,
        binding,
        "select count(*) as n from pg_catalog.pg_index i join pg_catalog.pg_attribute a "
        "on a.attrelid = i.indrelid and a.attnum = i.indkey[0] "
        f"where i.indrelid = '{quoted}'::regclass and i.indisunique and i.indisvalid "
        f"and i.indnkeyatts = 1 and i.indpred is null and i.indexprs is null and a.attname = '{key}'",
    ).collect()[0]
    return bool(row["n"])


def actual_column(columns: dict[str, str], wanted: str) -> str:
    return next(c for c in columns if c.lower() == wanted.lower())


def _ts_literal(moment: datetime) -> str:
    return "'" + moment.astimezone(UTC).isoformat() + "'"


def source_window(
    binding: Binding, columns: dict[str, str], lower: datetime | None, upper: datetime
) -> tuple[str, str]:
    """(the created column's value as an instant, the SQL predicate of rows created in
    (lower, upper]) for the source table whose columns extract_source_columns gave."""
    created = actual_column(columns, binding.created_column)
    created_value = f'"{created}"'
    predicate = f"{created_value} <= {_ts_literal(upper)}"
    if lower is not None:
        predicate += f" and {created_value} > {_ts_literal(lower)}"
    if is_naive_timestamp(columns[created]):
        # A column without a time zone holds wall-clock times in binding.timestamp_zone: it is
        # read, and judged against the window, as instants there. The bare column is also
        # held to the window's bounds as wall-clock times there, widened by more than any
        # zone's clock change, so that an index on it serves; the instants decide.
        zone = "'" + binding.timestamp_zone + "'"  # check_zone: never a quote
        created_value = f'("{created}" at time zone {zone})'

        def wall(moment: datetime, shift: str) -> str:
            return f"(({_ts_literal(moment)}::timestamptz at time zone {zone}) {shift} interval '{ZONE_SHIFT}')"

        predicate = f'{created_value} <= {_ts_literal(upper)} and "{created}" <= {wall(upper, "+")}'
        if lower is not None:
            predicate += f' and {created_value} > {_ts_literal(lower)} and "{created}" > {wall(lower, "-")}'
    return created_value, predicate


def source_subquery(
    binding: Binding, table: str, columns: dict[str, str], lower: datetime | None, upper: datetime
) -> str:
    """The rows created in (lower, upper] as a JDBC `dbtable` subquery: audit_key, audit_created."""
    created_value, predicate = source_window(binding, columns, lower, upper)
    key = actual_column(columns, binding.key_column)
    return f'(select "{key}" as audit_key, {created_value} as audit_created from {table} where {predicate}) audit_src'


def source_reader(spark: SparkSession, binding: Binding) -> DataFrameReader:
    """A JDBC reader of the binding's source database."""
    url, props = jdbc_url_and_properties(binding.source_url)
    return spark.read.format("jdbc").option("url", url).option("fetchsize", "10000").options(**props)


def extract_source(
    spark: SparkSession,
    binding: Binding,
    table: str,
    columns: dict[str, str],
    lower: datetime | None,
    upper: datetime,
) -> DataFrame:
    """Rows created in (lower, upper]: columns audit_key and audit_created only.

    A numeric key is read in parallel ranges of it (bounds from a min/max query).
    """
    key = actual_column(columns, binding.key_column)
    _, predicate = source_window(binding, columns, lower, upper)
    stats = _jdbc_query(
        spark,
        binding,
        f'select min("{key}") as lo, max("{key}") as hi, count(*) as n from {table} where {predicate}'
        if columns[key].lower() in NUMERIC_TYPES
        else f"select null as lo, null as hi, count(*) as n from {table} where {predicate}",
    ).collect()[0]
    reader = source_reader(spark, binding).option("dbtable", source_subquery(binding, table, columns, lower, upper))
    partitions = max(
        1, min(math.ceil((stats["n"] or 0) / ROWS_PER_JDBC_PARTITION), spark.sparkContext.defaultParallelism * 4)
    )
    if partitions > 1 and stats["lo"] is not None and stats["hi"] is not None and stats["hi"] > stats["lo"]:
        reader = (
            reader.option("partitionColumn", "audit_key")
            .option("lowerBound", str(stats["lo"]))
            .option("upperBound", str(int(stats["hi"]) + 1))
            .option("numPartitions", str(partitions))
        )
    return reader.load()
