"""The phases of one reconciliation run after plan_run (reconcile_plan.py): extract_inputs →
update_state → find_all → flag_new / count_findings → commit_state. reconcile.py wires them
and loads the result."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from confluent_kafka.admin import AdminClient
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.binding import (
    Binding,
    BindingError,
)
from spark_jobs.group_commits import remember, standing_in
from spark_jobs.late_rows import SourceTable, late_rows
from spark_jobs.ledger_ids import (
    LEDGER_KINDS,
    LedgerId,
    check_ledger_unchanged,
    ledger_ids_after,
    recreated_ledger_horizon,
)
from spark_jobs.mark_rules import rules_from_json, rules_to_json
from spark_jobs.reconcile_extract import (
    OffsetRange,
    PartitionSummary,
    check_nothing_deleted_while_read,
    check_read_to_planned_end,
    checkpoint_prints,
    compaction_horizon,
    entries_lost_warnings,
    extract_source,
    extract_source_columns,
    extract_topic,
    first_record_ms,
    loss_horizon,
    lost_warnings,
    marks_lost_warnings,
    recreation_horizon,
    source_key_unique,
    summarize_partitions,
)
from spark_jobs.reconcile_helpers import FIRST_MARK_SCHEMA
from spark_jobs.reconcile_plan import Laps, RunInputs, RunPlan, RunState
from spark_jobs.reconcile_rewrites import find_mark_rules, without_rewritten_marks
from spark_jobs.reconcile_state import StateMeta
from spark_jobs.reconcile_transform import (
    COMMITTED_SCHEMA,
    FINDING_KINDS,
    KEY_INDEX_SCHEMA,
    LEDGER_BOUND_SCHEMA,
    LEDGER_ENTRY_SCHEMA,
    LOST_SIGHTING_SCHEMA,
    PROCESSED_SCHEMA,
    RECORD_COUNTS,
    RECORD_SCHEMA,
    SOURCE_ROW_SCHEMA,
    UNVERIFIABLE,
    WATERMARK_SCHEMA,
    acks_maybe_held,
    conform,
    duplicates_of,
    empty_frame,
    find_aborted,
    find_duplicates,
    find_gaps,
    find_missing,
    find_orphans,
    find_reprocessed,
    find_unprocessed,
    is_empty_plan,
    key_delta_of,
    keyed_by_memory,
    local_frame,
    new_source_of,
    orphan_candidates_of,
    pending_of,
    transform_aborted,
    transform_consumer_ledger,
    transform_key_stats,
    transform_key_table,
    transform_ledger_bounds,
    transform_ledger_open,
    transform_lost_marks,
    transform_lost_marks_coverage,
    transform_lost_sightings,
    transform_processed_coverage,
    transform_producer_ledger,
    transform_rebuild_memory,
    transform_records,
    transform_reprocessed,
    transform_seq_coverage,
    transform_seq_times,
    transform_source_rows,
    transform_touched_keys,
    transform_unprocessed_candidates,
    union_findings,
    unverifiable_rows,
)
from spark_jobs.record_times import Backdated, find_backdated, stamp_lag_ms, written_after_read
from spark_jobs.send_outcome import judged_until_ms

# What makes two runs' findings the same finding (flag_new: is_new).
IDENTITY = ["kind", "key", "cause", "partition", "offset", "session", "seq", "group"]


@dataclass
class LedgerRead:
    """One ledger's read of this run: its records (cached: its parse reads them in several
    branches, so Kafka is read once and every branch sees the same records; None when there
    is nothing to read) and the timestamp of the first record of each partition read."""

    plan: OffsetRange
    records: DataFrame | None
    first_ms: dict[int, int | None]

    def lost_until(self, earlier: str | None, upper: datetime, grace_seconds: float) -> datetime | None:
        """The newest time a record the ledger deleted before any run read it may carry
        (loss_horizon), never earlier than the state's bound: the bound only grows."""
        before = datetime.fromisoformat(earlier) if earlier else None
        now = loss_horizon(self.first_ms, self.plan, upper, grace_seconds)
        return max((t for t in (before, now) if t is not None), default=None)


