"""Parsing of the reconciliation's inputs: topic records and their audit headers, source rows,
the producer and consumer ledgers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_jobs.binding import RecordKeySpec
from spark_jobs.reconcile_helpers import (
    audit_text,
    conform,
    record_key_expression,
)
from spark_jobs.reconcile_schemas import (
    _LEDGER_JSON_SCHEMA,
    ACKED_RANGE,
    KEYED,
    LEDGER_BOUND_SCHEMA,
    LEDGER_ENTRY_SCHEMA,
    LOST_MARKS_SCHEMA,
    PROCESSED_SCHEMA,
    SENT,
)
from spark_jobs.reconcile_updates import fold_ledger_bounds

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


def _v2_value_ok(value: Column) -> Column:
    """v2: one `audit` header value (binary) of this version and at least its size."""
    return (F.length(value) >= AUDIT_V2_SIZE) & (F.substring(value, 1, 1) == F.lit(bytearray(b"\x02")))


def _v2_valid(v2: Column) -> Column:
    """v2: the values of the record's `audit` headers (binary)."""
    return (F.size(F.array_distinct(v2)) == 1) & _v2_value_ok(F.get(v2, 0))


def _session_of(v2: Column, pids: Column, valid: Column | None = None) -> Column:
    """v2: `audit` header values; pids: `audit-pid` header values (text); valid: _v2_valid(v2)
    when the caller has it already."""
    session = F.lower(F.hex(F.substring(F.get(v2, 0), 2, 16)))
    valid = _v2_valid(v2) if valid is None else valid
    return F.when(F.size(v2) > 0, F.when(valid, session)).otherwise(F.get(pids, 0))


def _seq_of(v2: Column, seqs: Column, valid: Column | None = None) -> Column:
    """v2: `audit` header values; seqs: `audit-seq` header values (text); valid: as _session_of."""
    seq = F.conv(F.hex(F.substring(F.get(v2, 0), 18, 8)), 16, 10).try_cast("long")
    valid = _v2_valid(v2) if valid is None else valid
    return F.when(F.size(v2) > 0, F.when(valid, seq)).otherwise(F.get(seqs, 0).try_cast("long"))


def audit_session() -> Column:
    """The producer session of a record: from a valid `audit` header (v2), else `audit-pid`."""
    return _session_of(_audit_v2_values(), _header_values("audit-pid"))


def audit_seq() -> Column:
    """The record's sequence: from a valid `audit` header (v2), else `audit-seq` (long or null)."""
    return _seq_of(_audit_v2_values(), _header_values("audit-seq"))


def audit_id() -> Column:
    """The record's audit id as its probe ledgered it (auditor.stuck.locate_python._note_headers):
    v2, the bytes after a valid `audit` header's fixed part, else the record key; v1, the first
    non-empty `audit-id`; in the probes' text form (audit_text). Null where it carries none."""
    v2 = _audit_v2_values()
    first = F.get(v2, 0)
    suffix = first.substr(F.lit(AUDIT_V2_SIZE + 1), F.length(first) - F.lit(AUDIT_V2_SIZE))
    own = F.when(F.length(first) > AUDIT_V2_SIZE, suffix).otherwise(F.col("key"))
    ids = F.filter(F.coalesce(F.col("headers"), F.array()), lambda h: (h["key"] == F.lit("audit-id")))
    v1 = F.get(F.filter(F.transform(ids, lambda h: h["value"]), lambda v: F.length(v) > 0), 0)
    raw = F.when(F.size(v2) > 0, F.when(_v2_valid(v2), own)).otherwise(v1)
    return F.when(F.length(raw) > 0, audit_text(raw))


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
    none_present = ~_any(present)
    return (
        F.when(F.size(v2) > 0, _ok_if(_v2_valid(v2)))
        .when(none_present, F.lit(HEADERS_MISSING))
        .otherwise(_ok_if(_all([*single, _v1_decodable(first)])))
    )


def _ok_if(valid: Column) -> Column:
    """`ok` where valid holds, else (false or null) `malformed`."""
    return F.when(valid, F.lit(HEADERS_OK)).otherwise(F.lit(HEADERS_MALFORMED))


