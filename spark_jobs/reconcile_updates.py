"""State updates of the reconciliation: (previous state, this run's new data) → next state. A
full run is the same code with an empty previous state, so incremental and full runs agree.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_jobs.reconcile_helpers import (
    _range_anti,
    _range_semi,
    conform,
    empty_frame,
    first_marks,
    merge_intervals,
    values_to_intervals,
)
from spark_jobs.reconcile_schemas import (
    ACKED_RANGE,
    CANDIDATE_SCHEMA,
    INTERVAL_SCHEMA,
    KEY_INDEX_SCHEMA,
    KEYED,
    LEDGER_BOUND_SCHEMA,
    LEDGER_ENTRY_SCHEMA,
    LOST_SIGHTING_SCHEMA,
    PROCESSED_INTERVAL_SCHEMA,
    RECORD_SCHEMA,
    REPROCESSED_SCHEMA,
    SENT,
    SEQ_TIME_BUCKET,
    SEQ_TIMES_SCHEMA,
    SOURCE_ROW_SCHEMA,
)


def _tombstone(records: DataFrame) -> Column:
    """transform_records' `tombstone` (frames built without it hold none)."""
    return F.col("tombstone") if "tombstone" in records.columns else F.lit(False)


def items_of(records: DataFrame) -> DataFrame:
    """The records that deliver an item: all but tombstones."""
    return records.where(~F.col("tombstone")) if "tombstone" in records.columns else records


def transform_key_stats(records: DataFrame) -> DataFrame:
    """Per key of this run's records: `n` and `first` (the record at the lowest partition,
    offset), and `deleted`: a tombstone of the key was read. A tombstone (no value) is an
    application deleting its item from a compacted topic, not a copy of it: n and first count
    the other records (n null when a key has tombstones only). The one shuffle of the records
    by key that the state updates share (pass it as `key_stats`; each computes it itself when
    not given)."""
    tombstone = _tombstone(records)
    item = F.when(~tombstone, F.struct("partition", "offset", "timestamp", "session", "seq"))
    n = F.count(item)
    return (
        records.where(F.col("key").isNotNull())
        .groupBy("key")
        .agg(F.when(n > 0, n).alias("n"), F.min(item).alias("first"), F.max(tombstone).alias("deleted"))
    )


def _stats(records: DataFrame, key_stats: DataFrame | None) -> DataFrame:
    return key_stats if key_stats is not None else transform_key_stats(records)


def transform_rebuild_memory(
    old_index: DataFrame,
    records: DataFrame,
    bounds: DataFrame,
    rewritten: Sequence[int],
    run_id: str,
    all_deleted: bool = False,
    compacted: bool = False,
) -> tuple[DataFrame, DataFrame]:
    """What a rebuild keeps of the key index when offsets already read were rewritten.

    A rebuild reads every partition again from its log start. Of the earlier index it keeps
    (1) entries below the log start: seen by an earlier run, deleted since (retention), still
    delivered; (2) entries of keys the re-read holds no record of, where the broker rewrote
    nothing: in a partition not rewritten, the log cleaner removed them (a compacted topic, a
    tombstone's key); delivered as well; (3) as lost sightings, entries of the rewritten
    partitions at offsets the log still covers whose key is no longer at that offset: the
    broker lost them. On a compacted topic an offset with no record any more is no proof (the
    cleaner leaves such holes): only another record at it, or a log that now ends at or before
    it, is; otherwise the entry is kept as in (2) when the re-read has no record of its key.

    bounds: partition, low (log start), high (log end). all_deleted: the topic was deleted and
    created again, so every entry is of a record deleted since (1), none lost (3).
    """
    indexed = conform(old_index, KEY_INDEX_SCHEMA).join(bounds.select("partition", "low", "high"), "partition", "left")
    below = F.lit(True) if all_deleted else F.col("offset") < F.coalesce(F.col("low"), F.lit(0))
    in_rewritten = F.col("partition").isin(list(rewritten))
    keyed = records.where(F.col("key").isNotNull())
    still_there = keyed.select("key", "partition", "offset")
    gone = indexed.where(~below & in_rewritten).join(still_there, ["key", "partition", "offset"], "left_anti")
    if compacted:
        # any record at the offset now, keyed or not
        now_at = records.select("partition", "offset", F.lit(True).alias("_taken")).dropDuplicates(
            ["partition", "offset"]
        )
        gone = gone.join(now_at, ["partition", "offset"], "left")
        proven = F.col("_taken").isNotNull() | (F.col("offset") >= F.coalesce(F.col("high"), F.lit(0)))
        lost, unproven = gone.where(proven), gone.where(~proven)
    else:
        lost, unproven = gone, gone.limit(0)
    # Only keys the re-read holds no record of (tombstones aside): no copy is counted twice.
    re_read_keys = items_of(keyed).select("key")
    cleaned = (
        indexed.where(~below & ~in_rewritten)
        .unionByName(unproven.drop("_taken"))
        .join(re_read_keys, "key", "left_anti")
    )
    carried = indexed.where(below).unionByName(cleaned)
    lost = lost.withColumn("detected_run", F.lit(run_id))
    return conform(carried, KEY_INDEX_SCHEMA), conform(lost, LOST_SIGHTING_SCHEMA)