def read_ledger(
    spark: SparkSession,
    binding: Binding,
    plan: OffsetRange,
    persist: Callable[[DataFrame], DataFrame],
    admin: AdminClient,
    ledger_id: LedgerId | None = None,
) -> LedgerRead:
    """Read a ledger's planned offsets into the cache, then check nothing was deleted under
    the read and it reached its planned end (as the topic's reads are checked), and that the
    ledger topic is still the one whose id was read before its offsets (ledger_id). `admin`:
    the run's admin client (RunPlan.admin)."""
    if not plan.total:
        return LedgerRead(plan, None, {})
    records = persist(extract_topic(spark, binding, plan, admin=admin))
    first_ms, last_read = first_record_ms(records)  # reads the ledger into the cache
    check_nothing_deleted_while_read(admin, plan)
    check_read_to_planned_end(binding, plan, last_read)
    if ledger_id is not None and ledger_id.topic == plan.topic:
        check_ledger_unchanged(admin, ledger_id)
    return LedgerRead(plan, records, first_ms)


def read_held(
    spark: SparkSession, binding: Binding, plan: RunPlan, persist: Callable[[DataFrame], DataFrame]
) -> DataFrame | None:
    """The records behind an open transaction (key, session, seq), read_uncommitted: in each
    partition whose last stable offset, where the run's read stops, lies below its high
    watermark, from there up to it. None: no partition is held.

    A non-transactional producer's records among them are acked and in the log, but no
    read_committed reader gets them until the transaction ends: their rows are not judged
    missing, nor their sequences lost, by this run. Nothing of them enters the state: the
    run that reads them past the stable offset does.
    """
    ends = plan.topic.ranges
    tail = {
        p: (ends[p][1], offsets.high)
        for p, offsets in plan.kafka["watermarks"].items()
        if p in ends and ends[p][1] < offsets.high
    }
    if not tail:
        return None
    held = persist(
        transform_records(
            extract_topic(spark, binding, OffsetRange(binding.topic, tail), "read_uncommitted", plan.admin),
            binding.record_key,
        ).select("key", "session", "seq")
    )
    count = held.count()
    spans = ", ".join(f"{binding.topic}/{p} [{start}, {end})" for p, (start, end) in sorted(tail.items()))
    plan.warnings.append(
        f"{count} record(s) lie behind an open transaction, past the last stable offset ({spans}): the rows and "
        "producer sequences they hold are judged by a later run"
    )
    return held


def written_after_last_read(plan: RunPlan) -> dict[int, int]:
    """Per partition, the offset from which records were written after the last run's read:
    the high watermarks it read, the start of a partition added since (written_after_read);
    in a topic created again, every offset (the old topic still stood when it was read)."""
    return written_after_read(plan.previous.read_highs, plan.topic.ranges, recreated=bool(plan.recreated))


def record_stamps(
    plan: RunPlan, binding: Binding, summary: dict[int, PartitionSummary], read_to: dict[int, int]
) -> Backdated | None:
    """Whether the topic's producers stamp records well before writing them (record_times):
    the state's proof, else one among this run's records written after the last run's read
    (read_to, written_after_last_read; the summary's `oldest` is among those only, so an older
    record re-read below them cannot hide them)."""
    earlier = plan.previous
    found = find_backdated(
        binding.topic,
        {p: s.oldest for p, s in summary.items()},
        read_to,
        earlier.read_at_ms,
        earlier.run_id,
        int(binding.grace_seconds * 1000),
        known=plan.meta.backdated,
    )
    if found is not None and not plan.meta.backdated:
        plan.warnings.append(f"record timestamps out of step with the log: {found.describe()}")
    return found


