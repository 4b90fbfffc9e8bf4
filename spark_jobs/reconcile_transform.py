"""Pure transforms of the reconciliation job: DataFrames in, DataFrames out, no I/O.

Two families:
- state updates `transform_*`: (previous state, this run's new data) → next state. A full run
  is the same code with an empty previous state, so incremental and full runs agree.
- findings `find_*`: state → findings frames in FINDING_SCHEMA.

Keys are compared as strings: the source key column is cast to string, record keys are
decoded as UTF-8.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_jobs.binding import RecordKeySpec

# ------------------------------------------------------------------ schemas ----------

KAFKA_RAW_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        StructField(
            "headers",
            ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
        ),
    ]
)

RECORD_SCHEMA = StructType(
    [
        StructField("key", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("session", StringType()),
        StructField("seq", LongType()),
    ]
)
# Per-key index entry: how many records a key has (in one state delta), its first one, and
# the run that read it (null in state written before runs were named here).
KEY_INDEX_SCHEMA = StructType(
    [
        StructField("key", StringType()),
        StructField("n", LongType()),
        *RECORD_SCHEMA.fields[1:],
        StructField("run_id", StringType()),
    ]
)
# A key an earlier run saw at partition/offset whose record is gone from there although the
# log still covers that offset (truncated and rewritten: unclean leader election, a topic
# re-created). run_id saw it; detected_run noticed it was gone.
LOST_SIGHTING_SCHEMA = StructType(
    [
        *KEY_INDEX_SCHEMA.fields[:1],
        *RECORD_SCHEMA.fields[1:],
        StructField("run_id", StringType()),
        StructField("detected_run", StringType()),
    ]
)
SOURCE_ROW_SCHEMA = StructType([StructField("key", StringType()), StructField("created", TimestampType())])
INTERVAL_SCHEMA = StructType(
    [StructField("session", StringType()), StructField("start", LongType()), StructField("end", LongType())]
)
LEDGER_ENTRY_SCHEMA = StructType(
    [
        StructField("session", StringType()),
        StructField("seq", LongType()),
        StructField("status", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("error", StringType()),
        StructField("persisted", StringType()),
        StructField("audit_id", StringType()),
        StructField("ts_ms", LongType()),
        # v2: the end of the window the record was produced in (ts_ms is its start)
        StructField("to_ms", LongType()),
    ]
)
LEDGER_BOUND_SCHEMA = StructType([StructField("session", StringType()), StructField("last_seq", LongType())])
PROCESSED_SCHEMA = StructType(
    [
        StructField("group", StringType()),
        StructField("consumer_session", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("audit_id", StringType()),
        StructField("ts_ms", LongType()),
    ]
)
PROCESSED_INTERVAL_SCHEMA = StructType(
    [
        StructField("group", StringType()),
        StructField("partition", IntegerType()),
        StructField("start", LongType()),
        StructField("end", LongType()),
    ]
)
REPROCESSED_SCHEMA = StructType(
    [
        StructField("group", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("count", LongType()),
        StructField("consumer_sessions", ArrayType(StringType())),
        StructField("audit_id", StringType()),
        StructField("first_ms", LongType()),
        StructField("last_ms", LongType()),
    ]
)
CANDIDATE_SCHEMA = StructType([StructField("group", StringType()), *RECORD_SCHEMA.fields])
COMMITTED_SCHEMA = StructType(
    [StructField("group", StringType()), StructField("partition", IntegerType()), StructField("committed", LongType())]
)
# Per partition of the topic: log start offset and the end of what this run has read.
WATERMARK_SCHEMA = StructType(
    [StructField("partition", IntegerType()), StructField("low", LongType()), StructField("end", LongType())]
)

OFFSET_STRUCT = StructType([StructField("partition", IntegerType()), StructField("offset", LongType())])
FINDING_SCHEMA = StructType(
    [
        StructField("kind", StringType(), nullable=False),
        StructField("key", StringType()),
        StructField("cause", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("offsets", ArrayType(OFFSET_STRUCT)),
        StructField("timestamp", TimestampType()),
        StructField("session", StringType()),
        StructField("seq", LongType()),
        StructField("seq_end", LongType()),
        StructField("group", StringType()),
        StructField("evidence", StringType()),
    ]
)
# Ledger statuses of v2 range records, one per sequence (auditor.probes.codec).
ACKED_RANGE = "acked-range"
SENT = "sent"
# v2 `keys` records: the audit id of a sequence, which the range entries of that (session,
# seq) take on (it may come in another run's slice of the ledger); no status of its own.
KEYED = "keyed"
FINDING_KINDS = ("missing", "duplicate", "orphan", "gap", "aborted", "unprocessed", "reprocessed")
# Not a finding kind: a run count of source rows that could not be checked (unverifiable_rows).
UNVERIFIABLE = "unverifiable"

_LEDGER_JSON_SCHEMA = StructType(
    [
        StructField("v", IntegerType()),
        StructField("type", StringType()),
        StructField("pid", StringType()),
        StructField("sid", StringType()),
        StructField("group", StringType()),
        StructField("topic", StringType()),
        StructField("ts", LongType()),
        # Entries are heterogeneous JSON arrays; a string-typed element keeps each value's
        # JSON text, which is then cast per position.
        StructField("entries", ArrayType(ArrayType(StringType()))),
        StructField("last_seq", MapType(StringType(), LongType())),
    ]
)

# ------------------------------------------------------------------ helpers ----------


def local_frame(spark: SparkSession, rows: Sequence[Any], schema: StructType | str) -> DataFrame:
    """A frame of driver-side rows; with none, one the optimizer knows is empty.

    `createDataFrame([])` is an RDD Spark cannot see into: every join, aggregate and write
    over it runs as if it had rows. An empty local relation (what `limit(0)` becomes) is
    pruned from the plans built on it, so a binding without ledgers, groups or transactions
    pays nothing for them (see is_empty_plan).
    """
    frame = spark.createDataFrame(list(rows), schema)
    return frame if rows else frame.limit(0)


def empty_frame(spark: SparkSession, schema: StructType | str) -> DataFrame:
    return local_frame(spark, [], schema)


def is_empty_plan(df: DataFrame) -> bool:
    """True when the optimizer proved `df` has no rows (its plan became an empty local
    relation, see local_frame); decided without running anything. False means "not proven",
    not "has rows"."""
    plan = df._jdf.queryExecution().optimizedPlan()
    return bool(plan.getClass().getSimpleName() == "LocalRelation" and plan.data().isEmpty())


def conform(df: DataFrame, schema: StructType) -> DataFrame:
    """Select and cast `df` to exactly `schema` (missing columns become typed nulls)."""
    present = set(df.columns)
    return df.select(
        *[(F.col(f.name) if f.name in present else F.lit(None)).cast(f.dataType).alias(f.name) for f in schema.fields]
    )


def _header(name: str) -> Column:
    matches = F.filter(F.col("headers"), lambda h: h["key"] == F.lit(name))
    return F.get(matches, 0)["value"].cast("string")


def record_key_expression(spec: RecordKeySpec) -> Column:
    """The Spark expression that finds a record's business key, as a string."""
    if spec.source == "key":
        return F.col("key").cast("string")
    if spec.source == "header":
        return _header(str(spec.argument))
    if spec.source == "json":
        return F.get_json_object(F.col("value").cast("string"), str(spec.argument))
    raise ValueError(f"unknown record key source {spec.source!r}")