def transform_lost_sightings(old_lost: DataFrame, new_lost: DataFrame, records: DataFrame) -> DataFrame:
    """Lost sightings so far, less keys this run found a record of after all."""
    found = records.where(F.col("key").isNotNull()).select("key").distinct()
    lost = conform(old_lost, LOST_SIGHTING_SCHEMA).unionByName(conform(new_lost, LOST_SIGHTING_SCHEMA))
    return lost.join(found, "key", "left_anti")


def _maybe_broadcast(df: DataFrame, hint: bool) -> DataFrame:
    return F.broadcast(df) if hint else df


def transform_touched_keys(key_stats: DataFrame, window_rows: DataFrame) -> DataFrame:
    """Every key this run touched (a record read, or a source row in its window): key, n,
    first and deleted (this run's records, transform_key_stats), created (the window's source
    row)."""
    return key_stats.select("key", "n", "first", "deleted").join(window_rows.select("key", "created"), "key", "full")


def transform_key_table(
    touched: DataFrame,
    old_index: DataFrame,
    old_source: DataFrame,
    broadcast_new: bool = False,
    key_range: tuple[str, str] | None = None,
) -> DataFrame:
    """The touched keys (transform_touched_keys) with what the state knew of them: n_old and
    first_old (earlier runs' key index), known_source (an earlier run saw its source row).

    The key-level datasets (duplicates, pending rows, orphans, both deltas) are filters of
    this one table, so the state is read once, semi-joined with every new key together.
    On records and rows already partitioned by key the join needs no shuffle of its own.

    key_range: the lowest and highest touched key, when known. The state's deltas are
    written sorted by key (StateStore), so Parquet skips the row groups outside the range
    before the join: new items mostly get new, increasing ids, and an incremental run then
    reads a sliver of a large index instead of all of it. It only narrows what the joins
    would keep anyway.
    """
    if key_range is not None:
        within = F.col("key").between(F.lit(key_range[0]), F.lit(key_range[1]))
        old_index, old_source = old_index.where(within), old_source.where(within)
    keys = _maybe_broadcast(touched.select("key"), broadcast_new)
    old_counts = (
        old_index.join(keys, "key", "left_semi")
        .groupBy("key")
        .agg(
            F.sum("n").alias("n_old"),
            F.min(F.struct("partition", "offset", "timestamp", "session", "seq")).alias("first_old"),
        )
    )
    known = old_source.select("key").join(keys, "key", "left_semi").distinct().withColumn("known_source", F.lit(True))
    return touched.join(old_counts, "key", "left").join(known, "key", "left")


# The one-dataset forms below build their own key table; a run builds it once and filters
# it for every dataset (reconcile_new_state.update_state).
def _key_table_of(
    new_records: DataFrame,
    key_stats: DataFrame | None,
    window_rows: DataFrame | None = None,
    old_index: DataFrame | None = None,
    old_source: DataFrame | None = None,
    broadcast_new: bool = False,
) -> DataFrame:
    spark = new_records.sparkSession
    return transform_key_table(
        transform_touched_keys(
            _stats(new_records, key_stats),
            window_rows if window_rows is not None else empty_frame(spark, SOURCE_ROW_SCHEMA),
        ),
        old_index if old_index is not None else empty_frame(spark, KEY_INDEX_SCHEMA),
        old_source if old_source is not None else empty_frame(spark, SOURCE_ROW_SCHEMA),
        broadcast_new,
    )


