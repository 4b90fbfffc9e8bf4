"""Findings of the reconciliation: state → findings frames in FINDING_SCHEMA."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from spark_jobs.mark_rules import MarkRule
from spark_jobs.reconcile_helpers import (
    _ms_to_ts,
    _occurrence,
    conform,
    empty_frame,
    first_marks,
    interval_holes,
    merge_intervals,
    range_anti,
)
from spark_jobs.reconcile_rewrites import judged_despite_rewrites
from spark_jobs.reconcile_schemas import (
    ACKED_RANGE,
    FINDING_SCHEMA,
    INTERVAL_SCHEMA,
    LOST_SIGHTING_SCHEMA,
    SENT,
    SEQ_TIME_BUCKET,
)

# Windows of `created` leader changes hold (failover_hold.held_window), each with the keys it
# does not hold (column `key`): find_missing's `held_late`.
HeldLate = list[tuple[tuple[datetime, datetime], DataFrame]]


def _finding(df: DataFrame, kind: str, **columns: Column) -> DataFrame:
    selected = df.select(*[col.alias(name) for name, col in columns.items()]).withColumn("kind", F.lit(kind))
    return conform(selected, FINDING_SCHEMA)


def _first_sighting(lost_sightings: DataFrame) -> DataFrame:
    """key, _seen: the earliest lost sighting of each key."""
    seen = F.struct("partition", "offset", "timestamp", "session", "seq", "run_id", "detected_run")
    return lost_sightings.groupBy("key").agg(F.min(seen).alias("_seen"))


_ACKED_FIELDS = ("timestamp", "session", "seq", "partition", "offset")
# the type of _first_lost_ack's `_acked`, for runs with no ledger to join
_ACKED_TYPE = StructType([FINDING_SCHEMA[name] for name in _ACKED_FIELDS])


def _first_lost_ack(lost_acks: DataFrame) -> DataFrame:
    """key, _acked: the earliest acked-then-lost ledger entry of each key (gap findings)."""
    acked = F.struct(*_ACKED_FIELDS)
    return lost_acks.where(F.col("key").isNotNull()).groupBy("key").agg(F.min(acked).alias("_acked"))


def find_missing(
    pending: DataFrame,
    cutoff: datetime,
    unverifiable_until: datetime | None,
    lost_sightings: DataFrame | None = None,
    lost_acks: DataFrame | None = None,
    held: DataFrame | None = None,
    kept: tuple[datetime, DataFrame] | None = None,
    held_late: HeldLate | None = None,
) -> DataFrame:
    """Source rows older than the grace cutoff with no record, except the unverifiable ones
    and those whose key has a record in `held` (column `key`: records behind an open
    transaction, which the run read up to; a later run reads them), or that were created in
    one of `held_late`'s windows ((start, end] of `created`: after a leader change whose failover
    may still hold their sends, spark_jobs.failover_hold) with no evidence of a loss (a sighting,
    a lost ack) and a key not among that window's (column `key`: the rows it judges anyway,
    reconcile_report.late_rows_held):
    those are judged by a later run. `kept` (a clock stepped
    back: reconcile_report.reported_before): a cutoff and the rows (key, created) the last run
    reported missing, which are past the cutoff up to that one whatever the clock reads now.

    A row whose record an earlier run saw at an offset that now holds another record (or
    lies past the log end) is missing with cause `broker-lost`, naming where and which run
    saw it: that is known, not unverifiable. So is a row whose key a probed producer's
    ledger acked and the topic no longer holds (`lost_acks`: the `gap` findings with cause
    broker-lost, FINDING_SCHEMA), naming the producer session and sequence.
    """
    late = _past_grace(pending, cutoff, lost_sightings, lost_acks, held, kept)
    seen, acked = F.col("_seen"), F.col("_acked")
    if held_late is not None:
        late = _late_held(late, held_late).where(~F.col("_late_held"))
    if unverifiable_until is not None:
        late = late.where((F.col("created") > F.lit(unverifiable_until)) | seen.isNotNull() | acked.isNotNull())
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
        F.when(
            acked.isNotNull(),
            F.struct(
                acked["session"].alias("session"),
                acked["seq"].alias("seq"),
                F.unix_millis(acked["timestamp"]).alias("ts_ms"),
                acked["partition"].alias("partition"),
                acked["offset"].alias("offset"),
            ),
        ).alias("acked"),
    )
    return _finding(
        late,
        "missing",
        key=F.col("key"),
        cause=F.when(seen.isNotNull() | acked.isNotNull(), F.lit("broker-lost")),
        partition=F.coalesce(seen["partition"], acked["partition"]),
        offset=F.coalesce(seen["offset"], acked["offset"]),
        timestamp=F.col("created"),
        evidence=F.to_json(evidence),
    )


def _past_grace(
    pending: DataFrame,
    cutoff: datetime,
    lost_sightings: DataFrame | None,
    lost_acks: DataFrame | None,
    held: DataFrame | None,
    kept: tuple[datetime, DataFrame] | None,
) -> DataFrame:
    """find_missing's rows past the cutoff with no record, with `_seen` (their first lost
    sighting) and `_acked` (their first lost ack) where they have one."""
    if lost_sightings is None:
        lost_sightings = empty_frame(pending.sparkSession, LOST_SIGHTING_SCHEMA)
    if held is not None:
        pending = pending.join(held.where(F.col("key").isNotNull()).select("key").distinct(), "key", "left_anti")
    late = _past_cutoff(pending, F.col("created"), cutoff, kept, ["key", "created"]).join(
        _first_sighting(lost_sightings), "key", "left"
    )
    if lost_acks is None:
        return late.withColumn("_acked", F.lit(None).cast(_ACKED_TYPE))
    return late.join(_first_lost_ack(lost_acks), "key", "left")


def _late_held(late: DataFrame, held_late: HeldLate) -> DataFrame:
    """`late` (_past_grace) with `_late_held`: created in a window a leader change holds, with
    no evidence of a loss, and a key that window does not leave out (find_missing)."""
    loss = F.col("_seen").isNotNull() | F.col("_acked").isNotNull()
    held = F.lit(False)
    for i, ((start, end), judged) in enumerate(held_late):
        flag = f"_judged{i}"
        late = late.join(judged.distinct().withColumn(flag, F.lit(True)), "key", "left")
        in_window = (F.col("created") > F.lit(start)) & (F.col("created") <= F.lit(end))
        held = held | (in_window & F.col(flag).isNull())
    return late.withColumn("_late_held", held & ~loss).drop(*[f"_judged{i}" for i in range(len(held_late))])


def late_held_rows(
    pending: DataFrame,
    cutoff: datetime,
    unverifiable_until: datetime | None,
    held_late: HeldLate,
    lost_sightings: DataFrame | None = None,
    lost_acks: DataFrame | None = None,
    held: DataFrame | None = None,
) -> DataFrame:
    """The rows find_missing leaves out for a leader change (`held_late`): past the grace with
    no record, created in the window it holds; an unverifiable one is counted as such instead.
    The arguments are find_missing's."""
    rows = _late_held(_past_grace(pending, cutoff, lost_sightings, lost_acks, held, None), held_late)
    rows = rows.where(F.col("_late_held"))
    if unverifiable_until is not None:
        rows = rows.where(F.col("created") > F.lit(unverifiable_until))
    return rows.select("key", "created")