def extract_inputs(
    spark: SparkSession, binding: Binding, plan: RunPlan, persist: Callable[[DataFrame], DataFrame], laps: Laps
) -> RunInputs:
    """Read the planned topic offsets (committed, and uncommitted where transactions are in
    use), check nothing was deleted or rewritten under the read, then the source window and
    both ledgers."""
    meta, topic = plan.meta, plan.topic
    # Partitioned by key once: the key-level state below joins and groups by key without
    # shuffling the records again.
    records = persist(
        transform_records(
            extract_topic(spark, binding, topic, "read_committed", plan.admin), binding.record_key
        ).repartition("key")
    )
    # Only a partition whose read began below the last read's high watermark holds records
    # that were not written after it; most runs begin at it, and nothing is looked up per record.
    read_to = written_after_last_read(plan)
    summary = summarize_partitions(
        records, {p: h for p, h in read_to.items() if p in topic.ranges and topic.ranges[p][0] < h}
    )
    totals = {
        "n": sum(s.n for s in summary.values()),
        "keyed": sum(s.keyed for s in summary.values()),
        "tombstones": sum(s.tombstones for s in summary.values()),
        **{name: sum(s.counts[name] for s in summary.values()) for name in RECORD_COUNTS},
    }
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
            transform_records(extract_topic(spark, binding, topic, "read_uncommitted", plan.admin), binding.record_key)
        )
        all_records.count()  # read now, so the check below covers this read too
        new_aborted = transform_aborted(all_records, records)
    else:
        all_records = records
        new_aborted = empty_frame(spark, RECORD_SCHEMA)
    # A record without any audit header has no session or sequence (transform_records); one
    # read uncommitted is not counted.
    sequenced = read_uncommitted or totals["records_without_headers"] < totals["n"]
    check_nothing_deleted_while_read(plan.admin, topic)
    check_read_to_planned_end(binding, topic, {p: s.last[0] for p, s in summary.items()})
    behind_open = read_held(spark, binding, plan, persist)
    # After a rebuild `meta` is empty: only this run's checkpoints count.
    checkpoints = meta.checkpoints | checkpoint_prints(binding, summary, topic, plan.cleanup.compacted)
    # Rows whose record may have been deleted unread can never be judged: the bound only
    # grows until a --full run starts over.
    first_ms = {p: s.first_ms for p, s in summary.items()}
    backdated = record_stamps(plan, binding, summary, read_to)
    stamp_lag = stamp_lag_ms(backdated, plan.cleanup.timestamp_before_max_ms)
    horizon = loss_horizon(first_ms, topic, plan.upper, binding.grace_seconds, stamp_lag)
    if horizon is not None:
        plan.warnings.extend(lost_warnings(topic, horizon))
        if stamp_lag is None and backdated is not None:
            plan.warnings.append(
                f"the deleted records' rows are judged by no record's timestamp: {backdated.describe()} (set "
                "message.timestamp.before.max.ms on the topic to limit how old a record's timestamp may be, or "
                "message.timestamp.type=LogAppendTime)"
            )
    # Records the old topic held that no run read (produced after the last run) went with it,
    # unread: rows created before the new topic's first records are not judged. Processed
    # marks up to then may be of the old topic's records at the same offsets: left out, and
    # the records they could have marked are never called unprocessed.
    recreated_until = None
    if plan.recreated is not None:
        recreated_until = recreation_horizon(first_ms, plan.upper, binding.grace_seconds, stamp_lag)
        # not widened by stamp_lag: it tells the new topic's key-index entries (stamped since
        # its first records) from the deleted one's, and a later instant would hide the new ones
        plan.topic_records_since = recreation_horizon(first_ms, plan.upper, 0)
        horizon = recreated_until if horizon is None else max(horizon, recreated_until)
        plan.warnings.append(
            f"rows created up to {recreated_until.isoformat()} may have had their record in the deleted topic, "
            "unread: they are not reported missing, nor their records unprocessed"
        )
    mark_rules = rules_from_json(meta.marks_rewritten)
    if plan.memory is not None and plan.recreated is None:
        # Offsets already read were truncated and rewritten: the marks of the lost records
        # are still in the consumer ledger at the offsets the new records took.
        fresh_rules = find_mark_rules(
            records,
            plan.store.deltas(spark, plan.memory.key_deltas, KEY_INDEX_SCHEMA),
            plan.rewritten,
            {p: o.low for p, o in plan.kafka["watermarks"].items()},
            datetime.fromisoformat(plan.memory.window_upper) if plan.memory.window_upper else None,
            plan.upper,
            binding.grace_seconds,
        )
        plan.warnings.extend(rule.describe(binding.topic) for rule in fresh_rules)
        mark_rules += fresh_rules
    # A tombstone the cleaner removed while this run read the topic was not seen either: the
    # emptied horizon is taken when the read is over. A state written before runs tracked it
    # vouches for no read: its runs may have left emptied keys unjudged.
    previous = plan.previous
    last_read_ms = previous.read_at_ms if previous.emptied_tracked else None
    if previous.run_id and not previous.emptied_tracked and plan.cleanup.compacted:
        plan.warnings.append(
            "the state was written before runs tracked what the log cleaner may empty (a tombstone removed with "
            "every record of its key): this run judges as if no run had read the topic before"
        )
    compacted_until, compacted_rows_until, compaction_warnings = compaction_horizon(
        binding, plan.cleanup, plan.upper, last_read_ms, datetime.now(UTC)
    )
    plan.warnings.extend(compaction_warnings)
    earlier = datetime.fromisoformat(meta.unverifiable_until) if meta.unverifiable_until else None
    unverifiable_until = max((h for h in (earlier, horizon, compacted_rows_until) if h is not None), default=None)
    emptied_before = datetime.fromisoformat(meta.keys_emptied_until) if meta.keys_emptied_until else None
    keys_emptied_until = max((h for h in (emptied_before, compacted_rows_until) if h is not None), default=None)
    laps("topic_read")

    table, columns = extract_source_columns(spark, binding)
    source = SourceTable(table, columns, source_key_unique(spark, binding, table, columns))
    window_rows = transform_source_rows(
        extract_source(spark, binding, table, columns, plan.lower, plan.upper),
        "audit_key",
        "audit_created",
        unique=source.unique,
    )
    laps("source_query")
    old_source = plan.store.deltas(spark, meta.source_deltas, SOURCE_ROW_SCHEMA)
    # A ledger with nothing to read gives empty frames, without building its parse plan.
    # Each ledger's parse reads its records in several branches (entries, ranges, session
    # ends, keys, failure reports): the read is cached, so Kafka is read once per ledger and
    # every branch sees the same records.
    producer_entries = empty_frame(spark, LEDGER_ENTRY_SCHEMA)
    producer_bounds = empty_frame(spark, LEDGER_BOUND_SCHEMA)
    producer_ledger = read_ledger(
        spark, binding, plan.kafka["producer_ledger"], persist, plan.admin, plan.ledger_ids.get("producer")
    )
    if producer_ledger.records is not None:
        producer_entries, producer_bounds = transform_producer_ledger(
            producer_ledger.records, binding.topic, place_failures=True
        )
    # Entries deleted before any run read them: a hole of their sequences is no longer
    # explained, and is not called never-sent where the topic lost the records too.
    entries_lost_until = producer_ledger.lost_until(meta.entries_lost_until, plan.upper, binding.grace_seconds)
    entries_lost_until = recreated_ledger_horizon(
        "producer", plan.ledgers_recreated, producer_ledger.first_ms, plan.upper, binding.grace_seconds,
        entries_lost_until, plan.warnings,
    )  # fmt: skip
    if producer_ledger.plan.lost and entries_lost_until is not None:
        plan.warnings.extend(entries_lost_warnings(producer_ledger.plan, entries_lost_until))
    processed = empty_frame(spark, PROCESSED_SCHEMA)
    lost_marks = None
    first_marks = {group: dict(marks) for group, marks in meta.first_marks.items()}
    consumer_ledger = read_ledger(
        spark, binding, plan.kafka["consumer_ledger"], persist, plan.admin, plan.ledger_ids.get("consumer")
    )
    if consumer_ledger.records is not None:
        marks = persist(transform_consumer_ledger(consumer_ledger.records, binding.topic, binding.consumer_groups))
        # Every mark read shows where the group's consumer was probed, those left out below too.
        for row in marks.groupBy("group", "partition").agg(F.min("offset").alias("low")).collect():
            held = first_marks.setdefault(row["group"], {})
            held[row["partition"]] = min(row["low"], held.get(row["partition"], row["low"]))
        processed = persist(without_rewritten_marks(marks, mark_rules))
        # Marks its ledger could not write (marks-lost): neither processed nor unprocessed.
        lost_marks = persist(transform_lost_marks(consumer_ledger.records, binding.topic, binding.consumer_groups))
        if lost_marks.isEmpty():  # nearly always
            lost_marks = None
    # Processed marks deleted before any run read them: a record they marked would look
    # unprocessed. It was written before it was processed, so before the first mark left.
    marks_lost_until = consumer_ledger.lost_until(meta.marks_lost_until, plan.upper, binding.grace_seconds)
    marks_lost_until = recreated_ledger_horizon(
        "consumer", plan.ledgers_recreated, consumer_ledger.first_ms, plan.upper, binding.grace_seconds,
        marks_lost_until, plan.warnings,
    )  # fmt: skip
    if recreated_until is not None:
        processed = processed.where(F.col("ts_ms") > F.lit(int(recreated_until.timestamp() * 1000)))
        marks_lost_until = max(t for t in (marks_lost_until, recreated_until) if t is not None)
    if consumer_ledger.plan.lost and marks_lost_until is not None:
        plan.warnings.extend(marks_lost_warnings(consumer_ledger.plan, marks_lost_until))
    return RunInputs(
        records=records,
        all_records=all_records,
        new_aborted=new_aborted,
        totals=totals,
        sequenced=sequenced,
        unverifiable_until=unverifiable_until,
        marks_lost_until=marks_lost_until,
        first_marks=first_marks,
        first_marks_frame=local_frame(
            spark, [(g, p, low) for g, marks in first_marks.items() for p, low in marks.items()], FIRST_MARK_SCHEMA
        ),
        mark_rules=mark_rules,
        entries_lost_until=entries_lost_until,
        compacted_until=compacted_until,
        keys_emptied_until=keys_emptied_until,
        checkpoints=checkpoints,
        backdated=backdated,
        old_source=old_source,
        window_rows=window_rows,
        producer_entries=producer_entries,
        producer_bounds=producer_bounds,
        processed=processed,
        lost_marks=lost_marks,
        # a group whose offsets were deleted since a run saw them had read that far
        committed=local_frame(
            spark,
            standing_in(plan.kafka["committed"], plan.meta.group_commits, binding.consumer_groups),
            COMMITTED_SCHEMA,
        ),
        groups=local_frame(spark, [(g,) for g in binding.consumer_groups], "group string"),
        held=behind_open,
        source=source,
        unprobed_record_ms=max(
            (ms for ms in (meta.unprobed_record_ms, *(s.unprobed_ms for s in summary.values())) if ms is not None),
            default=None,
        ),
    )


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
    keep("duplicates", duplicates_of(keys, records, old("duplicates")))
    keep("pending_source", pending_of(keys, old("pending_source")))
    candidates = orphan_candidates_of(keys, records, old("orphan_candidates"))
    late = None
    if plan.lower is not None and inputs.source is not None:
        # Rows visible only after the windows that could have held them were read: their
        # records are no orphans (late_rows).
        candidates = persist(candidates)
        late = late_rows(spark, binding, inputs.source, candidates, plan.upper)
        if late is not None:
            late = persist(late)
            candidates = candidates.join(late.select("key"), "key", "left_anti")
        laps("late_rows")
    keep("orphan_candidates", candidates)
    # The datasets below are unions of the old one and this run's ledger entries, aborted
    # records or groups' records, less what is settled: empty when both are.
    old_aborted = old("aborted")
    new.keep_unless_empty(
        "aborted",
        [old_aborted, inputs.new_aborted],
        lambda: conform(old_aborted, RECORD_SCHEMA).unionByName(conform(inputs.new_aborted, RECORD_SCHEMA)),
    )
    if inputs.sequenced:
        coverage = keep("seq_coverage", transform_seq_coverage(old("seq_coverage"), inputs.all_records))
    else:  # no record read carries a sequence: the coverage is what it was
        coverage = new.keep_previous(spark, "seq_coverage", meta)
    old_open, old_bounds = old("ledger_open"), old("ledger_bounds")
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
    old_times = old("seq_times")
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
            None if is_empty_plan(lost_marks) else lost_marks,
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