def _has_record() -> Column:
    return F.col("n").isNotNull()


def _new_row() -> Column:
    return F.col("created").isNotNull() & F.col("known_source").isNull()


def _deleted() -> Column:
    """A tombstone of the key was read this run: its item was produced, then deleted."""
    return F.coalesce(F.col("deleted"), F.lit(False))


def key_delta_of(table: DataFrame, run_id: str) -> DataFrame:
    """This run's per-key index delta (KEY_INDEX_SCHEMA) from transform_key_table."""
    return table.where(_has_record()).select("key", "n", "first.*", F.lit(run_id).alias("run_id"))


def new_source_of(table: DataFrame) -> DataFrame:
    """The window's rows no earlier run saw (SOURCE_ROW_SCHEMA: windows overlap by the look-back)."""
    return table.where(_new_row()).select("key", "created")


def duplicates_of(table: DataFrame, new_records: DataFrame, old_duplicates: DataFrame) -> DataFrame:
    """Every record of every key seen more than once so far (RECORD_SCHEMA)."""
    duplicated = table.where(_has_record() & (F.col("n") + F.coalesce(F.col("n_old"), F.lit(0)) > 1))
    added_new = items_of(new_records).where(F.col("key").isNotNull()).join(duplicated.select("key"), "key", "left_semi")
    # A key seen exactly once before is not in old_duplicates yet: bring its first record.
    added_old = duplicated.where(F.col("n_old") == 1).select("key", "first_old.*")
    return (
        conform(old_duplicates, RECORD_SCHEMA)
        .unionByName(conform(added_new, RECORD_SCHEMA))
        .unionByName(conform(added_old, RECORD_SCHEMA))
    )


def pending_of(table: DataFrame, old_pending: DataFrame) -> DataFrame:
    """Source rows with no record so far (SOURCE_ROW_SCHEMA); `missing` once past grace. A
    row whose key has a tombstone is not: its item was produced and deleted (its record may
    be compacted away)."""
    resolved = conform(old_pending, SOURCE_ROW_SCHEMA).join(
        table.where(_has_record() | _deleted()).select("key"), "key", "left_anti"
    )
    fresh = table.where(_new_row() & ~_has_record() & ~_deleted() & F.col("n_old").isNull())
    return resolved.unionByName(conform(fresh, SOURCE_ROW_SCHEMA))


def orphan_candidates_of(table: DataFrame, new_records: DataFrame, old_candidates: DataFrame) -> DataFrame:
    """Records whose key has no source row so far, or no key at all (RECORD_SCHEMA). A key
    with a tombstone has none because its item was deleted: no orphan (nor is a tombstone)."""
    # Orphan keys are few: found among the keys, then their records (a record whose key
    # cannot be found is always an orphan).
    orphan_keys = table.where(_has_record() & F.col("created").isNull() & F.col("known_source").isNull() & ~_deleted())
    items = items_of(new_records)
    fresh = items.where(F.col("key").isNull()).unionByName(items.join(orphan_keys.select("key"), "key", "left_semi"))
    rows = table.where(F.col("created").isNotNull() | _deleted()).select("key")
    kept = conform(old_candidates, RECORD_SCHEMA).join(rows, "key", "left_anti")
    return kept.unionByName(conform(fresh, RECORD_SCHEMA))


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
    table = _key_table_of(new_records, key_stats, old_index=old_index, broadcast_new=broadcast_new)
    return duplicates_of(table, new_records, old_duplicates)


def transform_pending_source(
    old_pending: DataFrame,
    new_source: DataFrame,
    new_records: DataFrame,
    old_index: DataFrame,
    broadcast_new: bool = False,
    key_stats: DataFrame | None = None,
) -> DataFrame:
    """Source rows with no record so far (SOURCE_ROW_SCHEMA); `missing` once past grace."""
    table = _key_table_of(new_records, key_stats, new_source, old_index, broadcast_new=broadcast_new)
    return pending_of(table, old_pending)


