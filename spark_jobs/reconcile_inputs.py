"""Phase 2 of a reconciliation run, after plan_run (reconcile_plan.py): extract_inputs reads
the planned offsets of the topic, the source window and both ledgers, checks that nothing was
deleted, truncated or rewritten under the reads, and hands on RunInputs. update_state
(reconcile_new_state.py) follows."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from confluent_kafka.admin import AdminClient
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.binding import Binding, BindingError
from spark_jobs.commit_history import PassedSpan
from spark_jobs.group_commits import standing_in
from spark_jobs.late_rows import SourceTable
from spark_jobs.ledger_ids import LedgerId, check_ledger_unchanged, recreated_ledger_horizon
from spark_jobs.mark_rules import rules_from_json
from spark_jobs.reconcile_extract import (
    OffsetRange,
    PartitionSummary,
    check_nothing_deleted_while_read,
    check_read_to_planned_end,
    checkpoint_prints,
    compaction_horizon,
    entries_lost_warnings,
    extract_source,
    extract_source_table,
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
from spark_jobs.reconcile_parsing import closed_consumer_sessions
from spark_jobs.reconcile_plan import Laps, RunInputs, RunPlan, window_end
from spark_jobs.reconcile_rewrites import find_mark_rules, without_rewritten_marks
from spark_jobs.reconcile_transform import (
    COMMITTED_SCHEMA,
    KEY_INDEX_SCHEMA,
    LEDGER_BOUND_SCHEMA,
    LEDGER_ENTRY_SCHEMA,
    PROCESSED_INTERVAL_SCHEMA,
    PROCESSED_SCHEMA,
    RECORD_COUNTS,
    RECORD_SCHEMA,
    SOURCE_ROW_SCHEMA,
    empty_frame,
    local_frame,
    transform_aborted,
    transform_consumer_ledger,
    transform_lost_marks,
    transform_producer_ledger,
    transform_records,
    transform_source_rows,
)
from spark_jobs.record_times import Backdated, find_backdated, stamp_lag_ms, written_after_read


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

    table, columns, source_now = extract_source_table(spark, binding)
    # rows are stamped by the source's clock: the window ends at it where the driver's runs ahead
    plan.source_upper, clock_notes = window_end(plan.upper, source_now)
    # ... and as long before as the plan began to read the log ends: a row created after that may
    # have its record written after the log ends were read, and the plan's own reads can take
    # longer than the grace (a frozen broker's leaderships or configs waited for)
    plan.source_upper -= max(plan.upper - plan.reads_began, timedelta(0))
    plan.warnings.extend(clock_notes)
    source = SourceTable(table, columns, source_key_unique(spark, binding, table, columns))
    window_rows = transform_source_rows(
        extract_source(spark, binding, table, columns, plan.lower, plan.source_upper),
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
    closed: set[str] = set()
    # (group, partition, session) -> its highest mark read, and session -> the time of its latest
    # mark record read (the record's first_ms: every mark it made before then is in that record
    # or an earlier one), by this run or, for sessions with spans waiting, by earlier ones
    # (StateMeta.session_marks)
    highest: dict[tuple[str, int, str], int] = {(g, p, s): high for g, p, s, high, _ in meta.session_marks}
    latest: dict[str, int] = {}
    for _, _, session, _, seen_ms in meta.session_marks:
        latest[session] = max(seen_ms, latest.get(session, seen_ms))
    first_marks = {group: dict(marks) for group, marks in meta.first_marks.items()}
    consumer_ledger = read_ledger(
        spark, binding, plan.kafka["consumer_ledger"], persist, plan.admin, plan.ledger_ids.get("consumer")
    )
    if consumer_ledger.records is not None:
        marks = persist(transform_consumer_ledger(consumer_ledger.records, binding.topic, binding.consumer_groups))
        # Every mark read shows where the group's consumer was probed, those left out below too;
        # each session's highest bounds what a kill may have taken of its marks (died_passed).
        by_session = marks.groupBy("group", "partition", "consumer_session").agg(
            F.min("offset").alias("low"), F.max("offset").alias("high"), F.max("ts_ms").alias("seen_ms")
        )
        for row in by_session.collect():
            held = first_marks.setdefault(row["group"], {})
            held[row["partition"]] = min(row["low"], held.get(row["partition"], row["low"]))
            if (session := row["consumer_session"]) is not None:
                at = (row["group"], row["partition"], session)
                highest[at] = max(row["high"], highest.get(at, row["high"]))
                if row["seen_ms"] is not None:
                    latest[session] = max(row["seen_ms"], latest.get(session, row["seen_ms"]))
        processed = persist(without_rewritten_marks(marks, mark_rules))
        # Marks its ledger could not write (marks-lost): neither processed nor unprocessed.
        lost_marks = persist(transform_lost_marks(consumer_ledger.records, binding.topic, binding.consumer_groups))
        if lost_marks.isEmpty():  # nearly always
            lost_marks = None
        # Where a group's commits name probed sessions: a session may close after this run read
        # the commit history and before it read the ledger's end, so the next run remembers it.
        if plan.kafka.get("sessions_named") or plan.kafka.get("session_passed") or meta.passed_unjudged:
            closed = closed_consumer_sessions(consumer_ledger.records)
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

    # What probed sessions that did not close passed, unjudged until they mark past it or close:
    # this run's spans and those earlier runs left, less what this run's marks settle.
    # The sessions whose close the last run read count as closed too: their last commits may
    # be read only now (StateMeta.sessions_closed).
    # A session may be processing what its commit passed for its processing bound after the
    # commit, and marks in any order (a worker pool): its marks settle a span only once the
    # ledger holds a mark record of it made after the bound had passed since the commit (a
    # mark of a record processed within the bound is in that record or an earlier one).
    def judged_until(session: str) -> int:
        seen = latest.get(session)
        return -(1 << 62) if seen is None else seen - binding.processing_bound(session)

    ended = closed | set(meta.sessions_closed)
    unjudged = still_unjudged(
        meta.passed_unjudged,
        died_passed(
            plan.kafka.get("last_passed") or [], plan.kafka.get("session_passed") or [], ended, highest, judged_until
        ),
        ended,
        highest,
        set(binding.consumer_groups),
        judged_until,
    )
    waiting = {(group, partition, session) for group, partition, _, _, session, _ in unjudged}
    # Until when the newest of them may still be in their session's hands: a run after then judges
    # them if the session marks again (one that died keeps them unjudged for good).
    read_ms = int(plan.kafka.get("history_read_ms") or time.time() * 1000)
    processing_until_ms = max(
        (until for _, _, _, _, session, ts in unjudged if (until := ts + binding.processing_bound(session)) > read_ms),
        default=None,
    )
    if processing_until_ms is not None:
        plan.warnings.append(
            "records probed consumer sessions committed past within their processing bound (max.poll.interval.ms) "
            "and have not marked are not judged yet: they may still be in the consumer's hands (judged by a run from "
            f"{datetime.fromtimestamp(processing_until_ms / 1000, UTC).isoformat()})"
        )
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
        plain_passed=local_intervals(spark, plan.kafka.get("plain_passed") or []),
        died_passed=local_intervals(spark, [span[:4] for span in unjudged]),
        passed_unjudged=unjudged,
        session_marks=sorted((*at, high, latest.get(at[2], -1)) for at, high in highest.items() if at in waiting),
        processing_until_ms=processing_until_ms,
        sessions_closed=sorted(closed),
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


def died_passed(
    last_passed: list[PassedSpan],
    session_passed: list[PassedSpan],
    closed: set[str],
    highest: dict[tuple[str, int, str], int],
    judged_until: Callable[[str], int],
) -> list[PassedSpan]:
    """(group, partition, first, last offset, session, commit time) that a probed session whose
    ledger does not hold its `closed` session-end in what this run read took its group past, and
    may have processed with the marks dying with it, or still be processing: what its last commit
    passed (commit_history.last_passed: a commit made before processing) and what any of its
    commits passed (commit_history.session_passed: an asynchronous commit does not wait for the
    marks handed before it). All of a span its session committed after `judged_until(session)`:
    the time of the session's latest mark record read less its processing bound
    (spark_jobs.processing_bound). A worker pool marks in the order its records finish, so a
    later mark says nothing of a record still in its hands, and a kill may take the mark of a
    record below the highest one; but a record it processed within the bound after the commit
    was marked before a mark record made once the bound had passed, and the ledger writes a
    session's records in order. Of an older span, what lies above the highest offset the session
    marked on that partition in the runs' reads, all of it where it marked none there: a
    sequential consumer that commits before it processes marks a record after its commit (a kill
    takes the latest marks). The rest, unmarked, was not processed by the session (and a span an
    earlier run left is settled by the same rule, still_unjudged)."""
    return sorted(set(_above_marks([*last_passed, *session_passed], closed, highest, judged_until)))


def _above_marks(
    spans: Iterable[PassedSpan],
    closed: set[str],
    highest: dict[tuple[str, int, str], int],
    judged_until: Callable[[str], int],
) -> Iterator[PassedSpan]:
    """Of each span: none where its session is in `closed`; all of it where the session
    committed it after `judged_until(session)`; otherwise its offsets above the session's
    highest mark on the partition (all of it where it marked none there)."""
    for group, partition, first, last, session, ts in spans:
        if session in closed:
            continue
        above = None if ts > judged_until(session) else highest.get((group, partition, session))
        start = first if above is None else max(first, above + 1)
        if start <= last:
            yield group, partition, start, last, session, ts


def still_unjudged(
    earlier: list[PassedSpan],
    now: list[PassedSpan],
    closed: set[str],
    highest: dict[tuple[str, int, str], int],
    groups: set[str],
    judged_until: Callable[[str], int],
) -> list[PassedSpan]:
    """The spans (died_passed) whose records stay unjudged after this run: this run's, and
    those earlier runs left (StateMeta.passed_unjudged) less what this run's read of the
    ledger settles. A session may have died there with its marks, or still be processing:
    neither `unprocessed` nor dropped, its records wait. Its `closed` session-end read settles
    all of its spans (its close wrote its marks first); once the ledger holds a mark record of
    the session made after its processing bound had passed since the commit, a mark on the
    partition above a span's offsets settles them (died_passed), and those records are judged
    as any other. A session that died keeps its spans for good (a miss at worst, never an
    alarm); a group the binding no longer names loses them with its candidates."""
    settled = _above_marks((span for span in earlier if span[0] in groups), closed, highest, judged_until)
    return sorted(set(now) | set(settled))


def local_intervals(spark: SparkSession, intervals: list[tuple[str, int, int, int]]) -> DataFrame | None:
    """Offset intervals as a PROCESSED_INTERVAL_SCHEMA frame; None: none."""
    return local_frame(spark, intervals, PROCESSED_INTERVAL_SCHEMA) if intervals else None