def find_all(plan: RunPlan, inputs: RunInputs, new: RunState) -> DataFrame:
    """Every finding of the new state (FINDING_SCHEMA)."""
    spark = inputs.records.sparkSession
    watermarks = spark.createDataFrame(
        [(p, o.low, plan.topic.ranges[p][1]) for p, o in plan.kafka["watermarks"].items()], WATERMARK_SCHEMA
    )
    s = new.frames
    held = inputs.held
    if not is_empty_plan(s["ledger_bounds"]):
        # v2 acks a leader may still hold beyond the high watermarks read: judged by a later run
        maybe_held = acks_maybe_held(s["ledger_open"], plan.acks_judged_until_ms)
        held = maybe_held if held is None else held.unionByName(maybe_held)
    # Each finder below finds nothing in an empty dataset (gaps: none past a session's
    # ledgered bound); proven empty, it is not built at all.
    gaps = (
        None
        if is_empty_plan(s["ledger_bounds"])
        else find_gaps(
            s["seq_coverage"],
            s["ledger_open"],
            s["ledger_bounds"],
            watermarks,
            unverifiable_until=inputs.unverifiable_until,
            delivered_keys=plan.store.deltas(spark, new.key_deltas, KEY_INDEX_SCHEMA).select("key"),
            deleted_keys=None if is_empty_plan(s["tombstones"]) else s["tombstones"].select("key"),
            compacted_until=inputs.compacted_until,
            keys_emptied_until=inputs.keys_emptied_until,
            entries_lost_until=inputs.entries_lost_until,
            seq_times=s["seq_times"],
            sent_judged_until_ms=judged_until_ms(plan.read_at_ms, plan.send_outcome_ms),
            held=held,
        )
    )
    # a key the ledger acked and the topic lost: its row is missing because the broker lost it
    lost_acks = None if gaps is None else gaps.where(F.col("cause") == "broker-lost")
    optional: list[tuple[DataFrame, Callable[[], DataFrame]]] = [
        (s["aborted"], lambda: find_aborted(s["aborted"])),
        (
            s["unprocessed_candidates"],
            lambda: find_unprocessed(
                s["unprocessed_candidates"],
                inputs.committed,
                s["processed_coverage"],
                max((t for t in (inputs.compacted_until, inputs.marks_lost_until) if t is not None), default=None),
                inputs.mark_rules,
                inputs.first_marks_frame,
            ),
        ),
        (s["reprocessed"], lambda: find_reprocessed(s["reprocessed"])),
    ]
    return union_findings(
        [
            find_missing(
                s["pending_source"], plan.cutoff, inputs.unverifiable_until, s["lost_sightings"], lost_acks, held
            ),
            find_duplicates(s["duplicates"]),
            find_orphans(s["orphan_candidates"], plan.cutoff),
            *([] if gaps is None else [gaps]),
            *[build() for source, build in optional if not is_empty_plan(source)],
        ]
    )


