"""Reconcile a topic with its source-of-truth table and the probes' ledgers.

    spark-submit spark_jobs/reconcile.py --binding-json binding.json --state-dir var/reconcile \
        [--full] [--output-json run.json] [--output-jdbc-url postgresql://…]

extract_* read (JDBC, the Kafka source, driver-side offset look-ups), the pure transforms
live in reconcile_transform, load_* write; main() only wires them. The run result printed
on stdout (and written to --output-json) is

    {"status": "ok"|"failed", "error": str|null, "run_id", "binding", "mode": "full"|"incremental",
     "started_at", "finished_at", "duration_s", "new_findings": n,
     "counts": {kind: n, "records_without_headers": n, "records_malformed_headers": n},
     "offset_ranges": {"topic"|"producer_ledger"|"consumer_ledger": {partition: [start, end]}},
     "records_read": n, "window": {"lower", "upper", "cutoff", "unverifiable_until"}, "warnings": [...],
     "timings": {phase: seconds},
     "findings": [{"kind", "key", "cause", "evidence", "partition", "offset", "offsets",
                   "timestamp", "session", "seq", "seq_end", "group", "is_new"}],
     "findings_truncated": bool}

`counts` also has `unverifiable`: source rows past grace without a record that cannot be
judged because records that old were deleted (retention, delete_records) before the job read
them; they are never reported `missing`.

A run that cannot read something fails with the error, reports no findings and leaves the
incremental state as it was.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script by spark-submit
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.binding import (
    Binding,
    BindingError,
    binding_from_dict,
    check_identifier,
    jdbc_url_and_properties,
    load_binding_json,
    redact_url,
)
from spark_jobs.common import build_spark_session
from spark_jobs.kafka_offsets import (
    PartitionOffsets,
    RecordPrint,
    admin_client,
    committed_offsets,
    partition_offsets,
    record_prints,
    topic_partitions,
)
from spark_jobs.reconcile_state import StateMeta, StateStore
from spark_jobs.reconcile_transform import (
    COMMITTED_SCHEMA,
    FINDING_KINDS,
    KAFKA_RAW_SCHEMA,
    KEY_INDEX_SCHEMA,
    LOST_SIGHTING_SCHEMA,
    RECORD_COUNTS,
    RECORD_SCHEMA,
    SOURCE_ROW_SCHEMA,
    UNVERIFIABLE,
    WATERMARK_SCHEMA,
    conform,
    find_aborted,
    find_duplicates,
    find_gaps,
    find_missing,
    find_orphans,
    find_reprocessed,
    find_unprocessed,
    header_problem_counts,
    transform_aborted,
    transform_consumer_ledger,
    transform_duplicate_records,
    transform_key_delta,
    transform_key_stats,
    transform_ledger_bounds,
    transform_ledger_open,
    transform_lost_sightings,
    transform_new_source_rows,
    transform_orphan_candidates,
    transform_pending_source,
    transform_processed_coverage,
    transform_producer_ledger,
    transform_rebuild_memory,
    transform_records,
    transform_reprocessed,
    transform_seq_coverage,
    transform_source_rows,
    transform_unprocessed_candidates,
    union_findings,
    unverifiable_rows,
)

# Below this many new records the new side of a state join is broadcast, so state is
# scanned once without a shuffle. A broadcast is built in the driver: the bound keeps its
# memory small (a few MB of keys), and a run without earlier state never broadcasts (there
# is nothing to spare a shuffle of, and a first run reads the whole topic).
BROADCAST_NEW_ROWS = 200_000
ROWS_PER_JDBC_PARTITION = 250_000
NUMERIC_TYPES = {"smallint", "integer", "bigint", "int", "int2", "int4", "int8", "serial", "bigserial"}
IDENTITY = ["kind", "key", "cause", "partition", "offset", "session", "seq", "group"]


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


# ------------------------------------------------------------------ extract: Kafka ----


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


def java_kafka_options(bootstrap_servers: str, config: dict[str, str]) -> dict[str, str]:
    """Kafka source options from the cluster's librdkafka-style config."""
    options = {
        "kafka.bootstrap.servers": bootstrap_servers,
        "kafka.request.timeout.ms": "30000",
        "kafka.default.api.timeout.ms": "60000",
    }
    for key in ("security.protocol", "sasl.mechanism", "ssl.endpoint.identification.algorithm"):
        if key in config:
            options[f"kafka.{key}"] = config[key]
    if "sasl.mechanisms" in config:
        options["kafka.sasl.mechanism"] = config["sasl.mechanisms"]
    if "ssl.ca.location" in config:
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.location"] = config["ssl.ca.location"]
    if "sasl.username" in config:
        mechanism = options.get("kafka.sasl.mechanism", "PLAIN").upper()
        module = (
            "org.apache.kafka.common.security.scram.ScramLoginModule"
            if mechanism.startswith("SCRAM")
            else "org.apache.kafka.common.security.plain.PlainLoginModule"
        )
        user = json.dumps(config["sasl.username"])
        password = json.dumps(config.get("sasl.password", ""))
        options["kafka.sasl.jaas.config"] = f"{module} required username={user} password={password};"
    return options