def transform_orphan_candidates(
    old_candidates: DataFrame,
    new_records: DataFrame,
    old_source: DataFrame,
    new_source: DataFrame,
    broadcast_new: bool = False,
    key_stats: DataFrame | None = None,
) -> DataFrame:
    """Records whose key has no source row so far, or no key at all (RECORD_SCHEMA)."""
    table = _key_table_of(new_records, key_stats, new_source, old_source=old_source, broadcast_new=broadcast_new)
    return orphan_candidates_of(table, new_records, old_candidates)


def transform_seq_coverage(old_coverage: DataFrame, records: DataFrame) -> DataFrame:
    """Merged intervals of audit-seq values seen per producer session (INTERVAL_SCHEMA)."""
    new_intervals = values_to_intervals(records.where(F.col("session").isNotNull()), ["session"], "seq")
    return conform(
        merge_intervals(conform(old_coverage, INTERVAL_SCHEMA).unionByName(new_intervals), ["session"]), INTERVAL_SCHEMA
    )


def transform_seq_times(old_times: DataFrame, records: DataFrame) -> DataFrame:
    """SEQ_TIMES_SCHEMA: per producer session and block of SEQ_TIME_BUCKET sequence numbers,
    the newest record timestamp (ms) of any run. A sequence hole was produced after every
    record of a lower block (a session numbers its sends in order), so find_gaps can tell a
    hole produced after the records and ledger entries deleted unread from one that may have
    been among them."""
    new_times = (
        records.where(F.col("session").isNotNull() & F.col("seq").isNotNull())
        .groupBy("session", F.floor(F.col("seq") / F.lit(SEQ_TIME_BUCKET)).cast("long").alias("bucket"))
        .agg(F.max(F.unix_millis("timestamp")).alias("max_ms"))
    )
    merged = conform(old_times, SEQ_TIMES_SCHEMA).unionByName(conform(new_times, SEQ_TIMES_SCHEMA))
    return conform(merged.groupBy("session", "bucket").agg(F.max("max_ms").alias("max_ms")), SEQ_TIMES_SCHEMA)


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


def fold_ledger_bounds(bounds: DataFrame) -> DataFrame:
    """One row per session (LEDGER_BOUND_SCHEMA) of rows of it: its highest `last_seq` and its
    lowest `lost_after`."""
    return conform(
        bounds.groupBy("session").agg(F.max("last_seq").alias("last_seq"), F.min("lost_after").alias("lost_after")),
        LEDGER_BOUND_SCHEMA,
    )


def transform_ledger_bounds(old_bounds: DataFrame, new_bounds: DataFrame) -> DataFrame:
    return fold_ledger_bounds(
        conform(old_bounds, LEDGER_BOUND_SCHEMA).unionByName(conform(new_bounds, LEDGER_BOUND_SCHEMA))
    )


def transform_processed_coverage(old_coverage: DataFrame, processed: DataFrame) -> DataFrame:
    """Merged intervals of processed offsets per (group, partition)."""
    new_intervals = values_to_intervals(processed, ["group", "partition"], "offset")
    merged = merge_intervals(
        conform(old_coverage, PROCESSED_INTERVAL_SCHEMA).unionByName(conform(new_intervals, PROCESSED_INTERVAL_SCHEMA)),
        ["group", "partition"],
    )
    return conform(merged, PROCESSED_INTERVAL_SCHEMA)


def transform_lost_marks_coverage(old_lost: DataFrame, lost_marks: DataFrame | None) -> DataFrame:
    """Merged intervals (PROCESSED_INTERVAL_SCHEMA) of offsets per (group, partition) whose
    processed marks the consumer's ledger could not write (marks-lost), kept across runs like
    the processed coverage: a record committed past in one run may be named lost in a later one."""
    intervals = conform(old_lost, PROCESSED_INTERVAL_SCHEMA)
    if lost_marks is not None:
        intervals = intervals.unionByName(conform(lost_marks, PROCESSED_INTERVAL_SCHEMA))
    return conform(merge_intervals(intervals, ["group", "partition"]), PROCESSED_INTERVAL_SCHEMA)


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