def _v1_decodable(first: dict[str, Column]) -> Column:
    """v1: the first value of each of AUDIT_HEADERS decodes (null when one is absent)."""
    return F.coalesce(
        _all(
            [
                F.length(first["audit-id"]) > 0,
                first["audit-pid"].rlike("^[0-9a-f]{32}$"),
                first["audit-seq"].rlike("^[0-9]{1,19}$") & first["audit-seq"].try_cast("long").isNotNull(),
                first["audit-ts"].rlike("^[0-9]{1,20}$"),
            ]
        ),
        F.lit(False),
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


# How transform_records found a record's audit headers: the four v1 headers in order, the one
# v2 header, none at all, or any other way (searched for by name).
_FORM_V1, _FORM_V2, _FORM_NONE, _FORM_OTHER = 1, 2, 0, -1


def transform_records(raw: DataFrame, record_key: RecordKeySpec) -> DataFrame:
    """Kafka source rows → RECORD_SCHEMA (key by the binding's rule, audit headers) plus
    `header_status` (audit_header_status), which a run counts and the state does not keep,
    and `tombstone`: the record has no value, an application's deletion of its record key
    (compacted topics), no delivery of an item (see transform_key_stats).

    Undecodable audit headers still become nulls here (such a record is audited by key
    only), but they are counted, never silently dropped.
    """
    # The headers are searched once per audit header name (a projection of its own: each
    # array is used several times below, and Spark keeps a non-trivial expression used more
    # than once in its own projection), not once per use.
    # Records as the probes write them (the four v1 headers in their order, or the one v2
    # header, or none) are read by position; only others pay for searching the array.
    headers = F.coalesce(F.col("headers"), F.array())
    count = F.size(headers)
    v1 = (count == len(AUDIT_HEADERS)) & _all(
        [F.get(headers, i)["key"] == F.lit(name) for i, name in enumerate(AUDIT_HEADERS)]
    )
    v2 = (count == 1) & (F.get(headers, 0)["key"] == F.lit(AUDIT_V2_HEADER))
    no_text = F.array().cast("array<string>")
    found = raw.select(
        record_key_expression(record_key).alias("key"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"),
        F.col("timestamp"),
        F.col("value").isNull().alias("tombstone"),
        F.when(v2, F.array(F.get(headers, 0)["value"]))
        .when(v1 | (count == 0), F.array().cast("array<binary>"))
        .otherwise(_audit_v2_values())
        .alias("_v2"),
        *[
            F.when(v1, F.array(F.get(headers, i)["value"].cast("string")))
            .when(v2 | (count == 0), no_text)
            .otherwise(_header_values(name))
            .alias(f"_{name}")
            for i, name in enumerate(AUDIT_HEADERS)
        ],
        F.when(v1, _FORM_V1).when(v2, _FORM_V2).when(count == 0, _FORM_NONE).otherwise(_FORM_OTHER).alias("_form"),
    )
    v2 = F.col("_v2")
    values = {name: F.col(f"_{name}") for name in AUDIT_HEADERS}
    # A record read by position needs no check of repeated headers: each array holds one
    # value. Only other records pay for the general rules (~2 s per 10M records each of v1's
    # status and v2's session, seq and status here).
    form = F.col("_form")
    first = {name: F.get(v, 0) for name, v in values.items()}
    v2_valid = F.when(form == _FORM_V2, _v2_value_ok(F.get(v2, 0))).otherwise(_v2_valid(v2))
    status = (
        F.when(form == _FORM_V1, _ok_if(_v1_decodable(first)))
        .when(form == _FORM_V2, _ok_if(v2_valid))
        .when(form == _FORM_NONE, F.lit(HEADERS_MISSING))
        .otherwise(_header_status_of(v2, values))
    )
    return found.select(
        "key",
        "partition",
        "offset",
        "timestamp",
        _session_of(v2, values["audit-pid"], v2_valid).alias("session"),
        _seq_of(v2, values["audit-seq"], v2_valid).alias("seq"),
        status.alias("header_status"),
        "tombstone",
    )


def header_problem_counts() -> list[Column]:
    """Aggregates over transform_records output, named as in RECORD_COUNTS."""
    status = F.col("header_status")
    return [
        F.count(F.when(status == HEADERS_MISSING, 1)).alias("records_without_headers"),
        F.count(F.when(status == HEADERS_MALFORMED, 1)).alias("records_malformed_headers"),
    ]


def transform_source_rows(raw: DataFrame, key_column: str, created_column: str, unique: bool = False) -> DataFrame:
    """Source table rows → SOURCE_ROW_SCHEMA; one row per key (earliest created wins).

    unique: the database guarantees one row per key (extract.source_key_unique), so the rows
    are not grouped: at 10M rows the grouping is a hash aggregation of every key, ~15 s here.
    """
    rows = raw.select(
        F.col(key_column).cast("string").alias("key"), F.col(created_column).cast("timestamp").alias("created")
    ).where(F.col("key").isNotNull())
    return rows if unique else rows.groupBy("key").agg(F.min("created").alias("created"))


def transform_aborted(uncommitted: DataFrame, committed_positions: DataFrame) -> DataFrame:
    """Records read with read_uncommitted that read_committed did not return: aborted."""
    return uncommitted.join(committed_positions.select("partition", "offset"), ["partition", "offset"], "left_anti")


def _parse_ledger(raw: DataFrame) -> DataFrame:
    """The ledger records' JSON fields, and `_written_ms`: the record's own timestamp."""
    written = F.unix_millis(F.col("timestamp")) if "timestamp" in raw.columns else F.lit(None).cast("long")
    return raw.select(
        F.from_json(F.col("value").cast("string"), _LEDGER_JSON_SCHEMA).alias("m"), written.alias("_written_ms")
    ).select("m.*", "_written_ms")


def _delivery_status(status: Column, offset: Column) -> Column:
    """auditor.probes.codec.delivery_status: an `acked` entry without an offset (older probes
    under acks=0) is `unconfirmed`, never broker-acked."""
    return F.when((status == F.lit("acked")) & (F.coalesce(offset, F.lit(-1)) < 0), F.lit("unconfirmed")).otherwise(
        status
    )


def transform_producer_session_starts(raw: DataFrame) -> DataFrame:
    """Producer-ledger records → (session, started_ms): when each producer session began (its
    session-start record)."""
    return (
        _parse_ledger(raw)
        .where((F.col("type") == "session-start") & F.col("pid").isNotNull())
        .groupBy(F.col("pid").alias("session"))
        .agg(F.min("ts").alias("started_ms"))
    )


def producer_ledger_covers_from(raw: DataFrame, topic: str) -> int | None:
    """From when the producer ledger speaks for `topic` (auditor.stuck.locate_python.
    ledger_covers_from): the earliest start of a session that ledgered records of it, its
    first entry (a batch entry's time, a range's from, a failure report's time) where its
    session-start is not in `raw`. None when no session ledgered any."""
    parsed = _parse_ledger(raw).where(F.col("topic") == topic)
    first = (
        parsed.where(F.col("type").isin("batch", "ranges", "failures"))
        .select(F.col("pid").alias("session"), "type", F.explode("entries").alias("e"))
        .select(
            "session",
            F.when(F.col("type") == "batch", F.get(F.col("e"), 7))
            .when(F.col("type") == "ranges", F.get(F.col("e"), 3))
            .otherwise(F.get(F.col("e"), 6))
            .try_cast("long")
            .alias("ts_ms"),
        )
        .where(F.col("session").isNotNull())
        .groupBy("session")
        .agg(F.min("ts_ms").alias("first_ms"))
    )
    row = (
        first.join(transform_producer_session_starts(raw), "session", "left")
        .agg(F.min(F.least("started_ms", "first_ms")).alias("covers_from_ms"))
        .collect()[0]
    )
    covers: int | None = row["covers_from_ms"]
    return covers


def transform_producer_ledger(
    raw: DataFrame, topic: str, *, place_failures: bool = False
) -> tuple[DataFrame, DataFrame]:
    """Producer-ledger records → (entries for `topic` in LEDGER_ENTRY_SCHEMA, bounds per session).

    The bound of a session is the last sequence it ledgered for the topic (entries and a
    clean session-end's last_seq); gaps are never inferred past it, nor past the `last_seq` of
    a session-end saying a ledger record of the session was lost (`lost_after`). Statuses are `acked`
    (with an offset), `unconfirmed` (sent with acks=0) or `failed`.

    ``place_failures``: v2 failure reports that the `keys` records place on one sequence
    become `failed` entries there (placed_failures); the range records ledger such a window
    `sent`, which alone would call a send that failed unconfirmed.
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
        F.col("pid").alias("session"), "_written_ms", F.explode("entries").alias("e")
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
        F.when(F.get(F.col("e"), 2) == F.lit("acked"), F.col("_written_ms")).alias("acked_by_ms"),
    )
    entries = conform(entries, LEDGER_ENTRY_SCHEMA).unionByName(
        conform(ranged.where(F.col("session").isNotNull() & F.col("seq").isNotNull()), LEDGER_ENTRY_SCHEMA)
    )
    ends = parsed.where(F.col("type") == "session-end").select(
        F.col("pid").alias("session"),
        F.col("last_seq")[topic].alias("last_seq"),
        # a record of the session was lost after the sequence its last checkpoint named (-1: none)
        F.when(F.col("ledger_lost"), F.coalesce(F.col("last_seq")[topic], F.lit(-1))).alias("lost_after"),
    )
    bounds = fold_ledger_bounds(
        entries.select(
            "session", F.col("seq").alias("last_seq"), F.lit(None).cast("long").alias("lost_after")
        ).unionByName(ends.where(F.col("last_seq").isNotNull() | F.col("lost_after").isNotNull()))
    )
    keyed = transform_producer_keys(parsed, topic)
    entries = conform(entries, LEDGER_ENTRY_SCHEMA).unionByName(keyed)
    if place_failures:
        entries = entries.unionByName(placed_failures(parsed, keyed, topic))
    return attach_keys(entries), conform(bounds, LEDGER_BOUND_SCHEMA)


def placed_failures(parsed: DataFrame, keyed: DataFrame, topic: str) -> DataFrame:
    """v2 failure reports on their sequence (LEDGER_ENTRY_SCHEMA, status `failed`).

    A report has no headers, only the record's key: it names the window of sequences that
    were unresolved when it came. The `keys` records say which sequence of that window had
    the report's id; when exactly one did, the failure is that sequence's. When the window
    holds the id more than once (the item sent twice) or not at all (its keys not read yet),
    the report stays unplaced and the window's `sent` entries say what is known.
    """
    reports = (
        _failure_reports(parsed, topic)
        .where(F.col("audit_id").isNotNull())
        .dropDuplicates(["session", "_lo", "_hi", "audit_id"])
    )
    ids = keyed.select(F.col("session").alias("_s"), F.col("seq"), F.col("audit_id").alias("_id"))
    candidates = reports.join(
        ids,
        (reports["session"] == ids["_s"])
        & (reports["audit_id"] == ids["_id"])
        & ids["seq"].between(F.col("_lo"), F.col("_hi")),
    )
    placed = (
        candidates.groupBy("session", "_lo", "_hi", "audit_id")
        .agg(
            F.count("*").alias("_n"),
            F.min("seq").alias("seq"),
            F.first("partition").alias("partition"),
            F.first("error").alias("error"),
            F.first("persisted").alias("persisted"),
            F.first("ts_ms").alias("ts_ms"),
        )
        .where(F.col("_n") == 1)
    )
    return _failed_entries(placed, F.col("seq"))


def transform_producer_keys(parsed: DataFrame, topic: str) -> DataFrame:
    """v2 `keys` records of `topic` → one KEYED entry (LEDGER_ENTRY_SCHEMA) per sequence with an
    audit id, with when it was produced (ts_ms = to_ms)."""
    runs = (
        parsed.where((F.col("type") == "keys") & (F.col("topic") == topic))
        .select(F.col("pid").alias("session"), F.explode("entries").alias("e"))
        .select(
            "session",
            F.get(F.col("e"), 0).try_cast("long").alias("first"),
            F.from_json(F.get(F.col("e"), 1), "array<string>").alias("keys"),
            _key_stamps(F.get(F.col("e"), 2)).alias("stamps"),
        )
    )
    # explode, not posexplode: the optimizer prunes an explode of nothing (local_frame).
    positioned = F.transform(
        "keys",
        lambda key, pos: F.struct(pos.alias("pos"), key.alias("audit_id"), F.get(F.col("stamps"), pos).alias("ts_ms")),
    )
    keyed = runs.select("session", "first", F.explode(positioned).alias("k")).select(
        "session",
        (F.col("first") + F.col("k.pos")).alias("seq"),
        F.lit(KEYED).alias("status"),
        F.lit(-1).alias("partition"),
        F.lit(-1).cast("long").alias("offset"),
        F.col("k.audit_id").alias("audit_id"),
        F.col("k.ts_ms").alias("ts_ms"),
        F.col("k.ts_ms").alias("to_ms"),
    )
    return conform(
        keyed.where(F.col("session").isNotNull() & F.col("first").isNotNull() & F.col("audit_id").isNotNull()),
        LEDGER_ENTRY_SCHEMA,
    )


def _key_stamps(text: Column) -> Column:
    """A `keys` entry's stamps (its JSON text) as one stamp per id: runs of equal stamps
    `[[ts_ms, count], ...]` (current probes) or one stamp per id (earlier ones)."""
    runs = F.from_json(text, "array<array<long>>")
    expanded = F.flatten(F.transform(runs, lambda run: F.array_repeat(F.get(run, 0), F.get(run, 1).cast("int"))))
    return F.when(text.rlike(r"^\s*\[\s*\["), expanded).otherwise(F.from_json(text, "array<long>"))


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


def _failure_reports(parsed: DataFrame, topic: str) -> DataFrame:
    """v2 `failures` entries of `topic`: session, the window `_lo`.. `_hi`, partition, error,
    persisted, audit_id, ts_ms."""
    return (
        parsed.where((F.col("type") == "failures") & (F.col("topic") == topic))
        .select(F.col("pid").alias("session"), F.explode("entries").alias("e"))
        .select(
            "session",
            F.get(F.col("e"), 0).try_cast("long").alias("_lo"),
            F.get(F.col("e"), 1).try_cast("long").alias("_hi"),
            F.get(F.col("e"), 2).try_cast("int").alias("partition"),
            F.get(F.col("e"), 3).alias("error"),
            F.get(F.col("e"), 4).alias("persisted"),
            F.get(F.col("e"), 5).alias("audit_id"),
            F.get(F.col("e"), 6).try_cast("long").alias("ts_ms"),
        )
    )


def transform_producer_failures(raw: DataFrame, topic: str) -> DataFrame:
    """v2 failure records of `topic` → LEDGER_ENTRY_SCHEMA, status `failed`, keyed by audit_id.

    A failure report names no sequence (confluent-kafka hands it without headers): `seq` is
    the first of the window it may belong to, which the range records ledger unconfirmed.
    For look-ups by key (stuck items), never for sequence gaps.
    """
    return _failed_entries(_failure_reports(_parse_ledger(raw), topic), F.col("_lo"))


def _failed_entries(reports: DataFrame, seq: Column) -> DataFrame:
    """Failure reports as `failed` ledger entries (LEDGER_ENTRY_SCHEMA) at sequence `seq`."""
    return conform(
        reports.select(
            "session",
            seq.alias("seq"),
            F.lit("failed").alias("status"),
            "partition",
            F.lit(-1).cast("long").alias("offset"),
            "error",
            "persisted",
            "audit_id",
            "ts_ms",
        ),
        LEDGER_ENTRY_SCHEMA,
    )


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


def closed_consumer_sessions(raw: DataFrame) -> set[str]:
    """The consumer sessions whose ledger holds their `closed` session-end (docs/contracts.md:
    close() wrote it once every earlier record of the session was written): a session without
    one may have died with marks it had not written."""
    ended = _parse_ledger(raw).where(
        (F.col("type") == "session-end") & F.col("sid").isNotNull() & F.coalesce(F.col("closed"), F.lit(False))
    )
    return {row["sid"] for row in ended.select("sid").distinct().collect()}


def transform_lost_marks(raw: DataFrame, topic: str, groups: Iterable[str]) -> DataFrame:
    """Consumer-ledger v2 `marks-lost` records → LOST_MARKS_SCHEMA for `topic` and the groups:
    offsets their consumers marked processed whose marks were never written. Neither processed
    nor unprocessed can be told there: the readers leave them unjudged."""
    lost = (
        _parse_ledger(raw)
        .where((F.col("type") == "marks-lost") & F.col("group").isin(list(groups)))
        .select("group", "reason", F.explode("entries").alias("e"))
        .where(F.get(F.col("e"), 0) == F.lit(topic))
        .select(
            "group",
            F.get(F.col("e"), 1).try_cast("int").alias("partition"),
            F.get(F.col("e"), 2).try_cast("long").alias("start"),
            F.get(F.col("e"), 3).try_cast("long").alias("end"),
            "reason",
        )
    )
    valid = F.col("partition").isNotNull() & F.col("start").isNotNull() & (F.col("end") >= F.col("start"))
    return conform(lost.where(valid), LOST_MARKS_SCHEMA)