def extract_topic(
    spark: SparkSession, binding: Binding, plan: OffsetRange, isolation: str = "read_committed"
) -> DataFrame:
    """The records of `plan` through Spark's Kafka source in batch mode, with headers."""
    ranges = {p: r for p, r in plan.ranges.items() if r[1] > r[0]}
    if not ranges:
        return spark.createDataFrame([], KAFKA_RAW_SCHEMA)
    topic = plan.topic
    parallelism = spark.sparkContext.defaultParallelism
    reader = (
        spark.read.format("kafka")
        .options(**java_kafka_options(binding.bootstrap_servers, binding.kafka_config))
        .option("assign", json.dumps({topic: sorted(ranges)}))
        .option("startingOffsets", json.dumps({topic: {str(p): s for p, (s, _) in ranges.items()}}))
        .option("endingOffsets", json.dumps({topic: {str(p): e for p, (_, e) in ranges.items()}}))
        .option("includeHeaders", "true")
        .option("kafka.isolation.level", isolation)
        # Transaction markers and aborted records leave holes in read_committed offsets, so
        # the source must not fail on holes. Real loss is checked in the driver instead:
        # before the read (plan_offsets: `lost`) and after it (check_nothing_deleted_while_read).
        .option("failOnDataLoss", "false")
    )
    if plan.total > 1_000_000:
        reader = reader.option("minPartitions", str(max(parallelism * 2, len(ranges))))
    return reader.load()


def find_rewritten_partitions(binding: Binding, meta: StateMeta) -> dict[int, str]:
    """Partitions whose records already read were truncated or replaced since the last run.

    An unclean leader election truncates the old leader's tail and new records take the same
    offsets; a re-created topic starts again at 0. Trusting "offsets below X were read" would
    then report the new records' rows missing and miss the lost ones. Two signs, per
    partition: the log now ends before where the last run stopped, or the last record that
    run read (state checkpoint) is no longer at its offset. An offset below the log start
    cannot be checked (retention deleted it, which is no rewrite).
    """
    if not meta.topic_offsets:
        return {}
    admin = admin_client(binding.bootstrap_servers, binding.kafka_config)
    offsets = partition_offsets(admin, binding.topic, topic_partitions(admin, binding.topic))
    reasons: dict[int, str] = {}
    to_check: dict[int, RecordPrint] = {}
    for partition, po in sorted(offsets.items()):
        read_to = meta.topic_offsets.get(partition)
        if read_to is None:
            continue
        if po.high < read_to:
            reasons[partition] = (
                f"the log now ends at offset {po.high}, before offset {read_to} where run {meta.run_id} stopped reading"
            )
            continue
        checkpoint = meta.checkpoints.get(partition)
        if checkpoint is not None and checkpoint[0] >= po.low:
            to_check[partition] = RecordPrint.from_json(checkpoint)
    now = record_prints(
        binding.bootstrap_servers, binding.kafka_config, binding.topic, {p: c.offset for p, c in to_check.items()}
    )
    for partition, checkpoint in to_check.items():
        found = now.get(partition)
        if found != checkpoint:
            what = "no record any more" if found is None else "another record"
            reasons[partition] = f"offset {checkpoint.offset}, read by run {meta.run_id}, now holds {what}"
    return reasons


def checkpoint_prints(binding: Binding, records: DataFrame, plan: OffsetRange) -> dict[int, list[int]]:
    """The print of the last record this run read in each partition, read back from Kafka.

    Its timestamp must be the one Spark read: otherwise the partition changed under the run.
    """
    last = (
        records.groupBy("partition")
        .agg(F.max_by(F.struct("offset", F.unix_millis("timestamp").alias("ts_ms")), "offset").alias("last"))
        .collect()
    )
    read = {row["partition"]: (row["last"]["offset"], row["last"]["ts_ms"]) for row in last}
    prints = record_prints(
        binding.bootstrap_servers, binding.kafka_config, plan.topic, {p: o for p, (o, _) in read.items()}
    )
    changed = [p for p, (_, ts_ms) in read.items() if getattr(prints.get(p), "ts_ms", None) != ts_ms]
    if changed:
        raise ReconcileError(
            f"{plan.topic} partition(s) {sorted(changed)} changed while this run read them (the last record read "
            "is no longer at its offset); the run is discarded, run it again"
        )
    return {p: found.to_json() for p, found in prints.items() if found is not None}