def unverifiable_rows(
    pending: DataFrame,
    cutoff: datetime,
    unverifiable_until: datetime | None,
    lost_sightings: DataFrame | None = None,
    lost_acks: DataFrame | None = None,
    held: DataFrame | None = None,
) -> DataFrame:
    """Rows past grace with no record that may have had one among records deleted unread.

    unverifiable_until: the newest `created` whose record may have been deleted before it
    was read (None: nothing was lost). These rows are counted, never reported `missing`.
    Rows with a lost sighting or a lost ack are known lost (find_missing: `missing`,
    broker-lost), not unverifiable; nor is a row whose key has a record in `held` (behind an
    open transaction: judged by a later run). The arguments are find_missing's.
    """
    if unverifiable_until is None:
        return pending.limit(0)
    rows = pending.where((F.col("created") <= F.lit(cutoff)) & (F.col("created") <= F.lit(unverifiable_until)))
    for known in (lost_sightings, lost_acks, held):
        if known is not None:
            rows = rows.join(known.where(F.col("key").isNotNull()).select("key").distinct(), "key", "left_anti")
    return rows


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


def _past_cutoff(
    rows: DataFrame, time: Column, cutoff: datetime, kept: tuple[datetime, DataFrame] | None, on: list[str]
) -> DataFrame:
    """The rows whose `time` is up to the cutoff, and, `kept` (a cutoff and rows an earlier run
    reported, matched on the `on` columns), those reported then whose time is up to its cutoff."""
    if kept is None:
        return rows.where(time <= F.lit(cutoff))
    kept_cutoff, reported = kept
    marked = reported.select(*on).distinct().withColumn("_reported", F.lit(True))
    return (
        rows.join(F.broadcast(marked), on, "left")
        .where((time <= F.lit(cutoff)) | (F.col("_reported").isNotNull() & (time <= F.lit(kept_cutoff))))
        .drop("_reported")
    )


