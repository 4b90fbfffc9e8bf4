"""Source rows that became visible outside the windows a binding's runs read.

A run reads the rows created in its window (lower, upper], and the next run's window starts
`lookback` before this one's upper bound. A row that becomes visible later than that with
an earlier creation time is never in any window: a transaction that commits more than
`lookback` after its `created_at`, a read replica lagging by more, a backfill with
historical times. Its record would then stay an orphan candidate, and be reported `orphan`
on every run, although its row exists.

Before the orphan candidates are kept, their keys are looked up in the whole table up to the
window's upper bound: by value when they are few and the key column is an integer or text
(an IN list per query, its index serves), else by reading the table's key column up to the
upper bound once. A key found there has a row: its candidates are dropped, and the row joins
the source delta, so that the key's later records are not orphans either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.binding import Binding, jdbc_url_and_properties
from spark_jobs.mark_rules import env_seconds
from spark_jobs.reconcile_extract import NUMERIC_TYPES, actual_column, extract_source, source_subquery
from spark_jobs.reconcile_parsing import transform_source_rows

# Up to this many candidate keys are looked up by value; more read the key column whole (the
# driver holds at most this many keys).
LOOKUP_KEYS = 100_000
KEYS_PER_QUERY = 1_000
# A row deleted after a run reported it missing is looked up again, and dropped, within this
# long: each run looks up the rows due since the last one, and the whole backlog this often.
DELETED_ROWS_RECHECK_SECONDS = 3600.0
# A longer text key is not sent in a query: the key column is read whole instead.
MAX_KEY_CHARS = 1_000
TEXT_TYPES = {"text", "character varying", "character"}
# bigint's text form, as Spark casts the column (transform_source_rows): only such keys can match
_CANONICAL_INTEGER = re.compile(r"^(0|-?[1-9][0-9]{0,18})$")
# a uuid column's text form (PostgreSQL's, which the JDBC read gives)
_CANONICAL_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@dataclass(frozen=True)
class SourceTable:
    """The binding's source table as extract_source_columns found it."""

    name: str  # '"schema"."table"'
    columns: dict[str, str]  # column → data type
    unique: bool  # one row per key (extract.source_key_unique)


def key_literals(keys: list[str], data_type: str) -> list[str] | None:
    """SQL literals of the keys that a key column of this type can hold (the others cannot
    match its text form), or None: they are not looked up by value (another type, or a text
    key too long to send)."""
    kind = data_type.lower()
    if kind in NUMERIC_TYPES:
        return [k for k in keys if _CANONICAL_INTEGER.fullmatch(k) and -(2**63) <= int(k) < 2**63]
    if kind == "uuid":
        return [f"'{k}'::uuid" for k in keys if _CANONICAL_UUID.fullmatch(k)]
    if kind in TEXT_TYPES and all(len(k) <= MAX_KEY_CHARS for k in keys):
        # An escape string, whatever standard_conforming_strings says: a backslash and a quote
        # are doubled. A NUL cannot be in a PostgreSQL text value: a key holding one has no row.
        return ["E'" + k.replace("\\", "\\\\").replace("'", "''") + "'" for k in keys if "\x00" not in k]
    return None


def rows_by_value(
    spark: SparkSession, binding: Binding, source: SourceTable, literals: list[str], upper: datetime
) -> DataFrame:
    """The source rows created up to `upper` whose key is one of the literals, one query per
    KEYS_PER_QUERY of them (a partition each)."""
    subquery = source_subquery(binding, source.name, source.columns, None, upper)
    predicates = [
        f"audit_key in ({', '.join(literals[i : i + KEYS_PER_QUERY])})" for i in range(0, len(literals), KEYS_PER_QUERY)
    ]
    url, props = jdbc_url_and_properties(binding.source_url)
    return spark.read.jdbc(url, subquery, predicates=predicates, properties={**props, "fetchsize": "10000"})


def found_by_value(
    spark: SparkSession, binding: Binding, source: SourceTable, keys: list[str], upper: datetime
) -> list[tuple[str, int]] | None:
    """(key, created in microseconds) of the source rows created up to `upper` whose key is one
    of `keys` (as the run reads the key column: its text form), looked up by value; None when
    they cannot be: more than LOOKUP_KEYS keys, a key column of another type, a text key too
    long to send, or a query the database refused."""
    literals = (
        key_literals(keys, source.columns[actual_column(source.columns, binding.key_column)])
        if len(keys) <= LOOKUP_KEYS
        else None
    )
    if literals is None:
        return None
    if not literals:  # no key the column can hold: none has a row
        return []
    try:
        read = transform_source_rows(
            rows_by_value(spark, binding, source, literals, upper), "audit_key", "audit_created", unique=True
        )
        found = read.select("key", F.unix_micros("created").alias("micros")).collect()
    except Exception:  # noqa: BLE001 - the database refused the query (a key it cannot hold)
        return None
    # The query's equality is the database's (a numeric key matches '15' and '015' alike); the
    # run's is the text form Spark gives the column: keep only rows equal to it.
    wanted = set(keys)
    return [(r["key"], r["micros"]) for r in found if r["key"] in wanted]