def extract_topic_offsets(
    binding: Binding, meta: StateMeta, read_before: dict[int, int] | None = None
) -> dict[str, Any]:
    """Every driver-side Kafka look-up, in the order that keeps the reads consistent.

    Committed offsets first, then the consumer ledger's end (a processed mark is written
    before its commit), then the producer ledger's end, then the topic's own ends (a ledger
    entry acked at an offset is then always inside the topic range read).
    """
    admin = admin_client(binding.bootstrap_servers, binding.kafka_config)
    partitions = topic_partitions(admin, binding.topic)
    committed = committed_offsets(admin, binding.consumer_groups, binding.topic, partitions)

    def ledger(topic: str, previous: dict[int, int]) -> OffsetRange:
        # A ledger topic that never existed means the probes are not in use; one that
        # disappeared after being read is a failure like any other unreadable input.
        parts = topic_partitions(admin, topic, required=bool(previous))
        return plan_offsets(topic, partition_offsets(admin, topic, parts), previous)

    consumer_ledger = (
        ledger(binding.consumer_ledger_topic, meta.consumer_ledger_offsets)
        if binding.consumer_groups
        else OffsetRange(binding.consumer_ledger_topic)
    )
    producer_ledger = ledger(binding.producer_ledger_topic, meta.producer_ledger_offsets)
    offsets = partition_offsets(admin, binding.topic, partitions)
    return {
        "partitions": partitions,
        "committed": committed,
        "consumer_ledger": consumer_ledger,
        "producer_ledger": producer_ledger,
        "watermarks": offsets,
        "topic": plan_offsets(binding.topic, offsets, meta.topic_offsets, read_before=read_before),
    }


def check_nothing_deleted_while_read(binding: Binding, plan: OffsetRange) -> None:
    """Fail the run when a partition's log start moved past its planned start during the read.

    The Kafka source skips records deleted under it (failOnDataLoss=false, see extract_topic),
    so a read that raced retention or delete_records would look like records that were never
    produced. Call it once every read of `plan` has been materialized.
    """
    admin = admin_client(binding.bootstrap_servers, binding.kafka_config)
    now = partition_offsets(admin, plan.topic, sorted(plan.ranges))
    moved = {
        partition: (start, now[partition].low)
        for partition, (start, end) in sorted(plan.ranges.items())
        if end > start and now[partition].low > start
    }
    if moved:
        where = ", ".join(
            f"{plan.topic}/{p} from offset {start} (log start now {low})" for p, (start, low) in moved.items()
        )
        raise ReconcileError(
            f"records were deleted while this run read them: {where}; the run is discarded (nothing was "
            "reported, the incremental state is unchanged), run it again"
        )


def loss_horizon(records: DataFrame, plan: OffsetRange, upper: datetime, grace_seconds: float) -> datetime | None:
    """The newest source `created` whose record may be among `plan.lost`; None when nothing was lost.

    Records are appended in offset order, so every lost record came before the first record
    still in its partition: a row created after that record's timestamp cannot have had its
    record in the lost range. The binding's grace is added for producers whose timestamps
    are a little out of order. A partition with no record left to read gives no bound: then
    every row up to `upper` may have been lost.
    """
    if not plan.lost:
        return None
    first = (
        records.where(F.col("partition").isin(sorted(plan.lost)))
        .groupBy("partition")
        .agg(F.unix_millis(F.min_by("timestamp", "offset")).alias("ts_ms"))
        .collect()
    )
    first_ms = {row["partition"]: row["ts_ms"] for row in first if row["ts_ms"] is not None}
    if set(first_ms) != set(plan.lost):
        return upper
    return datetime.fromtimestamp(max(first_ms.values()) / 1000, UTC) + timedelta(seconds=grace_seconds)


def lost_warnings(plan: OffsetRange, horizon: datetime) -> list[str]:
    return [
        f"{plan.topic}/{partition}: offsets {start}..{low - 1} ({low - start} record(s)) were deleted before they "
        f"could be read; source rows created up to {horizon.isoformat()} without a record are counted "
        f"{UNVERIFIABLE}, not missing"
        for partition, (start, low) in sorted(plan.lost.items())
    ]


# ------------------------------------------------------------------ extract: JDBC -----


def _jdbc_query(spark: SparkSession, binding: Binding, sql: str) -> DataFrame:
    url, props = jdbc_url_and_properties(binding.source_url)
    return spark.read.format("jdbc").option("url", url).option("query", sql).options(**props).load()