def _occurrence() -> Column:
    return F.struct(
        F.col("partition"),
        F.col("offset"),
        F.unix_millis(F.col("timestamp")).alias("ts_ms"),
        F.col("session"),
        F.col("seq"),
    )


def _ms_to_ts(col: Column) -> Column:
    return F.timestamp_millis(col)


RANGE_BUCKET = 65536


def _range_join(df: DataFrame, intervals: DataFrame, keys: Sequence[str], value: str, how: str) -> DataFrame:
    """Join rows to the intervals [start, end] of the same keys that contain `value`.

    Both sides are also matched on a bucket of the value (intervals are repeated for each
    bucket they span), so a session with millions of entries is never compared with every
    interval of that session.
    """
    bucket_size = F.lit(RANGE_BUCKET)
    iv = intervals.select(
        *[F.col(k).alias(f"_iv_{k}") for k in keys],
        F.col("start").alias("_iv_start"),
        F.col("end").alias("_iv_end"),
        F.explode(F.sequence(F.floor(F.col("start") / bucket_size), F.floor(F.col("end") / bucket_size))).alias(
            "_iv_bucket"
        ),
    )
    bucketed = df.withColumn("_bucket", F.floor(F.col(value) / bucket_size))
    condition = [bucketed[k] == iv[f"_iv_{k}"] for k in keys] + [
        bucketed["_bucket"] == iv["_iv_bucket"],
        bucketed[value] >= iv["_iv_start"],
        bucketed[value] <= iv["_iv_end"],
    ]
    return bucketed.join(iv, condition, how).drop("_bucket")


def _range_anti(df: DataFrame, intervals: DataFrame, keys: Sequence[str], value: str) -> DataFrame:
    """Rows of df whose `value` lies in no interval [start, end] of the same keys."""
    return _range_join(df, intervals, keys, value, "left_anti")


range_anti = _range_anti  # for other jobs (stuck_locate)


def _range_semi(df: DataFrame, intervals: DataFrame, keys: Sequence[str], value: str) -> DataFrame:
    """Rows of df whose `value` lies in some interval [start, end] of the same keys."""
    return _range_join(df, intervals, keys, value, "left_semi")


