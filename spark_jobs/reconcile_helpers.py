"""Frame helpers of the reconciliation transforms: conforming to a schema, frames the optimizer
can prove empty, record keys, and interval algebra (range joins, merged intervals, holes).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    StructType,
)

from spark_jobs.binding import RecordKeySpec


def local_frame(spark: SparkSession, rows: Sequence[Any], schema: StructType | str) -> DataFrame:
    """A frame of driver-side rows; with none, one the optimizer knows is empty.

    `createDataFrame([])` is an RDD Spark cannot see into: every join, aggregate and write
    over it runs as if it had rows. An empty local relation (what `limit(0)` becomes) is
    pruned from the plans built on it, so a binding without ledgers, groups or transactions
    pays nothing for them (see is_empty_plan).
    """
    if not rows:
        return empty_frame(spark, schema)
    return spark.createDataFrame(list(rows), schema)


# Empty frames per session and schema: a frame is immutable, and building one costs some 30
# driver calls (~25 ms), 20-40 times in a run.
_EMPTY: weakref.WeakKeyDictionary[SparkSession, dict[str, DataFrame]] = weakref.WeakKeyDictionary()


def empty_frame(spark: SparkSession, schema: StructType | str) -> DataFrame:
    frames = _EMPTY.setdefault(spark, {})
    key = schema if isinstance(schema, str) else schema.json()
    if key not in frames:
        frames[key] = spark.createDataFrame([], schema).limit(0)
    return frames[key]


def is_empty_plan(df: DataFrame) -> bool:
    """True when the optimizer proved `df` has no rows (its plan became an empty local
    relation, see local_frame); decided without running anything. False means "not proven",
    not "has rows"."""
    plan = df._jdf.queryExecution().optimizedPlan()
    return bool(plan.getClass().getSimpleName() == "LocalRelation" and plan.data().isEmpty())


def conform(df: DataFrame, schema: StructType) -> DataFrame:
    """Select and cast `df` to exactly `schema` (missing columns become typed nulls); `df`
    itself when it already has exactly that schema (building the select costs a few driver
    calls per column, ~50 ms a frame)."""
    actual = df.schema
    if _same_columns(actual, schema):
        return df
    present = set(actual.fieldNames())
    # SQL text: one driver call for the whole select, not four per column
    return df.selectExpr(
        *[
            f"CAST({_quoted(f.name) if f.name in present else 'NULL'} AS {f.dataType.simpleString()}) AS {_quoted(f.name)}"
            for f in schema.fields
        ]
    )


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _same_columns(actual: StructType, wanted: StructType) -> bool:
    """Same names, order and types (nullability aside: conform's select would not change it)."""
    return [(f.name, f.dataType) for f in actual.fields] == [(f.name, f.dataType) for f in wanted.fields]


# One well-formed UTF-8 sequence (the Unicode table of well-formed byte sequences: no
# overlong forms, no surrogates, nothing past U+10FFFF), over bytes read as ISO-8859-1 chars.
_CONTINUATION = "[\\x{80}-\\x{BF}]"
_UTF8_SEQUENCE = "|".join(
    (
        "[\\x{00}-\\x{7F}]",
        "[\\x{C2}-\\x{DF}]" + _CONTINUATION,
        "\\x{E0}[\\x{A0}-\\x{BF}]" + _CONTINUATION,
        "[\\x{E1}-\\x{EC}\\x{EE}\\x{EF}]" + _CONTINUATION + "{2}",
        "\\x{ED}[\\x{80}-\\x{9F}]" + _CONTINUATION,
        "\\x{F0}[\\x{90}-\\x{BF}]" + _CONTINUATION + "{2}",
        "[\\x{F1}-\\x{F3}]" + _CONTINUATION + "{3}",
        "\\x{F4}[\\x{80}-\\x{8F}]" + _CONTINUATION + "{2}",
    )
)


def audit_text(raw: Column) -> Column:
    """A binary key or header value as text, exactly as auditor.probes.headers.decode_audit_id
    makes it (UTF-8, every byte outside a well-formed sequence written ``\\xNN``): the form the
    probes' ledgers name ids in. A plain cast would turn such bytes into U+FFFD, so a binary
    key never matched its ledger entries (stop 70).

    Valid UTF-8 (nearly every key) is the cast; only other values walk their bytes."""
    latin = F.decode(raw, "ISO-8859-1")  # one char per byte

    def step(walk: Column, at: Column) -> Column:
        length = F.length(F.regexp_extract(F.substring(latin, at, 4), "^(" + _UTF8_SEQUENCE + ")", 1))
        piece = F.when(length > 0, F.decode(F.substring(raw, at, length), "UTF-8")).otherwise(
            F.format_string("\\x%02x", F.conv(F.hex(F.substring(raw, at, 1)), 16, 10).cast("int"))
        )
        ahead = F.struct((at + F.greatest(length, F.lit(1))).alias("next"), F.concat(walk["text"], piece).alias("text"))
        return F.when(at >= walk["next"], ahead).otherwise(walk)

    start = F.struct(F.lit(1).alias("next"), F.lit("").alias("text"))
    walked = F.aggregate(F.sequence(F.lit(1), F.length(raw)), start, step)["text"]
    as_cast = raw.cast("string")
    return F.when(F.length(raw) == 0, F.lit("")).when(F.is_valid_utf8(as_cast), as_cast).otherwise(walked)


def _header(name: str) -> Column:
    matches = F.filter(F.col("headers"), lambda h: h["key"] == F.lit(name))
    return audit_text(F.get(matches, 0)["value"])


def record_key_expression(spec: RecordKeySpec) -> Column:
    """The Spark expression that finds a record's business key, as a string (binary keys and
    header values in the probes' text form: audit_text)."""
    if spec.source == "key":
        return audit_text(F.col("key"))
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


WORD_BITS = 64


def _set_bits(mask: str) -> Column:
    """The positions (0..63) of the set bits of the long column `mask`, ascending."""
    return F.expr(f"filter(sequence(0, {WORD_BITS - 1}), i -> (shiftrightunsigned(`{mask}`, i) & 1) = 1)")


def values_to_intervals(values: DataFrame, keys: Sequence[str], value: str, bucket_size: int = 4096) -> DataFrame:
    """Distinct integer values per keys → merged [start, end] intervals.

    The values are first folded into 64-bit words (a bit per value, OR-ed together: the
    aggregation runs mostly before the shuffle, so only about one row per 64 values moves,
    duplicates included); each word becomes its runs of set bits. Runs then merge inside
    fixed-size buckets of values (parallel, bounded windows) and across buckets, so one
    long producer session never lands in a single task.
    """
    v = F.col(value).cast("long")
    word = F.floor(v / F.lit(WORD_BITS))
    words = (
        values.where(v.isNotNull())
        .withColumn("_bit", (v - word * WORD_BITS).cast("int"))
        .groupBy(*keys, word.alias("_word"))
        .agg(F.bit_or(F.expr("shiftleft(1L, _bit)")).alias("_m"))
    )
    mask = F.col("_m")
    # A run starts at a set bit whose lower neighbour is clear, and ends at one whose upper
    # neighbour is clear (bit 0 has no lower one, bit 63 no upper one: a full word is [0, 63]).
    words = words.select(
        *keys,
        "_word",
        "_m",
        mask.bitwiseAND(F.bitwise_not(F.shiftleft(mask, 1))).alias("_starts"),
        mask.bitwiseAND(F.bitwise_not(F.shiftrightunsigned(mask, 1))).alias("_ends"),
    )
    starts, ends = _set_bits("_starts"), _set_bits("_ends")
    runs = F.transform(starts, lambda start, i: F.struct(start.alias("s"), F.get(ends, i).alias("e")))
    base = F.col("_word") * WORD_BITS
    per_word = words.select(*keys, base.alias("_base"), F.explode(runs).alias("_r")).select(
        *keys, (F.col("_base") + F.col("_r.s")).alias("start"), (F.col("_base") + F.col("_r.e")).alias("end")
    )
    bucketed = per_word.withColumn("_bucket", F.floor(F.col("start") / F.lit(bucket_size)))
    return merge_intervals(merge_intervals(bucketed, [*keys, "_bucket"]).drop("_bucket"), keys)


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


FIRST_MARK_SCHEMA = "group string, partition int, first_mark long"


def first_marks(processed_coverage: DataFrame, earlier: DataFrame | None = None) -> DataFrame:
    """(group, partition, first_mark): the lowest offset each group marked processed in each
    partition, from the coverage and from `earlier` (FIRST_MARK_SCHEMA: every mark any run
    read, those the coverage leaves out as possibly of another record included: they still
    show the group's consumer was probed there)."""
    lows = processed_coverage.select("group", "partition", F.col("start").alias("first_mark"))
    if earlier is not None:
        lows = lows.unionByName(earlier.select("group", "partition", "first_mark"))
    return lows.groupBy("group", "partition").agg(F.min("first_mark").alias("first_mark"))