def extract_source_columns(spark: SparkSession, binding: Binding) -> tuple[str, dict[str, str]]:
    """The table's qualified name and {column: type} as the database spells them.

    Unknown tables and columns are configuration errors naming what is missing.
    Identifiers are validated by the binding before they reach this SQL.
    """
    where = f"lower(table_name) = '{binding.table_name.lower()}'"
    if binding.schema_name:
        where += f" and lower(table_schema) = '{binding.schema_name.lower()}'"
    rows = _jdbc_query(
        spark,
        binding,
        "select table_schema, table_name, column_name, data_type from information_schema.columns "
        f"where {where} order by ordinal_position",
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
    return f'"{schema}"."{table}"', columns


def _actual_column(columns: dict[str, str], wanted: str) -> str:
    return next(c for c in columns if c.lower() == wanted.lower())


def _ts_literal(moment: datetime) -> str:
    return "'" + moment.astimezone(UTC).isoformat() + "'"


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
    key = _actual_column(columns, binding.key_column)
    created = _actual_column(columns, binding.created_column)
    predicate = f'"{created}" <= {_ts_literal(upper)}'
    if lower is not None:
        predicate += f' and "{created}" > {_ts_literal(lower)}'
    stats = _jdbc_query(
        spark,
        binding,
        f'select min("{key}") as lo, max("{key}") as hi, count(*) as n from {table} where {predicate}'
        if columns[key].lower() in NUMERIC_TYPES
        else f"select null as lo, null as hi, count(*) as n from {table} where {predicate}",
    ).collect()[0]
    url, props = jdbc_url_and_properties(binding.source_url)
    subquery = f'(select "{key}" as audit_key, "{created}" as audit_created from {table} where {predicate}) audit_src'
    reader = spark.read.format("jdbc").option("url", url).option("dbtable", subquery).option("fetchsize", "10000")
    reader = reader.options(**props)
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


# ------------------------------------------------------------------ load --------------


def findings_rows(findings: DataFrame, limit: int) -> tuple[list[dict[str, Any]], bool]:
    """At most `limit` findings as JSON-ready dicts (evidence parsed), sorted for stable output."""
    ordered = findings.orderBy("kind", "cause", "key", "partition", "offset", "session", "seq", "group")
    rows = ordered.limit(limit + 1).collect()
    result = []
    for row in rows[:limit]:
        item = row.asDict(recursive=True)
        item["evidence"] = json.loads(item["evidence"]) if item.get("evidence") else None
        # PySpark hands back naive local datetimes; make them explicit UTC.
        item["timestamp"] = item["timestamp"].astimezone(UTC).isoformat() if item.get("timestamp") else None
        result.append(item)
    return result, len(rows) > limit


def load_json(result: dict[str, Any], path: str) -> None:
    """Write the run result atomically (a reader never sees half a file)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str))
    tmp.replace(target)


def load_findings_jdbc(findings_df: DataFrame, run_id: str, jdbc_url: str, table: str = "reconcile_finding") -> None:
    """Append the findings of a run to a PostgreSQL table (written by the executors).

    Columns: run_id, kind, key, cause, partition, offset, offsets (JSON text), timestamp,
    session, seq, seq_end, group, evidence (JSON text), is_new when present.
    """
    check_identifier(table, "findings table", "load", qualified=True)
    url, props = jdbc_url_and_properties(jdbc_url)
    rows = findings_df.withColumn("offsets", F.to_json("offsets")).withColumn("run_id", F.lit(run_id))
    rows = rows.select("run_id", *[c for c in rows.columns if c != "run_id"])
    rows.write.format("jdbc").option("url", url).option("dbtable", table).options(**props).option(
        "stringtype", "unspecified"
    ).mode("append").save()


# ------------------------------------------------------------------ the run -----------


@dataclass
class RunOptions:
    state_dir: str
    full: bool = False
    run_id: str | None = None
    max_findings: int = 10_000
    output_json: str | None = None
    output_jdbc_url: str | None = None
    findings_table: str = "reconcile_finding"
    now: datetime | None = None  # fixed clock for tests


def reconcile(spark: SparkSession, binding: Binding, options: RunOptions) -> dict[str, Any]:
    """One run: read, update the state, compute findings, load; raises on any failure."""
    cached: list[DataFrame] = []
    try:
        return _reconcile(spark, binding, options, cached)
    finally:
        for df in cached:
            df.unpersist()


class Laps:
    """Seconds per phase of a run, for its result's `timings`."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}
        self._clock = time.monotonic()

    def __call__(self, name: str) -> None:
        now = time.monotonic()
        self.timings[name] = round(self.timings.get(name, 0.0) + now - self._clock, 3)
        self._clock = now


@dataclass
class RunPlan:
    """Phase 1: what the run builds on and what it reads (offsets, the source window)."""

    run_id: str
    store: StateStore
    meta: StateMeta  # the state this run builds on: empty on a full run or a rebuild
    memory: StateMeta | None  # rebuild only: the state earlier runs left, kept as evidence
    rewritten: dict[int, str]  # partition → why its offsets already read are no longer trusted
    kafka: dict[str, Any]  # extract_topic_offsets
    lower: datetime | None
    upper: datetime
    cutoff: datetime
    warnings: list[str]

    @property
    def topic(self) -> OffsetRange:
        return self.kafka["topic"]

    @property
    def previous(self) -> StateMeta:
        """The state the last run left (findings for is_new, lost sightings)."""
        return self.memory or self.meta

    @property
    def broadcast_new(self) -> bool:
        return bool(self.meta.run_id) and self.topic.total < BROADCAST_NEW_ROWS

    @property
    def mode(self) -> str:
        return "rebuild" if self.memory else "incremental" if self.meta.run_id else "full"


@dataclass
class RunInputs:
    """Phase 2: this run's new data, read and parsed."""

    records: DataFrame  # committed records of the planned offsets (RECORD_SCHEMA + header_status)
    all_records: DataFrame  # the same read_uncommitted where transactions are in use
    new_aborted: DataFrame
    totals: Any  # Row: n, keyed, RECORD_COUNTS
    unverifiable_until: datetime | None
    checkpoints: dict[int, list[int]]
    old_source: DataFrame
    new_source: DataFrame
    producer_entries: DataFrame
    producer_bounds: DataFrame
    processed: DataFrame
    committed: DataFrame
    groups: DataFrame


@dataclass
class RunState:
    """Phase 3: the state after this run (datasets written under its id and read back)."""

    store: StateStore
    laps: Laps
    frames: dict[str, DataFrame] = field(default_factory=dict)
    datasets: dict[str, str] = field(default_factory=dict)
    key_deltas: list[str] = field(default_factory=list)
    source_deltas: list[str] = field(default_factory=list)

    def keep(self, name: str, df: DataFrame) -> DataFrame:
        """Write a dataset of the new state; returns it read back."""
        self.laps("prepare")
        self.datasets[name], self.frames[name] = self.store.write_dataset(df, name)
        self.laps(f"state.{name}")
        return self.frames[name]


def plan_run(binding: Binding, options: RunOptions, laps: Laps) -> RunPlan:
    """Which state to build on (a rebuild when offsets already read were rewritten), which
    offsets to read, and the source window."""
    run_id = options.run_id or new_run_id()
    store = StateStore(options.state_dir, binding.name, run_id)
    meta = StateMeta() if options.full else store.read_meta()
    warnings: list[str] = []
    rewritten = find_rewritten_partitions(binding, meta)
    memory: StateMeta | None = None
    if rewritten:
        memory = meta
        meta = StateMeta(unverifiable_until=memory.unverifiable_until)
        warnings += [
            f"{binding.topic}/{p}: records already read were truncated or rewritten ({reason}); every partition "
            "is read again from its log start"
            for p, reason in sorted(rewritten.items())
        ]
    kafka = extract_topic_offsets(binding, meta, read_before=memory.topic_offsets if memory else None)
    laps("kafka_offsets")
    upper = options.now or datetime.now(UTC)
    if meta.window_upper:
        lower: datetime | None = datetime.fromisoformat(meta.window_upper) - timedelta(seconds=binding.lookback_seconds)
    else:
        lower = binding.since
    cutoff = upper - timedelta(seconds=binding.grace_seconds)
    return RunPlan(run_id, store, meta, memory, rewritten, kafka, lower, upper, cutoff, warnings)


def extract_inputs(
    spark: SparkSession, binding: Binding, plan: RunPlan, persist: Callable[[DataFrame], DataFrame], laps: Laps
) -> RunInputs:
    """Read the planned topic offsets (committed, and uncommitted where transactions are in
    use), check nothing was deleted or rewritten under the read, then the source window and
    both ledgers."""
    meta, topic = plan.meta, plan.topic
    records = persist(transform_records(extract_topic(spark, binding, topic, "read_committed"), binding.record_key))
    totals = records.agg(F.count("*").alias("n"), F.count("key").alias("keyed"), *header_problem_counts()).collect()[0]
    if totals["n"] > 0 and totals["keyed"] == 0 and not meta.key_deltas and plan.memory is None:
        raise BindingError(
            f"binding {binding.name!r}: record_key {binding.record_key.describe()!r} matched nothing in "
            f"{totals['n']} record(s) of topic {binding.topic!r}"
        )
    if totals["keyed"] < totals["n"]:
        plan.warnings.append(
            f"{totals['n'] - totals['keyed']} record(s) without a key by {binding.record_key.describe()}"
        )
    # Offsets without a committed record are transaction markers or aborted records.
    read_uncommitted = binding.transactions if binding.transactions is not None else totals["n"] < topic.total
    if read_uncommitted:
        all_records = persist(
            transform_records(extract_topic(spark, binding, topic, "read_uncommitted"), binding.record_key)
        )
        all_records.count()  # read now, so the check below covers this read too
        new_aborted = transform_aborted(all_records, records)
    else:
        all_records = records
        new_aborted = spark.createDataFrame([], RECORD_SCHEMA)
    check_nothing_deleted_while_read(binding, topic)
    # After a rebuild `meta` is empty: only this run's checkpoints count.
    checkpoints = meta.checkpoints | checkpoint_prints(binding, records, topic)
    # Rows whose record may have been deleted unread can never be judged: the bound only
    # grows until a --full run starts over.
    horizon = loss_horizon(records, topic, plan.upper, binding.grace_seconds)
    if horizon is not None:
        plan.warnings.extend(lost_warnings(topic, horizon))
    earlier = datetime.fromisoformat(meta.unverifiable_until) if meta.unverifiable_until else None
    unverifiable_until = max((h for h in (earlier, horizon) if h is not None), default=None)
    laps("topic_read")

    table, columns = extract_source_columns(spark, binding)
    window_rows = transform_source_rows(
        extract_source(spark, binding, table, columns, plan.lower, plan.upper), "audit_key", "audit_created"
    )
    old_source = plan.store.deltas(spark, meta.source_deltas, SOURCE_ROW_SCHEMA)
    new_source = persist(transform_new_source_rows(window_rows, old_source, plan.broadcast_new))
    producer_entries, producer_bounds = transform_producer_ledger(
        extract_topic(spark, binding, plan.kafka["producer_ledger"]), binding.topic
    )
    processed = persist(
        transform_consumer_ledger(
            extract_topic(spark, binding, plan.kafka["consumer_ledger"]), binding.topic, binding.consumer_groups
        )
    )
    return RunInputs(
        records=records,
        all_records=all_records,
        new_aborted=new_aborted,
        totals=totals,
        unverifiable_until=unverifiable_until,
        checkpoints=checkpoints,
        old_source=old_source,
        new_source=new_source,
        producer_entries=producer_entries,
        producer_bounds=producer_bounds,
        processed=processed,
        committed=spark.createDataFrame(plan.kafka["committed"], COMMITTED_SCHEMA),
        groups=spark.createDataFrame([(g,) for g in binding.consumer_groups], "group string"),
    )


def update_state(
    spark: SparkSession, plan: RunPlan, inputs: RunInputs, persist: Callable[[DataFrame], DataFrame], laps: Laps
) -> RunState:
    """Previous state + this run's data → the next state, each dataset written under the
    run's id and read back; the key index and source deltas appended."""
    store, meta, records = plan.store, plan.meta, inputs.records
    new = RunState(store, laps)
    keep = new.keep

    def old(name: str) -> DataFrame:
        return store.dataset(spark, meta, name)

    new_lost = spark.createDataFrame([], LOST_SIGHTING_SCHEMA)
    if plan.memory is not None:
        # A rebuild starts from the part of the old index that the re-read cannot see again.
        lows = spark.createDataFrame(
            [(p, o.low) for p, o in plan.kafka["watermarks"].items()], "partition int, low long"
        )
        carried, new_lost = transform_rebuild_memory(
            store.deltas(spark, plan.memory.key_deltas, KEY_INDEX_SCHEMA),
            records,
            lows,
            sorted(plan.rewritten),
            plan.run_id,
        )
        meta.key_deltas = [store.write_delta(carried, "keys", KEY_INDEX_SCHEMA, suffix="-carried")]
    old_index = store.deltas(spark, meta.key_deltas, KEY_INDEX_SCHEMA)

    # Lost sightings outlive a rebuild; nearly always there are none and nothing is read.
    old_lost = store.dataset(spark, plan.previous, "lost_sightings")
    if plan.memory is not None or not old_lost.isEmpty():
        keep("lost_sightings", transform_lost_sightings(old_lost, new_lost, records))
    else:
        new.frames["lost_sightings"] = old_lost

    # This run's records grouped by key once, for every state update below that needs it.
    key_stats = persist(transform_key_stats(records))
    broadcast_new = plan.broadcast_new
    keep("duplicates", transform_duplicate_records(records, old_index, old("duplicates"), broadcast_new, key_stats))
    keep(
        "pending_source",
        transform_pending_source(
            old("pending_source"), inputs.new_source, records, old_index, broadcast_new, key_stats
        ),
    )
    keep(
        "orphan_candidates",
        transform_orphan_candidates(
            old("orphan_candidates"), records, inputs.old_source, inputs.new_source, broadcast_new, key_stats
        ),
    )
    keep("aborted", conform(old("aborted"), RECORD_SCHEMA).unionByName(conform(inputs.new_aborted, RECORD_SCHEMA)))
    coverage = keep("seq_coverage", transform_seq_coverage(old("seq_coverage"), inputs.all_records))
    keep("ledger_open", transform_ledger_open(old("ledger_open"), inputs.producer_entries, coverage))
    keep("ledger_bounds", transform_ledger_bounds(old("ledger_bounds"), inputs.producer_bounds))
    old_processed = old("processed_coverage")
    keep("reprocessed", transform_reprocessed(old("reprocessed"), old_processed, inputs.processed))
    processed_cov = keep("processed_coverage", transform_processed_coverage(old_processed, inputs.processed))
    keep(
        "unprocessed_candidates",
        transform_unprocessed_candidates(
            old("unprocessed_candidates"), records, processed_cov, inputs.groups, inputs.committed
        ),
    )
    new.key_deltas = [
        *meta.key_deltas,
        store.write_delta(transform_key_delta(records, plan.run_id, key_stats), "keys", KEY_INDEX_SCHEMA),
    ]
    new.source_deltas = [*meta.source_deltas, store.write_delta(inputs.new_source, "source", SOURCE_ROW_SCHEMA)]
    laps("state.deltas")
    return new


def find_all(plan: RunPlan, inputs: RunInputs, new: RunState) -> DataFrame:
    """Every finding of the new state (FINDING_SCHEMA)."""
    spark = inputs.records.sparkSession
    watermarks = spark.createDataFrame(
        [(p, o.low, plan.topic.ranges[p][1]) for p, o in plan.kafka["watermarks"].items()], WATERMARK_SCHEMA
    )
    s = new.frames
    return union_findings(
        [
            find_missing(s["pending_source"], plan.cutoff, inputs.unverifiable_until, s["lost_sightings"]),
            find_duplicates(s["duplicates"]),
            find_orphans(s["orphan_candidates"], plan.cutoff),
            find_gaps(s["seq_coverage"], s["ledger_open"], s["ledger_bounds"], watermarks),
            find_aborted(s["aborted"]),
            find_unprocessed(s["unprocessed_candidates"], inputs.committed, s["processed_coverage"]),
            find_reprocessed(s["reprocessed"]),
        ]
    )


def flag_new(spark: SparkSession, plan: RunPlan, current: DataFrame) -> DataFrame:
    """`is_new`: the previous run did not report the same finding (IDENTITY)."""
    seen = (
        plan.store.dataset(spark, plan.previous, "findings")
        .select(*[F.col(c).alias(f"_seen_{c}") for c in IDENTITY])
        .distinct()
    )
    return (
        current.join(seen, [current[c].eqNullSafe(seen[f"_seen_{c}"]) for c in IDENTITY], "left")
        .withColumn("is_new", F.col("_seen_kind").isNull())
        .drop(*[f"_seen_{c}" for c in IDENTITY])
    )


def count_findings(plan: RunPlan, inputs: RunInputs, new: RunState, current: DataFrame) -> dict[str, int]:
    """Findings per kind, the rows that could not be checked, and the header counts."""
    counts = {kind: 0 for kind in FINDING_KINDS} | {
        r["kind"]: r["count"] for r in current.groupBy("kind").count().collect()
    }
    until = inputs.unverifiable_until
    counts[UNVERIFIABLE] = unverifiable_rows(
        new.frames["pending_source"], plan.cutoff, until, new.frames["lost_sightings"]
    ).count()
    if counts[UNVERIFIABLE] and until is not None:
        plan.warnings.append(
            f"{counts[UNVERIFIABLE]} source row(s) created up to {until.isoformat()} have no record "
            "and cannot be checked: the topic no longer holds records that old"
        )
    # Not findings: the records this run read whose audit headers were absent or undecodable.
    return counts | {name: int(inputs.totals[name]) for name in RECORD_COUNTS}


def commit_state(spark: SparkSession, plan: RunPlan, inputs: RunInputs, new: RunState) -> None:
    """Point state.json at the new state: last, so a failed run leaves the old one."""
    store, kafka = plan.store, plan.kafka
    until = inputs.unverifiable_until
    store.commit(
        StateMeta(
            run_id=plan.run_id,
            topic_offsets={p: e for p, (_, e) in plan.topic.ranges.items()},
            producer_ledger_offsets={p: e for p, (_, e) in kafka["producer_ledger"].ranges.items()},
            consumer_ledger_offsets={p: e for p, (_, e) in kafka["consumer_ledger"].ranges.items()},
            window_upper=plan.upper.isoformat(),
            unverifiable_until=until.isoformat() if until else None,
            key_deltas=store.compact(spark, new.key_deltas, "keys", KEY_INDEX_SCHEMA),
            source_deltas=store.compact(spark, new.source_deltas, "source", SOURCE_ROW_SCHEMA),
            datasets=new.datasets,
            checkpoints=inputs.checkpoints,
        )
    )


def _reconcile(spark: SparkSession, binding: Binding, options: RunOptions, cached: list[DataFrame]) -> dict[str, Any]:
    def persist(df: DataFrame) -> DataFrame:
        cached.append(df.persist(StorageLevel.MEMORY_AND_DISK))
        return df

    laps = Laps()
    plan = plan_run(binding, options, laps)
    inputs = extract_inputs(spark, binding, plan, persist, laps)
    new = update_state(spark, plan, inputs, persist, laps)
    current = new.keep("findings", find_all(plan, inputs, new))
    flagged = flag_new(spark, plan, current)
    counts = count_findings(plan, inputs, new, current)
    new_count = flagged.where("is_new").count()
    rows, truncated = findings_rows(flagged, options.max_findings)
    if options.output_jdbc_url:
        load_findings_jdbc(flagged, plan.run_id, options.output_jdbc_url, options.findings_table)
    laps("findings")
    commit_state(spark, plan, inputs, new)
    until = inputs.unverifiable_until
    return {
        "run_id": plan.run_id,
        "binding": binding.name,
        "mode": plan.mode,
        "rewritten": {str(p): reason for p, reason in sorted(plan.rewritten.items())},
        "counts": counts,
        "new_findings": new_count,
        "offset_ranges": {
            "topic": plan.topic.to_json(),
            "producer_ledger": plan.kafka["producer_ledger"].to_json(),
            "consumer_ledger": plan.kafka["consumer_ledger"].to_json(),
        },
        "records_read": plan.topic.total,
        "window": {
            "lower": plan.lower.isoformat() if plan.lower else None,
            "upper": plan.upper.isoformat(),
            "cutoff": plan.cutoff.isoformat(),
            "unverifiable_until": until.isoformat() if until else None,
        },
        "warnings": plan.warnings,
        "timings": laps.timings,
        "findings": rows,
        "findings_truncated": truncated,
    }


def describe_error(exc: BaseException) -> str:
    """One readable line for the run record: a JVM error's own message, not its stack."""
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else str(exc)
    cause = exc.__cause__
    while java is not None and cause is None and java.getCause() is not None:
        java = java.getCause()
        text = f"{text} (caused by {java.toString()})"
    first_line = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(exc).__name__}: {first_line[:2000]}"