def merge_intervals(intervals: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Merge overlapping or adjacent [start, end] intervals per keys."""
    w = Window.partitionBy(*keys).orderBy("start", "end")
    previous_end = F.max("end").over(w.rowsBetween(Window.unboundedPreceding, -1))
    opens = F.when(previous_end.isNull() | (F.col("start") > previous_end + 1), 1).otherwise(0)
    marked = intervals.withColumn("_opens", opens).withColumn(
        "_island", F.sum("_opens").over(w.rowsBetween(Window.unboundedPreceding, 0))
    )
    return (
        marked.groupBy(*keys, "_island").agg(F.min("start").alias("start"), F.max("end").alias("end")).drop("_island")
    )


def values_to_intervals(values: DataFrame, keys: Sequence[str], value: str, bucket_size: int = 4096) -> DataFrame:
    """Distinct integer values per keys → merged [start, end] intervals.

    Runs of consecutive values collapse first inside fixed-size buckets (parallel, bounded
    windows), so one long producer session never lands in a single task.
    """
    distinct = values.select(*keys, F.col(value).cast("long").alias("_v")).where(F.col("_v").isNotNull()).distinct()
    bucketed = distinct.withColumn("_bucket", F.floor(F.col("_v") / F.lit(bucket_size)))
    w = Window.partitionBy(*keys, "_bucket").orderBy("_v")
    runs = bucketed.withColumn("_run", F.col("_v") - F.row_number().over(w))
    per_bucket = runs.groupBy(*keys, "_bucket", "_run").agg(F.min("_v").alias("start"), F.max("_v").alias("end"))
    return merge_intervals(per_bucket.select(*keys, "start", "end"), keys)


def interval_holes(coverage: DataFrame, bounds: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Per keys, the [start, end] ranges within [0, last_seq] not covered by `coverage`.

    coverage: keys, start, end (merged); bounds: keys, last_seq.
    """
    w = Window.partitionBy(*keys).orderBy("start")
    joined = coverage.join(bounds, list(keys), "inner")
    interior = (
        joined.withColumn("_hole_start", F.coalesce(F.lag("end").over(w) + 1, F.lit(0).cast("long")))
        .withColumn("_hole_end", F.least(F.col("start") - 1, F.col("last_seq")))
        .where(F.col("_hole_start") <= F.col("_hole_end"))
        .select(*keys, F.col("_hole_start").alias("start"), F.col("_hole_end").alias("end"))
    )
    covered_to = coverage.groupBy(*keys).agg(F.max("end").alias("_max_end"))
    tail = (
        bounds.join(covered_to, list(keys), "left")
        .withColumn("start", F.coalesce(F.col("_max_end") + 1, F.lit(0).cast("long")))
        .where(F.col("start") <= F.col("last_seq"))
        .select(*keys, "start", F.col("last_seq").alias("end"))
    )
    return interior.unionByName(tail)


# ------------------------------------------------------------------ parsing ----------


# What transform_records says of a record's audit headers (docs/contracts.md).
HEADERS_OK, HEADERS_MISSING, HEADERS_MALFORMED = "ok", "missing", "malformed"
AUDIT_HEADERS = ("audit-id", "audit-pid", "audit-seq", "audit-ts")
# The counts a run reports beside the findings per kind: records it read without any audit
# header, and with audit headers it could not decode.
RECORD_COUNTS = ("records_without_headers", "records_malformed_headers")


def _header_values(name: str) -> Column:
    """Every value of header `name` as text; an empty array when the record has none."""
    matches = F.filter(F.coalesce(F.col("headers"), F.array()), lambda h: h["key"] == F.lit(name))
    return F.transform(matches, lambda h: h["value"].cast("string"))


# Contract version 2: one binary `audit` header (auditor.probes.headers.AUDIT_V2: a version
# byte 2, the session's 16 bytes, seq and produce time as unsigned 64-bit big-endian).
AUDIT_V2_HEADER = "audit"
AUDIT_V2_SIZE = 33


def _audit_v2_values() -> Column:
    matches = F.filter(F.coalesce(F.col("headers"), F.array()), lambda h: h["key"] == F.lit(AUDIT_V2_HEADER))
    return F.transform(matches, lambda h: h["value"])


def _v2_valid(v2: Column) -> Column:
    """v2: the values of the record's `audit` headers (binary)."""
    value = F.get(v2, 0)
    return (
        (F.size(F.array_distinct(v2)) == 1)
        & (F.length(value) >= AUDIT_V2_SIZE)
        & (F.substring(value, 1, 1) == F.lit(bytearray(b"\x02")))
    )


def _session_of(v2: Column, pids: Column) -> Column:
    """v2: `audit` header values; pids: `audit-pid` header values (text)."""
    session = F.lower(F.hex(F.substring(F.get(v2, 0), 2, 16)))
    return F.when(F.size(v2) > 0, F.when(_v2_valid(v2), session)).otherwise(F.get(pids, 0))


def _seq_of(v2: Column, seqs: Column) -> Column:
    """v2: `audit` header values; seqs: `audit-seq` header values (text)."""
    seq = F.conv(F.hex(F.substring(F.get(v2, 0), 18, 8)), 16, 10).try_cast("long")
    return F.when(F.size(v2) > 0, F.when(_v2_valid(v2), seq)).otherwise(F.get(seqs, 0).try_cast("long"))


def audit_session() -> Column:
    """The producer session of a record: from a valid `audit` header (v2), else `audit-pid`."""
    return _session_of(_audit_v2_values(), _header_values("audit-pid"))


def audit_seq() -> Column:
    """The record's sequence: from a valid `audit` header (v2), else `audit-seq` (long or null)."""
    return _seq_of(_audit_v2_values(), _header_values("audit-seq"))


def audit_header_status() -> Column:
    """`ok`, `missing` (no audit header of either version) or `malformed`: an `audit` header
    (v2) repeated with different values, shorter than 33 bytes or of another version; else (v1)
    with the rules of auditor.probes.headers.parse_audit_headers: each of the four present,
    repeated only with one value, audit-id non-empty, audit-pid 32 lowercase hex digits,
    audit-seq and audit-ts decimal (audit-seq within a 64-bit integer)."""
    return _header_status_of(_audit_v2_values(), {name: _header_values(name) for name in AUDIT_HEADERS})


def _header_status_of(v2: Column, values: dict[str, Column]) -> Column:
    """audit_header_status from the values of `audit` and of each of AUDIT_HEADERS."""
    present = [F.size(v) > 0 for v in values.values()]
    single = [F.size(F.array_distinct(v)) == 1 for v in values.values()]
    first = {name: F.get(v, 0) for name, v in values.items()}
    decodable = [
        F.length(first["audit-id"]) > 0,
        first["audit-pid"].rlike("^[0-9a-f]{32}$"),
        first["audit-seq"].rlike("^[0-9]{1,19}$") & first["audit-seq"].try_cast("long").isNotNull(),
        first["audit-ts"].rlike("^[0-9]{1,20}$"),
    ]
    none_present = ~_any(present)
    valid = F.coalesce(_all([*single, *decodable]), F.lit(False))
    return (
        F.when(F.size(v2) > 0, F.when(_v2_valid(v2), F.lit(HEADERS_OK)).otherwise(F.lit(HEADERS_MALFORMED)))
        .when(none_present, F.lit(HEADERS_MISSING))
        .when(valid, F.lit(HEADERS_OK))
        .otherwise(F.lit(HEADERS_MALFORMED))
    )


def _any(conditions: Sequence[Column]) -> Column:
    result = conditions[0]
    for condition in conditions[1:]:
        result = result | condition
    return result


def _all(conditions: Sequence[Column]) -> Column:
    result = conditions[0]
    for condition in conditions[1:]:
        result = result & condition
    return result


def transform_records(raw: DataFrame, record_key: RecordKeySpec) -> DataFrame:
    """Kafka source rows → RECORD_SCHEMA (key by the binding's rule, audit headers) plus
    `header_status` (audit_header_status), which a run counts and the state does not keep.

    Undecodable audit headers still become nulls here (such a record is audited by key
    only), but they are counted, never silently dropped.
    """
    # The headers are searched once per audit header name (a projection of its own: each
    # array is used several times below, and Spark keeps a non-trivial expression used more
    # than once in its own projection), not once per use.
    found = raw.select(
        record_key_expression(record_key).alias("key"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"),
        F.col("timestamp"),
        _audit_v2_values().alias("_v2"),
        *[_header_values(name).alias(f"_{name}") for name in AUDIT_HEADERS],
    )
    v2 = F.col("_v2")
    values = {name: F.col(f"_{name}") for name in AUDIT_HEADERS}
    return found.select(
        "key",
        "partition",
        "offset",
        "timestamp",
        _session_of(v2, values["audit-pid"]).alias("session"),
        _seq_of(v2, values["audit-seq"]).alias("seq"),
        _header_status_of(v2, values).alias("header_status"),
    )


def header_problem_counts() -> list[Column]:
    """Aggregates over transform_records output, named as in RECORD_COUNTS."""
    status = F.col("header_status")
    return [
        F.count(F.when(status == HEADERS_MISSING, 1)).alias("records_without_headers"),
        F.count(F.when(status == HEADERS_MALFORMED, 1)).alias("records_malformed_headers"),
    ]


def transform_source_rows(raw: DataFrame, key_column: str, created_column: str) -> DataFrame:
    """Source table rows → SOURCE_ROW_SCHEMA; one row per key (earliest created wins)."""
    rows = raw.select(
        F.col(key_column).cast("string").alias("key"), F.col(created_column).cast("timestamp").alias("created")
    ).where(F.col("key").isNotNull())
    return rows.groupBy("key").agg(F.min("created").alias("created"))


def transform_aborted(uncommitted: DataFrame, committed_positions: DataFrame) -> DataFrame:
    """Records read with read_uncommitted that read_committed did not return: aborted."""
    return uncommitted.join(committed_positions.select("partition", "offset"), ["partition", "offset"], "left_anti")


def _parse_ledger(raw: DataFrame) -> DataFrame:
    return raw.select(F.from_json(F.col("value").cast("string"), _LEDGER_JSON_SCHEMA).alias("m")).select("m.*")


def _delivery_status(status: Column, offset: Column) -> Column:
    """auditor.probes.codec.delivery_status: an `acked` entry without an offset (older probes
    under acks=0) is `unconfirmed`, never broker-acked."""
    return F.when((status == F.lit("acked")) & (F.coalesce(offset, F.lit(-1)) < 0), F.lit("unconfirmed")).otherwise(
        status
    )


def transform_producer_ledger(raw: DataFrame, topic: str) -> tuple[DataFrame, DataFrame]:
    """Producer-ledger records → (entries for `topic` in LEDGER_ENTRY_SCHEMA, bounds per session).

    The bound of a session is the last sequence it ledgered for the topic (entries and a
    clean session-end's last_seq); gaps are never inferred past it. Statuses are `acked`
    (with an offset), `unconfirmed` (sent with acks=0) or `failed`.
    """
    parsed = _parse_ledger(raw)
    batches = parsed.where((F.col("type") == "batch") & (F.col("topic") == topic))
    entries = batches.select(F.col("pid").alias("session"), F.explode("entries").alias("e")).select(
        "session",
        F.get(F.col("e"), 0).try_cast("long").alias("seq"),
        F.get(F.col("e"), 1).alias("status"),
        F.get(F.col("e"), 2).try_cast("int").alias("partition"),
        F.get(F.col("e"), 3).try_cast("long").alias("offset"),
        F.get(F.col("e"), 4).alias("error"),
        F.get(F.col("e"), 5).alias("persisted"),
        F.get(F.col("e"), 6).alias("audit_id"),
        F.get(F.col("e"), 7).try_cast("long").alias("ts_ms"),
    )
    entries = entries.where(F.col("seq").isNotNull() & F.col("session").isNotNull()).withColumn(
        "status", _delivery_status(F.col("status"), F.col("offset"))
    )
    # v2 range records, one entry per sequence: acked without a position (`acked-range`), or
    # sent and never confirmed (`sent`: acks=0, or the unresolved tail a crash leaves).
    ranges = parsed.where((F.col("type") == "ranges") & (F.col("topic") == topic)).select(
        F.col("pid").alias("session"), F.explode("entries").alias("e")
    )
    ranged = ranges.select(
        "session",
        F.explode(F.sequence(F.get(F.col("e"), 0).try_cast("long"), F.get(F.col("e"), 1).try_cast("long"))).alias(
            "seq"
        ),
        F.when(F.get(F.col("e"), 2) == F.lit("acked"), F.lit(ACKED_RANGE)).otherwise(F.lit(SENT)).alias("status"),
        F.lit(-1).alias("partition"),
        F.lit(-1).cast("long").alias("offset"),
        F.get(F.col("e"), 3).try_cast("long").alias("ts_ms"),
        F.get(F.col("e"), 4).try_cast("long").alias("to_ms"),
    )
    entries = conform(entries, LEDGER_ENTRY_SCHEMA).unionByName(
        conform(ranged.where(F.col("session").isNotNull() & F.col("seq").isNotNull()), LEDGER_ENTRY_SCHEMA)
    )
    ends = parsed.where(F.col("type") == "session-end").select(
        F.col("pid").alias("session"), F.col("last_seq")[topic].alias("last_seq")
    )
    bounds = (
        entries.select("session", F.col("seq").alias("last_seq"))
        .unionByName(ends.where(F.col("last_seq").isNotNull()))
        .groupBy("session")
        .agg(F.max("last_seq").alias("last_seq"))
    )
    keyed = transform_producer_keys(parsed, topic)
    return (
        attach_keys(conform(entries, LEDGER_ENTRY_SCHEMA).unionByName(keyed)),
        conform(bounds, LEDGER_BOUND_SCHEMA),
    )


def transform_producer_keys(parsed: DataFrame, topic: str) -> DataFrame:
    """v2 `keys` records of `topic` → one KEYED entry (LEDGER_ENTRY_SCHEMA) per sequence with an
    audit id, with the window it was produced in (ts_ms..to_ms)."""
    runs = (
        parsed.where((F.col("type") == "keys") & (F.col("topic") == topic))
        .select(F.col("pid").alias("session"), F.explode("entries").alias("e"))
        .select(
            "session",
            F.get(F.col("e"), 0).try_cast("long").alias("first"),
            F.from_json(F.get(F.col("e"), 1), "array<string>").alias("keys"),
            F.get(F.col("e"), 2).try_cast("long").alias("ts_ms"),
            F.get(F.col("e"), 3).try_cast("long").alias("to_ms"),
        )
    )
    # explode, not posexplode: the optimizer prunes an explode of nothing (local_frame).
    positioned = F.transform("keys", lambda key, pos: F.struct(pos.alias("pos"), key.alias("audit_id")))
    keyed = runs.select("session", "first", "ts_ms", "to_ms", F.explode(positioned).alias("k")).select(
        "session",
        (F.col("first") + F.col("k.pos")).alias("seq"),
        F.lit(KEYED).alias("status"),
        F.lit(-1).alias("partition"),
        F.lit(-1).cast("long").alias("offset"),
        F.col("k.audit_id").alias("audit_id"),
        "ts_ms",
        "to_ms",
    )
    return conform(
        keyed.where(F.col("session").isNotNull() & F.col("first").isNotNull() & F.col("audit_id").isNotNull()),
        LEDGER_ENTRY_SCHEMA,
    )


def attach_keys(entries: DataFrame) -> DataFrame:
    """Entries (LEDGER_ENTRY_SCHEMA, KEYED ones among them) with each v2 range entry given the
    audit id and the produce window of its (session, seq) from a KEYED entry; KEYED entries
    stay (a later run's ranges take their key from them)."""
    keys = entries.where(F.col("status") == KEYED).select(
        "session",
        "seq",
        F.col("audit_id").alias("_key"),
        F.col("ts_ms").alias("_key_from"),
        F.col("to_ms").alias("_key_to"),
    )
    keys = keys.dropDuplicates(["session", "seq"])
    ranged = F.col("status").isin(ACKED_RANGE, SENT)
    joined = entries.join(keys, ["session", "seq"], "left")
    return conform(
        joined.select(
            *[c for c in entries.columns if c not in ("audit_id", "ts_ms", "to_ms")],
            F.when(ranged, F.coalesce("_key", "audit_id")).otherwise(F.col("audit_id")).alias("audit_id"),
            F.when(ranged & F.col("_key").isNotNull(), F.col("_key_from")).otherwise(F.col("ts_ms")).alias("ts_ms"),
            F.when(ranged & F.col("_key").isNotNull(), F.col("_key_to")).otherwise(F.col("to_ms")).alias("to_ms"),
        ),
        LEDGER_ENTRY_SCHEMA,
    )


def transform_producer_failures(raw: DataFrame, topic: str) -> DataFrame:
    """v2 failure records of `topic` → LEDGER_ENTRY_SCHEMA, status `failed`, keyed by audit_id.

    A failure report names no sequence (confluent-kafka hands it without headers): `seq` is
    the first of the window it may belong to, which the range records ledger unconfirmed.
    For look-ups by key (stuck items), never for sequence gaps.
    """
    parsed = _parse_ledger(raw).where((F.col("type") == "failures") & (F.col("topic") == topic))
    failures = parsed.select(F.col("pid").alias("session"), F.explode("entries").alias("e")).select(
        "session",
        F.get(F.col("e"), 0).try_cast("long").alias("seq"),
        F.lit("failed").alias("status"),
        F.get(F.col("e"), 2).try_cast("int").alias("partition"),
        F.lit(-1).cast("long").alias("offset"),
        F.get(F.col("e"), 3).alias("error"),
        F.get(F.col("e"), 4).alias("persisted"),
        F.get(F.col("e"), 5).alias("audit_id"),
        F.get(F.col("e"), 6).try_cast("long").alias("ts_ms"),
    )
    return conform(failures, LEDGER_ENTRY_SCHEMA)


def transform_consumer_ledger(raw: DataFrame, topic: str, groups: Iterable[str]) -> DataFrame:
    """Consumer-ledger `processed` records → PROCESSED_SCHEMA for `topic` and the binding's groups."""
    parsed = _parse_ledger(raw).where((F.col("type") == "processed") & F.col("group").isin(list(groups)))
    entries = parsed.select("group", F.col("sid").alias("consumer_session"), F.explode("entries").alias("e")).select(
        "group",
        "consumer_session",
        F.get(F.col("e"), 0).alias("topic"),
        F.get(F.col("e"), 1).try_cast("int").alias("partition"),
        F.get(F.col("e"), 2).try_cast("long").alias("offset"),
        F.get(F.col("e"), 3).alias("audit_id"),
        F.get(F.col("e"), 4).try_cast("long").alias("ts_ms"),
    )
    marks = conform(entries.where((F.col("topic") == topic) & F.col("offset").isNotNull()), PROCESSED_SCHEMA)
    # v2: ranges of consecutive offsets, one row per offset.
    ranged = (
        _parse_ledger(raw)
        .where((F.col("type") == "processed-ranges") & F.col("group").isin(list(groups)))
        .select("group", F.col("sid").alias("consumer_session"), F.explode("entries").alias("e"))
        .where(F.get(F.col("e"), 0) == F.lit(topic))
        .select(
            "group",
            "consumer_session",
            F.get(F.col("e"), 1).try_cast("int").alias("partition"),
            F.explode(F.sequence(F.get(F.col("e"), 2).try_cast("long"), F.get(F.col("e"), 3).try_cast("long"))).alias(
                "offset"
            ),
            F.get(F.col("e"), 4).try_cast("long").alias("ts_ms"),
        )
    )
    return marks.unionByName(conform(ranged.where(F.col("offset").isNotNull()), PROCESSED_SCHEMA))


# ------------------------------------------------------------------ state updates ----


def transform_key_stats(records: DataFrame) -> DataFrame:
    """Per key of this run's records: `n` and `first` (the record at the lowest partition,
    offset). The one shuffle of the records by key that the state updates share (pass it as
    `key_stats`; each computes it itself when not given)."""
    first = F.min(F.struct("partition", "offset", "timestamp", "session", "seq")).alias("first")
    return records.where(F.col("key").isNotNull()).groupBy("key").agg(F.count("*").alias("n"), first)


def _stats(records: DataFrame, key_stats: DataFrame | None) -> DataFrame:
    return key_stats if key_stats is not None else transform_key_stats(records)


def transform_key_delta(records: DataFrame, run_id: str, key_stats: DataFrame | None = None) -> DataFrame:
    """This run's per-key index delta: count and first record (lowest partition, offset)."""
    return _stats(records, key_stats).select("key", "n", "first.*", F.lit(run_id).alias("run_id"))


def transform_rebuild_memory(
    old_index: DataFrame, records: DataFrame, lows: DataFrame, rewritten: Sequence[int], run_id: str
) -> tuple[DataFrame, DataFrame]:
    """What a rebuild keeps of the key index when offsets already read were rewritten.

    A rebuild reads every partition again from its log start. Of the earlier index it keeps
    (1) entries below the log start: seen by an earlier run, deleted since (retention), still
    delivered; (2) as lost sightings, entries of the rewritten partitions at offsets the log
    still covers whose key is no longer at that offset: the broker lost them.

    lows: partition, low (the log start of each partition).
    """
    indexed = conform(old_index, KEY_INDEX_SCHEMA).join(lows.select("partition", "low"), "partition", "left")
    below = F.col("offset") < F.coalesce(F.col("low"), F.lit(0))
    carried = indexed.where(below)
    covered = indexed.where(~below & F.col("partition").isin(list(rewritten)))
    still_there = records.where(F.col("key").isNotNull()).select("key", "partition", "offset")
    lost = covered.join(still_there, ["key", "partition", "offset"], "left_anti").withColumn(
        "detected_run", F.lit(run_id)
    )
    return conform(carried, KEY_INDEX_SCHEMA), conform(lost, LOST_SIGHTING_SCHEMA)


def transform_lost_sightings(old_lost: DataFrame, new_lost: DataFrame, records: DataFrame) -> DataFrame:
    """Lost sightings so far, less keys this run found a record of after all."""
    found = records.where(F.col("key").isNotNull()).select("key").distinct()
    lost = conform(old_lost, LOST_SIGHTING_SCHEMA).unionByName(conform(new_lost, LOST_SIGHTING_SCHEMA))
    return lost.join(found, "key", "left_anti")


def _maybe_broadcast(df: DataFrame, hint: bool) -> DataFrame:
    return F.broadcast(df) if hint else df


def transform_duplicate_records(
    new_records: DataFrame,
    old_index: DataFrame,
    old_duplicates: DataFrame,
    broadcast_new: bool = False,
    key_stats: DataFrame | None = None,
) -> DataFrame:
    """Every record of every key seen more than once so far (RECORD_SCHEMA).

    old_index: all key-index deltas of earlier runs; only entries of keys in this run are
    touched (a semi-join), so the cost follows the new data.
    """
    keyed = new_records.where(F.col("key").isNotNull())
    new_counts = _stats(new_records, key_stats).select("key", F.col("n").alias("n_new"))
    touched = old_index.join(_maybe_broadcast(new_counts.select("key"), broadcast_new), "key", "left_semi")
    old_counts = touched.groupBy("key").agg(
        F.sum("n").alias("n_old"), F.min(F.struct("partition", "offset", "timestamp", "session", "seq")).alias("first")
    )
    counts = new_counts.join(old_counts, "key", "left")
    duplicated = counts.where(F.col("n_new") + F.coalesce(F.col("n_old"), F.lit(0)) > 1)
    added_new = keyed.join(duplicated.select("key"), "key", "left_semi")
    # A key seen exactly once before is not in old_duplicates yet: bring its first record.
    added_old = duplicated.where(F.col("n_old") == 1).select("key", "first.*")
    return (
        conform(old_duplicates, RECORD_SCHEMA)
        .unionByName(conform(added_new, RECORD_SCHEMA))
        .unionByName(conform(added_old, RECORD_SCHEMA))
    )


def transform_new_source_rows(new_rows: DataFrame, old_source: DataFrame, broadcast_new: bool = False) -> DataFrame:
    """Rows of this window not already known (windows overlap by the look-back)."""
    known = old_source.join(_maybe_broadcast(new_rows.select("key"), broadcast_new), "key", "left_semi")
    return new_rows.join(known.select("key"), "key", "left_anti")


def transform_pending_source(
    old_pending: DataFrame,
    new_source: DataFrame,
    new_records: DataFrame,
    old_index: DataFrame,
    broadcast_new: bool = False,
    key_stats: DataFrame | None = None,
) -> DataFrame:
    """Source rows with no record so far (SOURCE_ROW_SCHEMA); `missing` once past grace."""
    new_keys = _stats(new_records, key_stats).select("key")
    earlier = old_index.select("key").join(
        _maybe_broadcast(new_source.select("key"), broadcast_new), "key", "left_semi"
    )
    matched = new_keys.unionByName(earlier)
    pending = conform(old_pending, SOURCE_ROW_SCHEMA).unionByName(conform(new_source, SOURCE_ROW_SCHEMA))
    return pending.join(matched, "key", "left_anti")


def transform_orphan_candidates(
    old_candidates: DataFrame,
    new_records: DataFrame,
    old_source: DataFrame,
    new_source: DataFrame,
    broadcast_new: bool = False,
    key_stats: DataFrame | None = None,
) -> DataFrame:
    """Records whose key has no source row so far, or no key at all (RECORD_SCHEMA)."""
    new_keys = _stats(new_records, key_stats).select("key")
    known = old_source.select("key").join(_maybe_broadcast(new_keys, broadcast_new), "key", "left_semi")
    known = known.unionByName(new_source.select("key"))
    # Orphan keys are few: find them among the keys, then their records (a record whose key
    # cannot be found is always an orphan).
    orphan_keys = new_keys.join(known, "key", "left_anti")
    fresh = new_records.where(F.col("key").isNull()).unionByName(new_records.join(orphan_keys, "key", "left_semi"))
    kept = old_candidates.join(new_source.select("key"), "key", "left_anti")
    return conform(kept, RECORD_SCHEMA).unionByName(conform(fresh, RECORD_SCHEMA))


def transform_seq_coverage(old_coverage: DataFrame, records: DataFrame) -> DataFrame:
    """Merged intervals of audit-seq values seen per producer session (INTERVAL_SCHEMA)."""
    new_intervals = values_to_intervals(records.where(F.col("session").isNotNull()), ["session"], "seq")
    return conform(
        merge_intervals(conform(old_coverage, INTERVAL_SCHEMA).unionByName(new_intervals), ["session"]), INTERVAL_SCHEMA
    )


def transform_ledger_open(old_open: DataFrame, new_entries: DataFrame, coverage: DataFrame) -> DataFrame:
    """Ledger entries whose sequence is not (yet) in the topic: the only ones a gap needs.

    One entry per (session, seq), the strongest: `acked` > `unconfirmed` > `failed` (v1;
    merged ledgers can disagree) > `acked-range` > `sent` (v2: a resolved range overrides the
    unresolved tail written before it).
    """
    entries = conform(old_open, LEDGER_ENTRY_SCHEMA).unionByName(conform(new_entries, LEDGER_ENTRY_SCHEMA))
    rank = (
        F.when(F.col("status") == "acked", 5)
        .when(F.col("status") == "unconfirmed", 4)
        .when(F.col("status") == "failed", 3)
        .when(F.col("status") == ACKED_RANGE, 2)
        .when(F.col("status") == SENT, 1)
        .otherwise(0)
    )
    # v2: the key of a (session, seq) may be on another entry than the strongest (a KEYED one,
    # or the tail's `sent` entry a later `acked-range` one supersedes): it is kept.
    keyed = F.col("status").isin(KEYED, ACKED_RANGE, SENT) & F.col("audit_id").isNotNull()
    best = entries.groupBy("session", "seq").agg(
        F.max_by(F.struct(*entries.columns), rank).alias("e"),
        F.max_by(F.struct("audit_id", "ts_ms", "to_ms"), F.when(keyed, 1).otherwise(0)).alias("k"),
    )
    fill = F.col("e.status").isin(ACKED_RANGE, SENT) & F.col("e.audit_id").isNull() & F.col("k.audit_id").isNotNull()
    best = best.select(
        *[
            F.when(fill, F.col(f"k.{name}")).otherwise(F.col(f"e.{name}")).alias(name)
            if name in ("audit_id", "ts_ms", "to_ms")
            else F.col(f"e.{name}")
            for name in entries.columns
        ]
    )
    return conform(_range_anti(best, coverage, ["session"], "seq"), LEDGER_ENTRY_SCHEMA)


def transform_ledger_bounds(old_bounds: DataFrame, new_bounds: DataFrame) -> DataFrame:
    union = conform(old_bounds, LEDGER_BOUND_SCHEMA).unionByName(conform(new_bounds, LEDGER_BOUND_SCHEMA))
    return union.groupBy("session").agg(F.max("last_seq").alias("last_seq"))


def transform_processed_coverage(old_coverage: DataFrame, processed: DataFrame) -> DataFrame:
    """Merged intervals of processed offsets per (group, partition)."""
    new_intervals = values_to_intervals(processed, ["group", "partition"], "offset")
    merged = merge_intervals(
        conform(old_coverage, PROCESSED_INTERVAL_SCHEMA).unionByName(conform(new_intervals, PROCESSED_INTERVAL_SCHEMA)),
        ["group", "partition"],
    )
    return conform(merged, PROCESSED_INTERVAL_SCHEMA)


def transform_reprocessed(
    old_reprocessed: DataFrame,
    old_coverage: DataFrame,
    processed: DataFrame,
    records: DataFrame | None = None,
    old_candidates: DataFrame | None = None,
) -> DataFrame:
    """Offsets a group processed more than once so far (REPROCESSED_SCHEMA).

    v2 marks are offset ranges without keys: the key of such an offset is taken from this
    run's `records` (RECORD_SCHEMA) or, for a record an earlier run read, from the group's
    `old_candidates` (CANDIDATE_SCHEMA: records it had not processed yet)."""
    keys = ["group", "partition", "offset"]
    if records is not None or old_candidates is not None:
        found: DataFrame | None = None
        if records is not None:
            found = processed.join(
                records.where(F.col("key").isNotNull()).select("partition", "offset", F.col("key").alias("_r")),
                ["partition", "offset"],
                "left",
            )
        base = found if found is not None else processed.withColumn("_r", F.lit(None).cast("string"))
        if old_candidates is not None:
            candidates = conform(old_candidates, CANDIDATE_SCHEMA).select(*keys, F.col("key").alias("_c"))
            base = base.join(candidates, keys, "left")
        else:
            base = base.withColumn("_c", F.lit(None).cast("string"))
        processed = base.withColumn("audit_id", F.coalesce("audit_id", "_r", "_c")).drop("_r", "_c")
    new_counts = processed.groupBy(*keys).agg(
        F.count("*").alias("n_new"),
        F.array_sort(F.collect_set("consumer_session")).alias("new_sessions"),
        F.max("audit_id").alias("new_audit_id"),
        F.min("ts_ms").alias("new_first"),
        F.max("ts_ms").alias("new_last"),
    )
    seen_before = _range_semi(new_counts.select(*keys), old_coverage, ["group", "partition"], "offset").withColumn(
        "_seen", F.lit(1)
    )
    old = conform(old_reprocessed, REPROCESSED_SCHEMA)
    combined = new_counts.join(seen_before, keys, "left").join(old, keys, "left")
    prior = F.coalesce(F.col("count"), F.col("_seen").cast("long"), F.lit(0).cast("long"))
    updated = combined.where(F.col("n_new") + prior > 1).select(
        *keys,
        (F.col("n_new") + prior).alias("count"),
        F.array_sort(
            F.array_distinct(F.concat(F.coalesce("consumer_sessions", F.array().cast("array<string>")), "new_sessions"))
        ).alias("consumer_sessions"),
        F.coalesce("audit_id", "new_audit_id").alias("audit_id"),
        F.least("first_ms", "new_first").alias("first_ms"),
        F.greatest("last_ms", "new_last").alias("last_ms"),
    )
    untouched = old.join(new_counts.select(*keys), keys, "left_anti")
    return conform(untouched, REPROCESSED_SCHEMA).unionByName(conform(updated, REPROCESSED_SCHEMA))


def transform_unprocessed_candidates(
    old_candidates: DataFrame,
    new_records: DataFrame,
    processed_coverage: DataFrame,
    groups: DataFrame,
    committed: DataFrame,
) -> DataFrame:
    """Records each of the binding's groups has not (yet) marked processed (CANDIDATE_SCHEMA).

    groups: the binding's consumer groups (one column `group`). A group whose consumer
    ledger has no entry yet keeps only records it has not committed past: a ledger that
    appears later cannot speak for records consumed before it existed, and this bounds the
    state to the group's lag.
    """
    fresh = groups.select("group").distinct().crossJoin(conform(new_records, RECORD_SCHEMA))
    candidates = conform(old_candidates, CANDIDATE_SCHEMA).unionByName(conform(fresh, CANDIDATE_SCHEMA))
    open_candidates = _range_anti(candidates, processed_coverage, ["group", "partition"], "offset")
    ledgered = processed_coverage.select("group").distinct().withColumn("_ledgered", F.lit(True))
    judged = open_candidates.join(ledgered, "group", "left").join(committed, ["group", "partition"], "left")
    keep = F.col("_ledgered").isNotNull() | F.col("committed").isNull() | (F.col("offset") >= F.col("committed"))
    return conform(judged.where(keep), CANDIDATE_SCHEMA)


# ------------------------------------------------------------------ findings ---------


def _finding(df: DataFrame, kind: str, **columns: Column) -> DataFrame:
    selected = df.select(*[col.alias(name) for name, col in columns.items()]).withColumn("kind", F.lit(kind))
    return conform(selected, FINDING_SCHEMA)


def _first_sighting(lost_sightings: DataFrame) -> DataFrame:
    """key, _seen: the earliest lost sighting of each key."""
    seen = F.struct("partition", "offset", "timestamp", "session", "seq", "run_id", "detected_run")
    return lost_sightings.groupBy("key").agg(F.min(seen).alias("_seen"))


def find_missing(
    pending: DataFrame,
    cutoff: datetime,
    unverifiable_until: datetime | None,
    lost_sightings: DataFrame | None = None,
) -> DataFrame:
    """Source rows older than the grace cutoff with no record, except the unverifiable ones.

    A row whose record an earlier run saw at an offset that now holds another record (or
    lies past the log end) is missing with cause `broker-lost`, naming where and which run
    saw it: that is known, not unverifiable.
    """
    if lost_sightings is None:
        lost_sightings = empty_frame(pending.sparkSession, LOST_SIGHTING_SCHEMA)
    late = pending.where(F.col("created") <= F.lit(cutoff)).join(_first_sighting(lost_sightings), "key", "left")
    seen = F.col("_seen")
    if unverifiable_until is not None:
        late = late.where((F.col("created") > F.lit(unverifiable_until)) | seen.isNotNull())
    evidence = F.struct(
        F.unix_millis("created").alias("created_ms"),
        F.when(
            seen.isNotNull(),
            F.struct(
                seen["partition"].alias("partition"),
                seen["offset"].alias("offset"),
                F.unix_millis(seen["timestamp"]).alias("ts_ms"),
                seen["session"].alias("session"),
                seen["seq"].alias("seq"),
                seen["run_id"].alias("run_id"),
                seen["detected_run"].alias("detected_run"),
            ),
        ).alias("seen"),
    )
    return _finding(
        late,
        "missing",
        key=F.col("key"),
        cause=F.when(seen.isNotNull(), F.lit("broker-lost")),
        partition=seen["partition"],
        offset=seen["offset"],
        timestamp=F.col("created"),
        evidence=F.to_json(evidence),
    )


def unverifiable_rows(
    pending: DataFrame,
    cutoff: datetime,
    unverifiable_until: datetime | None,
    lost_sightings: DataFrame | None = None,
) -> DataFrame:
    """Rows past grace with no record that may have had one among records deleted unread.

    unverifiable_until: the newest `created` whose record may have been deleted before it
    was read (None: nothing was lost). These rows are counted, never reported `missing`.
    Rows with a lost sighting are known lost (find_missing), not unverifiable.
    """
    if unverifiable_until is None:
        return pending.limit(0)
    rows = pending.where((F.col("created") <= F.lit(cutoff)) & (F.col("created") <= F.lit(unverifiable_until)))
    return rows if lost_sightings is None else rows.join(lost_sightings.select("key"), "key", "left_anti")


def _occurrence_findings(grouped: DataFrame, kind: str, cause: Column) -> DataFrame:
    """grouped: key, occ (sorted array of occurrences) → one finding per row."""
    first = F.get(F.col("occ"), 0)
    return _finding(
        grouped,
        kind,
        key=F.col("key"),
        cause=cause,
        partition=first["partition"],
        offset=first["offset"],
        offsets=F.transform("occ", lambda o: F.struct(o["partition"].alias("partition"), o["offset"].alias("offset"))),
        timestamp=_ms_to_ts(first["ts_ms"]),
        session=first["session"],
        seq=first["seq"],
        evidence=F.to_json(F.struct(F.size("occ").alias("count"), F.col("occ").alias("records"))),
    )


def find_orphans(candidates: DataFrame, cutoff: datetime) -> DataFrame:
    """Records whose key has no source row (cause `no-key` when no key could be found)."""
    old_enough = candidates.where(F.col("timestamp") <= F.lit(cutoff))
    with_key = (
        old_enough.where(F.col("key").isNotNull())
        .groupBy("key")
        .agg(F.array_sort(F.collect_list(_occurrence())).alias("occ"))
    )
    keyed = _occurrence_findings(with_key, "orphan", F.lit(None).cast("string"))
    keyless = old_enough.where(F.col("key").isNull()).select("key", F.array(_occurrence()).alias("occ"))
    return keyed.unionByName(_occurrence_findings(keyless, "orphan", F.lit("no-key")))


def find_duplicates(duplicates: DataFrame) -> DataFrame:
    """Keys with several records, one finding per cause.

    producer-retry: one (session, seq) at several offsets; app-resend: several distinct
    (session, seq) for the key; unknown: records without audit headers among them.
    """
    headered = duplicates.where(F.col("session").isNotNull() & F.col("seq").isNotNull())
    retried = (
        headered.groupBy("key", "session", "seq")
        .agg(F.count("*").alias("n"), F.array_sort(F.collect_list(_occurrence())).alias("occ"))
        .where(F.col("n") > 1)
    )
    per_key = duplicates.groupBy("key").agg(
        F.count("*").alias("n"),
        F.count_distinct(
            F.when(F.col("session").isNotNull() & F.col("seq").isNotNull(), F.struct("session", "seq"))
        ).alias("distinct_sends"),
        F.sum(F.when(F.col("session").isNull() | F.col("seq").isNull(), 1).otherwise(0)).alias("headerless"),
        F.array_sort(F.collect_list(_occurrence())).alias("occ"),
    )
    resent = per_key.where(F.col("distinct_sends") > 1).select(
        "key", F.filter("occ", lambda o: o["session"].isNotNull() & o["seq"].isNotNull()).alias("occ")
    )
    unexplained = per_key.where((F.col("headerless") > 0) & (F.col("n") > 1)).select("key", "occ")
    return (
        _occurrence_findings(retried.select("key", "occ"), "duplicate", F.lit("producer-retry"))
        .unionByName(_occurrence_findings(resent, "duplicate", F.lit("app-resend")))
        .unionByName(_occurrence_findings(unexplained, "duplicate", F.lit("unknown")))
    )


def find_gaps(
    coverage: DataFrame,
    ledger_open: DataFrame,
    bounds: DataFrame,
    watermarks: DataFrame,
    *,
    unverifiable_until: datetime | None = None,
    delivered_keys: DataFrame | None = None,
) -> DataFrame:
    """Holes in producer sessions' sequences up to each session's last ledgered seq.

    A hole seq with a `failed` ledger entry → send-failed; with an `acked` entry → broker-lost;
    with an `unconfirmed` one (acks=0: the broker never confirmed it) → send-unconfirmed, a
    send that may have been dropped, never broker-lost; no entry → never-sent, reported as one finding per contiguous range. An acked entry whose
    offset is below the partition's log start (expired by retention) or not yet read by this
    run (at or past `end`, e.g. in an open transaction) counts as present and is not reported.

    v2 ranges: `acked-range` (acked, position unknown) → broker-lost, unless it may have been
    produced before `unverifiable_until` (its range's `ts_ms`, the earliest produce time,
    is not after it: possibly deleted before any run read it); `sent` → send-unconfirmed. A
    range is ledgered only once resolved, after the ledger end this run read was taken and
    so before the topic's end offsets were: a resolved record is below `end`.

    `delivered_keys` (column `key`: keys with a record in the topic, any run): a failed or
    unconfirmed send whose item another send delivered (the application sent it again) is no
    gap: the item was produced, and the re-send shows as its own record (a duplicate when both
    landed). A lost acked record stays broker-lost: the broker lost it whatever the item's fate.
    """
    marks = watermarks.select("partition", F.col("low").alias("_low"), F.col("end").alias("_end"))
    entries = (
        ledger_open.join(bounds, "session", "inner")
        .where(F.col("seq") <= F.col("last_seq"))
        .join(marks, "partition", "left")
    )
    acked_at = (F.col("status") == "acked") & (F.col("offset") >= 0)
    unverifiable = acked_at & (
        (F.col("offset") < F.coalesce(F.col("_low"), F.lit(0))) | (F.col("offset") >= F.col("_end"))
    )
    if unverifiable_until is not None:
        until_ms = int(unverifiable_until.timestamp() * 1000)
        unverifiable = unverifiable | (
            (F.col("status") == ACKED_RANGE) & (F.coalesce(F.col("ts_ms"), F.lit(0)) <= F.lit(until_ms))
        )
    explained = entries.where(F.col("status").isin("acked", "unconfirmed", "failed", ACKED_RANGE, SENT))
    reported = explained.where(~F.coalesce(unverifiable, F.lit(False)))
    if delivered_keys is not None:
        delivered = delivered_keys.select(F.col("key").alias("_delivered")).distinct()
        resent = F.col("status").isin("failed", "unconfirmed", SENT) & F.col("_delivered").isNotNull()
        reported = (
            reported.join(delivered, reported["audit_id"] == delivered["_delivered"], "left")
            .where(~resent)
            .drop("_delivered")
        )
    ledger_evidence = F.struct(
        F.col("status"), F.col("partition"), F.col("offset"), F.col("error"), F.col("persisted"), F.col("ts_ms")
    )
    known = _finding(
        reported,
        "gap",
        key=F.col("audit_id"),
        cause=F.when(F.col("status") == "failed", F.lit("send-failed"))
        .when(F.col("status").isin("unconfirmed", SENT), F.lit("send-unconfirmed"))
        .otherwise(F.lit("broker-lost")),
        partition=F.when(F.col("partition") >= 0, F.col("partition")),
        offset=F.when(F.col("offset") >= 0, F.col("offset")),
        timestamp=_ms_to_ts(F.col("ts_ms")),
        session=F.col("session"),
        seq=F.col("seq"),
        seq_end=F.col("seq"),
        evidence=F.to_json(F.struct(F.lit(1).alias("count"), ledger_evidence.alias("ledger"))),
    )
    points = explained.select("session", F.col("seq").alias("start"), F.col("seq").alias("end"))
    covered = merge_intervals(conform(coverage, INTERVAL_SCHEMA).unionByName(points), ["session"])
    holes = interval_holes(covered, bounds, ["session"])
    never_sent = _finding(
        holes,
        "gap",
        cause=F.lit("never-sent"),
        session=F.col("session"),
        seq=F.col("start"),
        seq_end=F.col("end"),
        evidence=F.to_json(F.struct((F.col("end") - F.col("start") + 1).alias("count"))),
    )
    return known.unionByName(never_sent)


def find_aborted(aborted: DataFrame) -> DataFrame:
    """Records present only in aborted transactions."""
    return _finding(
        aborted,
        "aborted",
        key=F.col("key"),
        partition=F.col("partition"),
        offset=F.col("offset"),
        timestamp=F.col("timestamp"),
        session=F.col("session"),
        seq=F.col("seq"),
        evidence=F.to_json(F.struct(F.unix_millis("timestamp").alias("ts_ms"))),
    )


def find_unprocessed(candidates: DataFrame, committed: DataFrame, processed_coverage: DataFrame) -> DataFrame:
    """Records below a group's committed offset that the group's ledger never marked processed.

    Only groups that keep a consumer ledger (any processed mark so far) are judged.
    """
    ledgered = processed_coverage.select("group").distinct()
    below = (
        candidates.join(ledgered, "group", "left_semi")
        .join(committed, ["group", "partition"], "inner")
        .where(F.col("offset") < F.col("committed"))
    )
    return _finding(
        below,
        "unprocessed",
        key=F.col("key"),
        partition=F.col("partition"),
        offset=F.col("offset"),
        timestamp=F.col("timestamp"),
        session=F.col("session"),
        seq=F.col("seq"),
        group=F.col("group"),
        evidence=F.to_json(F.struct(F.col("committed").alias("committed_offset"))),
    )


def find_reprocessed(reprocessed: DataFrame) -> DataFrame:
    """Offsets a group processed more than once."""
    return _finding(
        reprocessed,
        "reprocessed",
        key=F.col("audit_id"),
        partition=F.col("partition"),
        offset=F.col("offset"),
        timestamp=_ms_to_ts(F.col("first_ms")),
        group=F.col("group"),
        evidence=F.to_json(F.struct(F.col("count"), F.col("consumer_sessions"), F.col("first_ms"), F.col("last_ms"))),
    )


def union_findings(frames: Iterable[DataFrame]) -> DataFrame:
    result: DataFrame | None = None
    for frame in frames:
        conformed = conform(frame, FINDING_SCHEMA)
        result = conformed if result is None else result.unionByName(conformed)
    if result is None:
        raise ValueError("union_findings needs at least one frame")
    return result