def keyed_by_memory(
    reprocessed: DataFrame,
    marks: DataFrame,
    old_index: DataFrame,
    old_duplicates: DataFrame,
    records_since_ms: int | None = None,
) -> DataFrame:
    """`reprocessed` (REPROCESSED_SCHEMA) with the key earlier runs read at each position this
    run's `marks` (PROCESSED_SCHEMA) made reprocessed without one: a v2 mark names no key, and
    a record processed, committed past and replayed (a group's offsets reset back) is neither
    among this run's records nor the group's candidates any more. The key index holds each
    key's first record, the duplicates dataset every record of a key read more than once.
    records_since_ms: the topic was created again; entries stamped before are of the deleted
    topic, whose offsets the new one's records took again."""
    keys = ["group", "partition", "offset"]
    wanted = (
        reprocessed.where(F.col("audit_id").isNull())
        .join(marks.select(*keys).distinct(), keys, "left_semi")
        .select("partition", "offset")
        .distinct()
    )
    read = (
        conform(old_index, KEY_INDEX_SCHEMA)
        .select("key", "partition", "offset", "timestamp")
        .unionByName(conform(old_duplicates, RECORD_SCHEMA).select("key", "partition", "offset", "timestamp"))
    )
    if records_since_ms is not None:
        read = read.where(F.col("timestamp") >= F.lit(records_since_ms / 1000).cast("timestamp"))
    known = (
        read.where(F.col("key").isNotNull())
        .join(F.broadcast(wanted), ["partition", "offset"], "left_semi")
        .groupBy("partition", "offset")
        .agg(F.min("key").alias("_known"), F.countDistinct("key").alias("_keys"))
        .where(F.col("_keys") == 1)  # one record per offset: never two keys (a rewrite), never a guess
        .drop("_keys")
    )
    keyed = reprocessed.join(known, ["partition", "offset"], "left")
    return conform(keyed.withColumn("audit_id", F.coalesce("audit_id", "_known")), REPROCESSED_SCHEMA)


def transform_unprocessed_candidates(
    old_candidates: DataFrame,
    new_records: DataFrame,
    processed_coverage: DataFrame,
    groups: DataFrame,
    committed: DataFrame,
    earlier_first_marks: DataFrame | None = None,
    lost_marks: DataFrame | None = None,
) -> DataFrame:
    """Records each of the binding's groups has not (yet) marked processed (CANDIDATE_SCHEMA).

    groups: the binding's consumer groups (one column `group`). A record the group has
    committed past is kept only from the group's first mark in its partition on (what
    find_unprocessed judges): a ledger that appears later cannot speak for records consumed
    before it, nor instances without the probe for their partitions, and this bounds the
    state to the group's lag and its probed records.

    A group the binding no longer names loses its candidates: its marks are not read while it
    is not named (reconcile_parsing), so a record it processed then would stay a candidate
    and be called unprocessed once it is named again. Named again, it is judged on the
    records read from then on only (a miss at worst, never an alarm).
    """
    named = groups.select("group").distinct()
    fresh = named.crossJoin(conform(new_records, RECORD_SCHEMA))
    kept = conform(old_candidates, CANDIDATE_SCHEMA).join(F.broadcast(named), ["group"], "left_semi")
    candidates = kept.unionByName(conform(fresh, CANDIDATE_SCHEMA))
    open_candidates = _range_anti(candidates, processed_coverage, ["group", "partition"], "offset")
    if lost_marks is not None:
        # Marked processed by the group's consumer, the mark never written (marks-lost,
        # PROCESSED_INTERVAL_SCHEMA): processed or not cannot be told, never `unprocessed`.
        open_candidates = _range_anti(open_candidates, lost_marks, ["group", "partition"], "offset")
    lows = first_marks(processed_coverage, earlier_first_marks).withColumnRenamed("first_mark", "_first_mark")
    judged = open_candidates.join(lows, ["group", "partition"], "left").join(committed, ["group", "partition"], "left")
    keep = (
        F.col("committed").isNull()
        | (F.col("offset") >= F.col("committed"))
        | (F.col("_first_mark").isNotNull() & (F.col("offset") >= F.col("_first_mark")))
    )
    return conform(judged.where(keep), CANDIDATE_SCHEMA)