def run(spark: SparkSession, binding: Binding, options: RunOptions) -> dict[str, Any]:
    """reconcile() with the run envelope: status, error, timing; never raises."""
    started = time.monotonic()
    started_at = datetime.now(UTC)
    options = replace(options, run_id=options.run_id or new_run_id())
    try:
        result = {"status": "ok", "error": None} | reconcile(spark, binding, options)
    except Exception as exc:  # noqa: BLE001 - any failure fails the run, with its error
        result = failed_result(describe_error(exc), binding.name, options)
    result["started_at"] = started_at.isoformat()
    result["finished_at"] = datetime.now(UTC).isoformat()
    result["duration_s"] = round(time.monotonic() - started, 3)
    if options.output_json:
        try:
            load_json(result, options.output_json)
        except OSError as exc:
            # The state may be committed already; findings are a snapshot, so the next run
            # reports them again.
            result = failed_result(f"writing {options.output_json} failed: {exc}", binding.name, options)
    return result


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]


def failed_result(error: str, binding_name: str | None, options: RunOptions) -> dict[str, Any]:
    """A failed run publishes no findings."""
    return {
        "status": "failed",
        "error": error,
        "run_id": options.run_id,
        "binding": binding_name,
        "mode": "full" if options.full else "incremental",
        "counts": {},
        "new_findings": 0,
        "offset_ranges": {},
        "records_read": 0,
        "window": {},
        "warnings": [],
        "findings": [],
        "findings_truncated": False,
    }