def flag_new(spark: SparkSession, plan: RunPlan, current: DataFrame) -> DataFrame:
    """`is_new`: the previous run did not report the same finding (IDENTITY)."""
    seen = (
        plan.store.dataset(spark, plan.findings_before, "findings")
        .select(*[F.col(c).alias(f"_seen_{c}") for c in IDENTITY])
        .distinct()
    )
    return (
        current.join(seen, [current[c].eqNullSafe(seen[f"_seen_{c}"]) for c in IDENTITY], "left")
        .withColumn("is_new", F.col("_seen_kind").isNull())
        .drop(*[f"_seen_{c}" for c in IDENTITY])
    )


def count_findings(
    plan: RunPlan, inputs: RunInputs, new: RunState, flagged: DataFrame
) -> tuple[dict[str, int], int, int]:
    """Findings per kind, the rows that could not be checked and the header counts; how many
    findings are new, and how many there are (flagged: flag_new's output)."""
    counts = dict.fromkeys(FINDING_KINDS, 0)
    new_count = found = 0
    for row in flagged.groupBy("kind", "is_new").count().collect():
        counts[row["kind"]] = counts.get(row["kind"], 0) + row["count"]
        new_count += row["count"] if row["is_new"] else 0
        found += row["count"]
    until = inputs.unverifiable_until
    # Nothing is unverifiable while no record was ever deleted unread (no job to say so).
    counts[UNVERIFIABLE] = (
        unverifiable_rows(new.frames["pending_source"], plan.cutoff, until, new.frames["lost_sightings"]).count()
        if until is not None
        else 0
    )
    if counts[UNVERIFIABLE] and until is not None:
        why = "the topic no longer holds records that old"
        if inputs.keys_emptied_until is not None:
            why += " or the log cleaner may have removed every record of their items (compacted topic)"
        plan.warnings.append(
            f"{counts[UNVERIFIABLE]} source row(s) created up to {until.isoformat()} have no record "
            f"and cannot be checked: {why}"
        )
    # Not findings: the records this run read whose audit headers were absent or undecodable.
    return counts | {name: int(inputs.totals[name]) for name in RECORD_COUNTS}, new_count, found


