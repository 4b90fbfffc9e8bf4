"""Phase 3 of a reconciliation run: update_state, the previous state and this run's inputs
(reconcile_inputs.py) → the next state (RunState), each dataset written under the run's id and
read back, the key index and source deltas appended. Its findings are reconcile_report.py's."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.binding import Binding
from spark_jobs.late_rows import LookedUp, SourceTable, deleted_rows_recheck_seconds, late_rows, rows_still_in_source
from spark_jobs.reconcile_plan import Laps, RunInputs, RunPlan, RunState
from spark_jobs.reconcile_transform import (
    ABORTED_SCHEMA,
    KEY_INDEX_SCHEMA,
    LOST_SIGHTING_SCHEMA,
    PROCESSED_INTERVAL_SCHEMA,
    RECORD_SCHEMA,
    SOURCE_ROW_SCHEMA,
    conform,
    duplicates_of,
    empty_frame,
    is_empty_plan,
    key_delta_of,
    keyed_by_memory,
    new_source_of,
    orphan_candidates_of,
    pending_of,
    transform_key_stats,
    transform_key_table,
    transform_ledger_bounds,
    transform_ledger_open,
    transform_lost_marks_coverage,
    transform_lost_sightings,
    transform_processed_coverage,
    transform_rebuild_memory,
    transform_reprocessed,
    transform_seq_coverage,
    transform_seq_times,
    transform_touched_keys,
    transform_unprocessed_candidates,
)


def not_judged(*intervals: DataFrame | None) -> DataFrame | None:
    """Offsets whose records are never `unprocessed` (PROCESSED_INTERVAL_SCHEMA): marks the
    ledger lost (marks-lost) and offsets a plain instance of the group committed past
    (RunInputs.plain_passed). Processed or not cannot be told there, now or later; a candidate
    inside them leaves the state for good (a miss at worst, never an alarm). (What a probed
    session that did not close passed waits instead, a candidate still: RunInputs.died_passed.)"""
    frames = [conform(f, PROCESSED_INTERVAL_SCHEMA) for f in intervals if f is not None]
    if not frames:
        return None
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    return union


def _drop_deleted_rows(
    spark: SparkSession, binding: Binding, plan: RunPlan, source: SourceTable, pending: DataFrame, looked_up: LookedUp
) -> tuple[DataFrame, LookedUp]:
    """`pending` less the rows about to be reported missing that are no longer in the table
    (rows_still_in_source), and how far they were looked up after this run. The rows due are
    those up to the cutoff, or up to the cutoff an earlier run's clock gave where this one's
    stepped back (RunPlan.kept_cutoff: what the last run reported stays reported). A whole
    backlog that cannot be looked up still leaves the rows due since the last lookup looked up."""
    due = plan.kept_cutoff or plan.cutoff  # kept_cutoff is set only when it is the later one
    # where the clock stepped back, the rows are looked up up to the bound the earlier clock gave
    upper = plan.latest_upper
    since = looked_up.since(plan.source_upper, deleted_rows_recheck_seconds())
    pending, notes, done = rows_still_in_source(spark, binding, source, pending, since, due, upper)
    plan.warnings += notes
    if done:
        return pending, looked_up.after(since, due, plan.source_upper)
    if since is None and looked_up.until is not None:
        # the backlog is due again next run; the rows due since the last lookup are looked up now
        since = datetime.fromisoformat(looked_up.until)
        pending, notes, done = rows_still_in_source(spark, binding, source, pending, since, due, upper)
        plan.warnings += notes
        if done:
            return pending, looked_up.after(since, due, plan.source_upper)  # `at` kept: the backlog stays due
    return pending, looked_up


def update_state(
    spark: SparkSession,
    binding: Binding,
    plan: RunPlan,
    inputs: RunInputs,
    persist: Callable[[DataFrame], DataFrame],
    laps: Laps,
) -> RunState:
    """Previous state + this run's data → the next state, each dataset written under the
    run's id and read back; the key index and source deltas appended."""
    store, meta, records = plan.store, plan.meta, inputs.records
    # A small run writes each dataset in no more partitions than there are cores (a run with
    # little new data may still carry many findings: never fewer tasks than cores).
    new = RunState(store, laps, partitions=plan.small_partitions(spark))
    keep = new.keep

    def old(name: str) -> DataFrame:
        return store.dataset(spark, meta, name)

    new_lost = empty_frame(spark, LOST_SIGHTING_SCHEMA)
    delivered_seqs: DataFrame | None = None  # sequences a truncation rebuild knows were delivered, unread now
    if plan.memory is not None:
        # A rebuild starts from the part of the old index that the re-read cannot see again.
        bounds = spark.createDataFrame(
            [(p, o.low, o.high) for p, o in plan.kafka["watermarks"].items()], "partition int, low long, high long"
        )
        carried, new_lost = transform_rebuild_memory(
            store.deltas(spark, plan.memory.key_deltas, KEY_INDEX_SCHEMA),
            records,
            bounds,
            sorted(plan.rewritten),
            plan.run_id,
            all_deleted=plan.recreated is not None,
            compacted=plan.cleanup.compacted,
        )
        meta.key_deltas = [store.write_delta(carried, "keys", KEY_INDEX_SCHEMA, suffix="-carried")]
        if plan.recreated is None:
            # The re-read starts at each log start, so the sequences earlier runs read at offsets
            # retention has deleted since would be holes, and their acked v2 ranges broker-lost
            # (a v1 ack names its offset, below the log start: excused). The old coverage cannot
            # be carried: it has no partition, and carried whole it would cover the sequences the
            # broker lost in the rewritten partitions. Nor a bound as if those records were
            # deleted unread: a partition emptied by retention bounds nothing, and every acked
            # range lost by the truncation would be excused. What was delivered is known by
            # position: the key index's carried entries and the duplicates below the log start
            # (truncation removes a suffix, so that holds in rewritten partitions too). A record
            # the binding's key cannot be read from is in neither (a known gap).
            deleted_copies = (
                store.dataset(spark, plan.memory, "duplicates")
                .join(bounds, "partition")
                .where(F.col("offset") < F.col("low"))
            )
            delivered_seqs = carried.select("session", "seq").unionByName(deleted_copies.select("session", "seq"))
    old_index = store.deltas(spark, meta.key_deltas, KEY_INDEX_SCHEMA)

    # Lost sightings outlive a rebuild; nearly always there are none and nothing is read.
    old_lost = store.dataset(spark, plan.previous, "lost_sightings")
    if plan.memory is not None or not (is_empty_plan(old_lost) or old_lost.isEmpty()):
        keep("lost_sightings", transform_lost_sightings(old_lost, new_lost, records))
    else:
        new.frames["lost_sightings"] = old_lost

    # Every key this run touched, joined once with what the state knew of it: the key-level
    # datasets and both deltas are filters of it.
    touched = persist(transform_touched_keys(transform_key_stats(records), inputs.window_rows))
    has_state = not (is_empty_plan(old_index) and is_empty_plan(inputs.old_source))
    key_range = None
    if plan.broadcast_new and has_state:
        # A small run against a large state: its keys' range lets the state scans skip row groups.
        low, high = touched.agg(F.min("key"), F.max("key")).first() or (None, None)
        key_range = (str(low), str(high)) if low is not None and high is not None else None
    keys = transform_key_table(touched, old_index, inputs.old_source, plan.broadcast_new, key_range)
    if has_state:
        keys = persist(keys)  # else a projection of `touched`: nothing to spare by a second copy
    old_duplicates, old_aborted = old("duplicates"), old("aborted")
    if plan.memory is not None and plan.recreated is None:
        # A rebuild reads again from each log start: what earlier runs read below it (deleted
        # by retention since) is only in their datasets, and happened all the same.
        old_duplicates, old_aborted = (
            below_log_start(store.dataset(spark, plan.memory, "duplicates"), plan),
            below_log_start(store.dataset(spark, plan.memory, "aborted"), plan),
        )
    keep("duplicates", duplicates_of(keys, records, old_duplicates))
    pending = pending_of(keys, old("pending_source"))
    looked_up = LookedUp(meta.rows_looked_up_until, meta.rows_looked_up_at)
    if plan.meta.run_id and inputs.source is not None:
        # Rows earlier runs saw may be deleted since: not missing, as for a --full run. Those due
        # since the last lookup are looked up, and the whole backlog once an hour.
        pending, new.rows_looked_up = _drop_deleted_rows(
            spark, binding, plan, inputs.source, persist(pending), looked_up
        )
    else:  # every pending row was read from the table now
        new.rows_looked_up = looked_up.after(None, plan.cutoff, plan.source_upper)
    keep("pending_source", pending)
    candidates = orphan_candidates_of(keys, records, old("orphan_candidates"))
    late = None
    if plan.lower is not None and inputs.source is not None:
        # Rows visible only after the windows that could have held them were read: their
        # records are no orphans (late_rows).
        candidates = persist(candidates)
        late = late_rows(spark, binding, inputs.source, candidates, plan.source_upper)
        if late is not None:
            late = persist(late)
            candidates = candidates.join(late.select("key"), "key", "left_anti")
        laps("late_rows")
    keep("orphan_candidates", candidates)
    # The datasets below are unions of the old one and this run's ledger entries, aborted
    # records or groups' records, less what is settled: empty when both are.
    new.keep_unless_empty(
        "aborted",
        [old_aborted, inputs.new_aborted],
        lambda: conform(old_aborted, ABORTED_SCHEMA).unionByName(
            conform(inputs.new_aborted.withColumn("run_id", F.lit(plan.run_id)), ABORTED_SCHEMA)
        ),
    )
    # A producer's sequences outlive its topic: after a re-creation the ledgers are not read
    # again (plan_run), so what earlier runs saw of each session (coverage, bounds, times,
    # open entries) is carried, or every sequence they read would be a hole up to the bounds
    # the new ledger records give. Open entries acked at an offset are of the old topic's
    # offsets, which the new records take again: they went with it.
    sequences = plan.memory if plan.recreated is not None and plan.memory is not None else meta

    def old_sequences(name: str) -> DataFrame:
        return store.dataset(spark, sequences, name)

    if delivered_seqs is not None:
        read_seqs = inputs.all_records.select("session", "seq").unionByName(delivered_seqs)
        coverage = keep("seq_coverage", transform_seq_coverage(old_sequences("seq_coverage"), read_seqs))
    elif inputs.sequenced:
        coverage = keep("seq_coverage", transform_seq_coverage(old_sequences("seq_coverage"), inputs.all_records))
    else:  # no record read carries a sequence: the coverage is what it was
        coverage = new.keep_previous(spark, "seq_coverage", sequences)
    old_open, old_bounds = old_sequences("ledger_open"), old_sequences("ledger_bounds")
    if sequences is not meta:
        old_open = old_open.where(~((F.col("status") == "acked") & (F.coalesce(F.col("offset"), F.lit(-1)) >= 0)))
    new.keep_unless_empty(
        "ledger_open",
        [old_open, inputs.producer_entries],
        lambda: transform_ledger_open(old_open, inputs.producer_entries, coverage),
    )
    new.keep_unless_empty(
        "ledger_bounds",
        [old_bounds, inputs.producer_bounds],
        lambda: transform_ledger_bounds(old_bounds, inputs.producer_bounds),
    )
    # Only gaps read it, and there are gaps only where a producer ledger was ever read.
    old_times = old_sequences("seq_times")
    new.keep_unless_empty(
        "seq_times",
        [old_times, old_bounds, inputs.producer_bounds],
        lambda: transform_seq_times(old_times, inputs.all_records),
    )
    old_processed, old_reprocessed = old("processed_coverage"), old("reprocessed")
    old_candidates = old("unprocessed_candidates")

    def reprocessed_now() -> DataFrame:
        found = persist(
            transform_reprocessed(old_reprocessed, old_processed, inputs.processed, records, old_candidates)
        )
        if found.where(F.col("audit_id").isNull()).isEmpty():  # nearly always: one small job
            return found
        since = plan.topic_records_since or (
            datetime.fromisoformat(meta.topic_records_since) if meta.topic_records_since else None
        )
        return keyed_by_memory(
            found,
            inputs.processed,
            old_index,
            old("duplicates"),
            int(since.timestamp() * 1000) if since is not None else None,
        )

    new.keep_unless_empty("reprocessed", [old_reprocessed, inputs.processed], reprocessed_now)
    processed_cov = new.keep_unless_empty(
        "processed_coverage",
        [old_processed, inputs.processed],
        lambda: transform_processed_coverage(old_processed, inputs.processed),
    )
    if inputs.lost_marks is None:  # nearly always: the earlier run's dataset stands, by reference
        lost_marks = new.keep_previous(spark, "marks_lost", meta)
    else:
        lost_marks = new.keep("marks_lost", transform_lost_marks_coverage(old("marks_lost"), inputs.lost_marks))
    new.keep_unless_empty(
        "unprocessed_candidates",
        [old_candidates, inputs.groups],
        lambda: transform_unprocessed_candidates(
            old_candidates,
            records,
            processed_cov,
            inputs.groups,
            inputs.committed,
            inputs.first_marks_frame,
            not_judged(None if is_empty_plan(lost_marks) else lost_marks, inputs.plain_passed),
        ),
    )
    if inputs.totals["tombstones"]:
        fresh = conform(records.where(F.col("tombstone") & F.col("key").isNotNull()), RECORD_SCHEMA)
        old_tombstones = store.dataset(spark, plan.previous, "tombstones")
        # a rebuild reads again what an earlier run read: one entry per record
        keep(
            "tombstones",
            conform(old_tombstones, RECORD_SCHEMA).unionByName(fresh).dropDuplicates(["partition", "offset"]),
        )
    else:  # nothing new: the earlier run's dataset stands, by reference
        new.keep_previous(spark, "tombstones", plan.previous)
    new.key_deltas = [
        *meta.key_deltas,
        store.write_delta(key_delta_of(keys, plan.run_id), "keys", KEY_INDEX_SCHEMA),
    ]
    fresh_rows = new_source_of(keys) if late is None else new_source_of(keys).unionByName(late)
    new.source_deltas = [*meta.source_deltas, store.write_delta(fresh_rows, "source", SOURCE_ROW_SCHEMA)]
    laps("state.deltas")
    return new


def below_log_start(rows: DataFrame, plan: RunPlan) -> DataFrame:
    """The rows (columns `partition`, `offset`) below their partition's log start, in the
    partitions a rebuild did not find rewritten."""
    low = {p: o.low for p, o in plan.kafka["watermarks"].items() if p not in plan.rewritten}
    if not low:
        return rows.limit(0)
    below = F.lit(False)
    for partition, start in low.items():
        below = below | ((F.col("partition") == partition) & (F.col("offset") < start))
    return rows.where(below)