# ------------------------------------------------------------------ CLI ---------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--binding-json", help="binding as a JSON object, inline or a file path")
    single = parser.add_argument_group("binding fields (instead of --binding-json)")
    single.add_argument("--binding", dest="name")
    single.add_argument("--topic")
    single.add_argument("--bootstrap-servers")
    single.add_argument("--source-url")
    single.add_argument("--table")
    single.add_argument("--key-column")
    single.add_argument("--created-column")
    single.add_argument("--record-key", default="key")
    single.add_argument("--grace", default="2m")
    single.add_argument("--guarantee", default="at-least-once")
    single.add_argument("--consumer-group", action="append", default=[], dest="consumer_groups")
    single.add_argument("--producer-ledger-topic", default="_audit.producer-ledger")
    single.add_argument("--consumer-ledger-topic", default="_audit.consumer-ledger")
    single.add_argument("--transactions", action=argparse.BooleanOptionalAction, default=None)
    single.add_argument("--since")
    single.add_argument("--lookback", default="5m")
    parser.add_argument("--full", action="store_true", help="ignore the incremental state and read everything")
    parser.add_argument("--state-dir", default="var/reconcile-state")
    parser.add_argument("--run-id")
    parser.add_argument("--output-json", help="write the run result to this file")
    parser.add_argument("--output-jdbc-url", help="append findings to PostgreSQL at this URL")
    parser.add_argument(
        "--output-jdbc-url-env",
        metavar="NAME",
        help="like --output-jdbc-url, read from this environment variable (keeps a password out of the process list)",
    )
    parser.add_argument("--findings-table", default="reconcile_finding")
    parser.add_argument("--max-findings", type=int, default=10_000, help="findings listed in the JSON result")
    parser.add_argument("--master", help="Spark master (default $SPARK_MASTER or local[2])")
    return parser.parse_args(argv)