def ledgers_read_after(plan: RunPlan) -> dict[str, dict[str, dict[int, int]]]:
    """state.json's ledgers_read after this run: where it stopped reading each ledger, and
    where earlier runs stopped for the partitions and ledger topics it did not read (no
    consumer group, a ledger topic that does not exist, another ledger named)."""
    read: dict[str, dict[str, dict[int, int]]] = {}
    for kind in LEDGER_KINDS:
        ledgers = {topic: dict(parts) for topic, parts in plan.meta.ledgers_read.get(kind, {}).items()}
        ledger: OffsetRange = plan.kafka[f"{kind}_ledger"]
        ledgers[ledger.topic] = ledgers.get(ledger.topic, {}) | {p: e for p, (_, e) in ledger.ranges.items()}
        read[kind] = {topic: parts for topic, parts in ledgers.items() if parts}
    return read


def commit_state(spark: SparkSession, plan: RunPlan, inputs: RunInputs, new: RunState) -> None:
    """Point state.json at the new state: last, so a failed run leaves the old one."""
    store, kafka = plan.store, plan.kafka
    until = inputs.unverifiable_until
    # on a partition a rebuild found rewritten, a committed offset may predate the truncation
    group_commits, unproven_commits = remember(
        plan.meta.group_commits,
        plan.meta.unproven_commits,
        kafka["committed"],
        {p: (o.low, o.high) for p, o in kafka["watermarks"].items()},
        plan.run_id,
        plan.read_at_ms,
        rewritten=plan.rewritten if plan.memory is not None else (),
    )
    ledgers_read = ledgers_read_after(plan)
    store.commit(
        StateMeta(
            run_id=plan.run_id,
            topic_offsets={p: e for p, (_, e) in plan.topic.ranges.items()},
            producer_ledger_offsets=ledgers_read["producer"].get(kafka["producer_ledger"].topic, {}),
            consumer_ledger_offsets=ledgers_read["consumer"].get(kafka["consumer_ledger"].topic, {}),
            ledgers_read=ledgers_read,
            ledger_ids=ledger_ids_after(plan.meta.ledger_ids, plan.ledger_ids, ledgers_read),
            producer_ledger_topic=kafka["producer_ledger"].topic,
            consumer_ledger_topic=kafka["consumer_ledger"].topic,
            topic_id=plan.topic_id or plan.previous.topic_id,  # unread this run: the last one known
            topic_records_since=(
                plan.topic_records_since.isoformat() if plan.topic_records_since else plan.previous.topic_records_since
            ),
            window_upper=plan.upper.isoformat(),
            unverifiable_until=until.isoformat() if until else None,
            marks_lost_until=inputs.marks_lost_until.isoformat() if inputs.marks_lost_until else None,
            entries_lost_until=inputs.entries_lost_until.isoformat() if inputs.entries_lost_until else None,
            keys_emptied_until=inputs.keys_emptied_until.isoformat() if inputs.keys_emptied_until else None,
            emptied_tracked=True,
            key_deltas=store.compact(spark, new.key_deltas, "keys", KEY_INDEX_SCHEMA),
            source_deltas=store.compact(spark, new.source_deltas, "source", SOURCE_ROW_SCHEMA),
            datasets=new.datasets,
            checkpoints=inputs.checkpoints,
            marks_rewritten=rules_to_json(inputs.mark_rules),
            first_marks=inputs.first_marks,
            identity=plan.identity,
            timestamp_zone=plan.timestamp_zone,
            # Only with the id of the topic read: a run that could not read it keeps the last one,
            # which may be of a topic deleted since; its read would then seem to be of that one,
            # and every record of the new topic to have been written after it.
            read_at_ms=plan.read_at_ms if plan.topic_id or not plan.previous.topic_id else None,
            read_highs={p: o.high for p, o in kafka["watermarks"].items()},
            backdated=inputs.backdated.to_json() if inputs.backdated else None,
            unprobed_record_ms=inputs.unprobed_record_ms,
            group_commits=group_commits,
            unproven_commits=unproven_commits,
        )
    )