def late_rows(
    spark: SparkSession, binding: Binding, source: SourceTable, candidates: DataFrame, upper: datetime
) -> DataFrame | None:
    """The source rows (SOURCE_ROW_SCHEMA) of the candidates' keys created up to `upper`, or
    None when none has one. Rows of the window itself are among them only if the window's
    read missed them."""
    # No distinct (a shuffle on every run): a key's repeated records count towards the bound.
    keyed = candidates.where(F.col("key").isNotNull()).select("key")
    keys = sorted({row["key"] for row in keyed.limit(LOOKUP_KEYS + 1).collect()})
    if not keys:
        return None
    rows = found_by_value(spark, binding, source, keys, upper)
    if rows is not None:
        if not rows:
            return None
        return transform_source_rows(
            spark.createDataFrame(rows, "key string, micros long").select(
                "key", F.timestamp_micros("micros").alias("created")
            ),
            "key",
            "created",
            unique=source.unique,
        )
    # too many keys to send, or keys that cannot be sent: read the key column up to the bound
    rows_now = extract_source(spark, binding, source.name, source.columns, None, upper)
    return transform_source_rows(rows_now, "audit_key", "audit_created", unique=source.unique).join(
        keyed, "key", "left_semi"
    )


def deleted_rows_recheck_seconds() -> float:
    """DELETED_ROWS_RECHECK_SECONDS, or $RECONCILE_DELETED_ROWS_RECHECK_SECONDS."""
    return env_seconds("RECONCILE_DELETED_ROWS_RECHECK_SECONDS", DELETED_ROWS_RECHECK_SECONDS)


@dataclass(frozen=True)
class LookedUp:
    """How far the pending rows were looked up in the source table (StateMeta's
    rows_looked_up_until and rows_looked_up_at): every row created up to `until` was, by a run
    at `until`'s time or after; the whole backlog last at `at` (ISO times, None: never)."""

    until: str | None = None
    at: str | None = None

    def since(self, now: datetime, recheck_seconds: float) -> datetime | None:
        """The creation time past which this run looks rows up, or None: all of them (the
        backlog is due, or never was, or the clock stepped back past its last lookup)."""
        if self.until is None or self.at is None:
            return None
        at = datetime.fromisoformat(self.at)
        if now < at or (now - at).total_seconds() >= recheck_seconds:
            return None
        return datetime.fromisoformat(self.until)

    def after(self, since: datetime | None, cutoff: datetime, now: datetime) -> LookedUp:
        """After a lookup of the rows created in (since, cutoff] that succeeded."""
        if since is None:
            return LookedUp(cutoff.isoformat(), now.isoformat())
        return LookedUp(max(since, cutoff).isoformat(), self.at)


def rows_still_in_source(
    spark: SparkSession,
    binding: Binding,
    source: SourceTable,
    pending: DataFrame,
    since: datetime | None,
    cutoff: datetime,
    upper: datetime,
) -> tuple[DataFrame, list[str], bool]:
    """`pending` (SOURCE_ROW_SCHEMA: rows with no record so far) less the rows created in
    (since, cutoff], about to be reported `missing` (since None: all up to the cutoff), whose
    key no longer has a row in the table up to `upper` (deleted since a run read them: a
    --full run would not report them); the run's warnings; and whether the keys were looked
    up (found_by_value): where they cannot be, every row is kept and a warning says so."""
    due = pending.where(F.col("created") <= F.lit(cutoff))
    if since is not None:
        due = due.where(F.col("created") > F.lit(since))
    keys = sorted({row["key"] for row in due.select("key").limit(LOOKUP_KEYS + 1).collect()})
    if not keys:
        return pending, [], True
    found = found_by_value(spark, binding, source, keys, upper)
    if found is None:
        return (
            pending,
            [
                f"whether the {'more than ' + str(LOOKUP_KEYS) if len(keys) > LOOKUP_KEYS else len(keys)} source "
                f"row(s) without a record are still in {binding.table} could not be looked up by key: rows deleted "
                "since a run read them are reported missing until a --full run"
            ],
            False,
        )
    gone = sorted(set(keys) - {key for key, _ in found})
    if not gone:
        return pending, [], True
    deleted = spark.createDataFrame([(key,) for key in gone], "key string")
    return (
        pending.join(F.broadcast(deleted), "key", "left_anti"),
        [
            f"{len(gone)} source row(s) without a record are no longer in {binding.table} (deleted since a run read "
            "them): not reported missing"
        ],
        True,
    )