def binding_from_args(args: argparse.Namespace) -> Binding:
    if args.binding_json:
        return load_binding_json(args.binding_json)
    return binding_from_dict(
        {
            "name": args.name,
            "topic": args.topic,
            "bootstrap_servers": args.bootstrap_servers,
            "source_url": args.source_url,
            "table": args.table,
            "key_column": args.key_column,
            "created_column": args.created_column,
            "record_key": args.record_key,
            "grace": args.grace,
            "guarantee": args.guarantee,
            "consumer_groups": args.consumer_groups,
            "producer_ledger_topic": args.producer_ledger_topic,
            "consumer_ledger_topic": args.consumer_ledger_topic,
            "transactions": args.transactions,
            "since": args.since,
            "lookback": args.lookback,
        }
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    output_jdbc_url = args.output_jdbc_url
    if args.output_jdbc_url_env:
        output_jdbc_url = os.environ.get(args.output_jdbc_url_env) or None
    options = RunOptions(
        state_dir=args.state_dir,
        full=args.full,
        run_id=args.run_id,
        max_findings=args.max_findings,
        output_json=args.output_json,
        output_jdbc_url=output_jdbc_url,
        findings_table=args.findings_table,
    )
    try:
        if args.output_jdbc_url_env and not output_jdbc_url:
            raise BindingError(f"--output-jdbc-url-env: environment variable {args.output_jdbc_url_env} is not set")
        binding = binding_from_args(args)
    except BindingError as exc:
        result = failed_result(f"BindingError: {exc}", None, options)
        if options.output_json:
            load_json(result, options.output_json)
        print(json.dumps(result))
        return 2
    spark = build_spark_session(f"reconcile-{binding.name}", master=args.master)
    result = run(spark, binding, options)
    print(json.dumps(result, default=str))
    return 0 if result["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