def find_orphans(candidates: DataFrame, cutoff: datetime, kept: tuple[datetime, DataFrame] | None = None) -> DataFrame:
    """Records whose key has no source row (cause `no-key` when no key could be found). `kept`
    (a clock stepped back): a cutoff and the records (partition, offset) the last run reported
    orphan, which are past the cutoff up to that one whatever the clock reads now."""
    old_enough = _past_cutoff(candidates, F.col("timestamp"), cutoff, kept, ["partition", "offset"])
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


def acks_maybe_held(ledger_open: DataFrame, judged_until_ms: int) -> DataFrame:
    """key, session, seq of the open v2 acked-range entries (acked, no record read) acked
    possibly after `judged_until_ms` (spark_jobs.watermark_hold.acks_judged_until), or at an unknown
    time: a leader may have acked the record alone and still hold it beyond the high watermark
    the run read to. Like records behind an open transaction (find_gaps' and find_missing's
    `held`), they are judged by a later run: neither their sequence nor their row is reported."""
    # the latest the ack can have come: the ledger record saying so, else the end of the window
    acked = F.greatest(F.col("acked_by_ms"), F.col("to_ms"), F.col("ts_ms"))
    return ledger_open.where(
        (F.col("status") == ACKED_RANGE) & (acked.isNull() | (acked > F.lit(judged_until_ms)))
    ).select(F.col("audit_id").alias("key"), "session", "seq")


def _last_sent() -> Column:
    """A ledger entry's latest send time (ms; null where it has none)."""
    return F.coalesce(F.col("to_ms"), F.col("ts_ms"))


def sends_unjudged(ledger_open: DataFrame, judged_until_ms: int) -> DataFrame:
    """key, session, seq of the open `unconfirmed` or `sent` entries last sent after
    `judged_until_ms`: the probe has not resolved them, and the producer may still be retrying
    them (a leader failing over holds its partitions' sends for as long as the election takes).
    Like acks_maybe_held's, they are judged by a later run: neither their sequence (find_gaps)
    nor their row is reported, where the row would otherwise be `missing` once older than the
    grace while its record was still on its way (lab run #17, stop 78). An entry without a send
    time (unparsed) holds no row: it would hide it for good."""
    unresolved = F.col("status").isin("unconfirmed", SENT) & (_last_sent() > F.lit(judged_until_ms))
    return ledger_open.where(unresolved & F.col("audit_id").isNotNull()).select(
        F.col("audit_id").alias("key"), "session", "seq"
    )


def find_gaps(
    coverage: DataFrame,
    ledger_open: DataFrame,
    bounds: DataFrame,
    watermarks: DataFrame,
    *,
    unverifiable_until: datetime | None = None,
    delivered_keys: DataFrame | None = None,
    compacted_until: datetime | None = None,
    keys_emptied_until: datetime | None = None,
    deleted_keys: DataFrame | None = None,
    entries_lost_until: datetime | None = None,
    seq_times: DataFrame | None = None,
    sent_judged_until_ms: int | None = None,
    held: DataFrame | None = None,
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
    so before the topic's end offsets were: a resolved record is below `end` once the high
    watermark passed it, which an ack given by a leader alone (acks=1) does not show (`held`).

    `delivered_keys` (column `key`: keys with a record in the topic, any run): a failed or
    unconfirmed send whose item another send delivered (the application sent it again) is no
    gap: the item was produced, and the re-send shows as its own record (a duplicate when both
    landed). A lost acked record stays broker-lost: the broker lost it whatever the item's fate,
    except on a compacted topic (kafka_cleanup): an acked record produced up to
    `compacted_until` may have been removed by the log cleaner, which it does once a later
    record has the same record key. It is unverifiable when its item has a record in the topic
    (superseded), or a tombstone in `deleted_keys` (column `key`: the application deleted the
    item, and the cleaner removes every record before a tombstone), when it was produced up to
    `keys_emptied_until` (the cleaner may have removed every record of its item:
    reconcile_extract.compaction_horizon), or when its ack names no key (v2 ranges).

    An `unconfirmed` or `sent` sequence last sent after `sent_judged_until_ms` (the run's read
    of the topic less the send outcome bound, spark_jobs.send_outcome: the unresolved tail of a live producer, a record its
    retries through a leader failover may still write, an acks=0 request still on its way) is
    not judged yet: it stays open for a later run, and its sequence is no `never-sent` hole.
    Nor is a hole below a higher sequence sent after `sent_judged_until_ms` (_sent_by_judged):
    the hole's sends came before it.

    `held` (columns `session`, `seq`): records past the last stable offset the run read to,
    behind another producer's open transaction, and v2 acks whose records may lie past the high
    watermark (acks_maybe_held). A sequence among them was written: it is not judged this run
    (its entry stays open; the run that reads the record covers it) and is no hole. A v2 range
    has no offset to tell that it lies past the end read.

    A hole is looked for up to the session's bound, and no further than the `last_seq` of a
    session-end saying a ledger record of the session was lost (`lost_after`): the lost record
    may have named the sequences past it (their failures, acks or keys), and its absence is no
    proof they were never sent. A hole without any ledger entry is `never-sent` unless its sequences may have been
    produced up to both `unverifiable_until` (the topic deleted records before any run read
    them) and `entries_lost_until` (so did the producer ledger, with their entries): then
    nothing is left to tell. `seq_times` (SEQ_TIMES_SCHEMA) bounds when a hole was produced
    from below, by the newest record of any lower block of its session; a hole with no lower
    block, or whose lower blocks are not newer than both bounds, is not reported.
    """
    marks = watermarks.select("partition", F.col("low").alias("_low"), F.col("end").alias("_end"))
    entries = (
        ledger_open.join(bounds, "session", "inner")
        .where(F.col("seq") <= F.col("last_seq"))
        .join(marks, "partition", "left")
    )
    held_seqs = (
        None
        if held is None
        else held.where(F.col("session").isNotNull() & F.col("seq").isNotNull())
        .select("session", "seq", F.lit(True).alias("_held"))
        .distinct()
    )
    if held_seqs is not None:
        entries = entries.join(held_seqs, ["session", "seq"], "left")
    acked_at = (F.col("status") == "acked") & (F.col("offset") >= 0)
    # An ack in a partition without a log end read this run (added after the run read the
    # ends) is not judged: a later run reads it.
    unverifiable = acked_at & (
        (F.col("offset") < F.coalesce(F.col("_low"), F.lit(0)))
        | (F.col("offset") >= F.col("_end"))
        | F.col("_end").isNull()
    )
    if held_seqs is not None:
        unverifiable = unverifiable | F.col("_held").isNotNull()
    if unverifiable_until is not None:
        until_ms = int(unverifiable_until.timestamp() * 1000)
        unverifiable = unverifiable | (
            (F.col("status") == ACKED_RANGE) & (F.coalesce(F.col("ts_ms"), F.lit(0)) <= F.lit(until_ms))
        )
    if sent_judged_until_ms is not None:
        last_sent = _last_sent()
        unverifiable = unverifiable | (
            F.col("status").isin("unconfirmed", SENT) & (last_sent.isNull() | (last_sent > F.lit(sent_judged_until_ms)))
        )
    explained = entries.where(F.col("status").isin("acked", "unconfirmed", "failed", ACKED_RANGE, SENT))
    reported = explained.where(~F.coalesce(unverifiable, F.lit(False)))
    if delivered_keys is not None or compacted_until is not None:
        delivered = (
            delivered_keys.select(F.col("key").alias("_delivered")).distinct()
            if delivered_keys is not None
            else empty_frame(entries.sparkSession, "_delivered string")
        )
        has_record = F.col("_delivered").isNotNull()
        dropped = F.col("status").isin("failed", "unconfirmed", SENT) & has_record
        reported = reported.join(delivered, reported["audit_id"] == delivered["_delivered"], "left")
        if compacted_until is not None:
            until_ms = int(compacted_until.timestamp() * 1000)
            superseded = has_record
            if deleted_keys is not None:
                deleted = deleted_keys.select(F.col("key").alias("_deleted")).distinct()
                reported = reported.join(deleted, reported["audit_id"] == deleted["_deleted"], "left")
                superseded = superseded | F.col("_deleted").isNotNull()
            produced = F.coalesce(F.col("ts_ms"), F.lit(0))
            emptied = (
                F.lit(False)
                if keys_emptied_until is None
                else produced <= F.lit(int(keys_emptied_until.timestamp() * 1000))
            )
            dropped = dropped | (
                F.col("status").isin("acked", ACKED_RANGE)
                & (produced <= F.lit(until_ms))
                & (superseded | emptied | F.col("audit_id").isNull())
            )
        reported = reported.where(~dropped).drop("_delivered", "_deleted")
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
    if held_seqs is not None:
        points = points.unionByName(held_seqs.select("session", F.col("seq").alias("start"), F.col("seq").alias("end")))
    covered = merge_intervals(conform(coverage, INTERVAL_SCHEMA).unionByName(points), ["session"])
    # past a lost ledger record's checkpoint, the sequences it may have named are not known
    known_until = F.least("last_seq", "lost_after")  # least skips nulls: no loss, the bound
    holes = interval_holes(covered, bounds.select("session", known_until.alias("last_seq")), ["session"])
    if unverifiable_until is not None and entries_lost_until is not None:
        holes = _produced_after(holes, seq_times, min(unverifiable_until, entries_lost_until))
    if sent_judged_until_ms is not None:
        holes = _sent_by_judged(holes, coverage, ledger_open, seq_times, sent_judged_until_ms)
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


def lost_gaps_kept(
    before: DataFrame, gaps: DataFrame | None, watermarks: DataFrame, coverage: DataFrame | None = None
) -> DataFrame:
    """The `broker-lost` gaps an earlier run reported (`before`: its findings) whose offset
    retention has since deleted (below the partition's log start in `watermarks`), which
    `gaps` (this run's) no longer holds, and whose sequence `coverage` (INTERVAL_SCHEMA by
    session: the sequences read in the topic) does not hold either.

    find_gaps counts an acked entry below the log start as present: read by no run, it may
    have been there. One a run read and found lost stays lost; without this, the run after
    retention passed its offset would drop the finding and resolve its alert, "can no longer
    be read" taken for "recovered". A sequence some run read in the topic was delivered after
    all: that gap is not kept (and a --full run keeps none: the caller's choice)."""
    low = watermarks.select("partition", F.col("low").alias("_low"))
    kept = (
        before.where((F.col("kind") == "gap") & (F.col("cause") == "broker-lost") & F.col("offset").isNotNull())
        .join(low, "partition", "inner")
        .where(F.col("offset") < F.col("_low"))
        .drop("_low")
    )
    if gaps is not None:
        kept = kept.join(gaps.select("session", "seq").distinct(), ["session", "seq"], "left_anti")
    if coverage is not None:
        read = coverage.select(F.col("session").alias("_s"), F.col("start").alias("_from"), F.col("end").alias("_to"))
        kept = kept.join(
            read,
            (kept["session"] == read["_s"]) & kept["seq"].between(read["_from"], read["_to"]),
            "left_anti",
        )
    return conform(kept, FINDING_SCHEMA)


def _sent_by_judged(
    holes: DataFrame,
    coverage: DataFrame,
    ledger_open: DataFrame,
    seq_times: DataFrame | None,
    judged_until_ms: int,
) -> DataFrame:
    """The holes (session, start, end) whose sends, if any, were issued up to
    `judged_until_ms`, or that nothing above bounds.

    A session numbers its sends in order, so a hole's sequences were sent before any higher
    one: the time of a higher ledger entry (v1: its delivery report; v2: the end of its range's
    window) or of a higher record read (its block's newest timestamp, seq_times) bounds the
    hole's send from above. The nearest such bound after the send outcome wait, like a `sent`
    entry's: a v1 probe ledgers a sequence only once its report comes, and while one
    partition's leader fails over the sequences sent to the others are acked and ledgered
    around a hole that its retries may still fill. A hole nothing bounds (past the last record
    and entry: a session end's `last_seq`) is judged as before.
    """
    keys = ["session", "start", "end"]
    entries = ledger_open.select(
        F.col("session").alias("_s"),
        F.col("seq").alias("_seq"),
        F.coalesce(F.col("to_ms"), F.col("ts_ms")).alias("_sent_by"),
    ).where(F.col("_sent_by").isNotNull())
    bounds = (
        holes.join(entries, (holes["session"] == entries["_s"]) & (entries["_seq"] > holes["end"]), "inner")
        .groupBy(*keys)
        .agg(F.min("_sent_by").alias("_sent_by"))
    )
    if seq_times is not None:
        # The block of the hole's last sequence bounds it only where a record above the hole
        # lies in that block (the next sequence was read); a higher block always does.
        seen = coverage.select(F.col("session").alias("_s"), F.col("start").alias("_from"), F.col("end").alias("_to"))
        next_read = holes.join(
            seen,
            (holes["session"] == seen["_s"]) & (seen["_from"] <= holes["end"] + 1) & (seen["_to"] >= holes["end"] + 1),
            "left_semi",
        ).select(*keys, F.lit(True).alias("_next_read"))
        times = seq_times.select(F.col("session").alias("_s"), "bucket", "max_ms")
        block = F.floor(F.col("end") / F.lit(SEQ_TIME_BUCKET))
        read = (
            holes.join(next_read, keys, "left")
            .join(
                times,
                (F.col("session") == times["_s"])
                & (
                    (times["bucket"] > block)
                    | ((times["bucket"] == block) & F.coalesce(F.col("_next_read"), F.lit(False)))
                ),
                "inner",
            )
            .groupBy(*keys)
            .agg(F.min("max_ms").alias("_sent_by"))
        )
        bounds = bounds.unionByName(read).groupBy(*keys).agg(F.min("_sent_by").alias("_sent_by"))
    judged = holes.join(bounds, keys, "left")
    return judged.where(F.col("_sent_by").isNull() | (F.col("_sent_by") <= F.lit(judged_until_ms))).drop("_sent_by")


def _produced_after(holes: DataFrame, seq_times: DataFrame | None, until: datetime) -> DataFrame:
    """The holes (session, start, end) surely produced after `until`: some record of a lower
    block of their session is newer."""
    if seq_times is None:
        return holes.limit(0)
    times = seq_times.select(F.col("session").alias("_s"), "bucket", "max_ms")
    lower = holes.join(
        times,
        (holes["session"] == times["_s"])
        & (times["bucket"] < F.floor(holes["start"] / F.lit(SEQ_TIME_BUCKET)))
        & (times["max_ms"] > F.lit(int(until.timestamp() * 1000))),
        "left_semi",
    )
    return lower


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


def find_unprocessed(
    candidates: DataFrame,
    committed: DataFrame,
    processed_coverage: DataFrame,
    unjudged_until: datetime | None = None,
    mark_rules: Sequence[MarkRule] = (),
    earlier_first_marks: DataFrame | None = None,
    waiting: DataFrame | None = None,
) -> DataFrame:
    """Records below a group's committed offset that the group's ledger never marked processed.

    Only where the group's consumer is probed: in a partition where the group marked records
    processed, from the first offset it marked there on (reconcile_helpers.first_marks, with
    `earlier_first_marks`). Below it (the probe came later, on
    a pipeline already running) and in partitions it never marked (instances without the
    probe) the group's consumer may have processed records without a ledger. Records
    written up to `unjudged_until` are not: on a compacted topic the log cleaner may have
    removed such a record before the group got there (a later record has its record key),
    and passing it is no skip; or the consumer ledger deleted records before any run read
    them, and the record's processed mark may have been among them. Nor records where and
    when `mark_rules` say a mark of a record the broker lost may be taken for theirs. Nor
    records in `waiting` (PROCESSED_INTERVAL_SCHEMA, RunInputs.died_passed): a probed session
    that did not close passed them, and may have died with their marks or still be processing
    them; they are judged once a later mark of it or its close is read.
    """
    below = (
        candidates.join(first_marks(processed_coverage, earlier_first_marks), ["group", "partition"], "inner")
        .where(F.col("offset") >= F.col("first_mark"))
        .drop("first_mark")
        .join(committed, ["group", "partition"], "inner")
        .where(F.col("offset") < F.col("committed"))
    )
    if unjudged_until is not None:
        below = below.where(F.col("timestamp") > F.lit(unjudged_until))
    if waiting is not None:
        below = range_anti(below, waiting, ["group", "partition"], "offset")
    below = judged_despite_rewrites(below, mark_rules)  # a lost record's mark may be taken for theirs
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
        # seen_by (a run that saw the offset, gone since) is left out of the JSON when null
        evidence=F.to_json(
            F.struct(F.col("committed").alias("committed_offset"), F.col("seen_by").alias("seen_by_run"))
        ),
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
