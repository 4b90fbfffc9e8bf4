"""The findings of a run's new state (reconcile_new_state.py): find_all, every finding;
flag_new, which of them the previous run did not report; count_findings. commit_state
(reconcile_commit.py) follows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.failover_hold import held_window, ledger_outcome_ms
from spark_jobs.reconcile_findings import HeldLate, late_held_rows, lost_gaps_kept
from spark_jobs.reconcile_plan import RunInputs, RunPlan, RunState
from spark_jobs.reconcile_schemas import LATE
from spark_jobs.reconcile_transform import (
    FINDING_KINDS,
    KEY_INDEX_SCHEMA,
    RECORD_COUNTS,
    UNVERIFIABLE,
    WATERMARK_SCHEMA,
    acks_maybe_held,
    find_aborted,
    find_duplicates,
    find_gaps,
    find_missing,
    find_orphans,
    find_reprocessed,
    find_unprocessed,
    is_empty_plan,
    sends_unjudged,
    union_findings,
    unverifiable_rows,
)
from spark_jobs.send_outcome import judged_until_ms

# What makes two runs' findings the same finding (flag_new: is_new).
IDENTITY = ["kind", "key", "cause", "partition", "offset", "session", "seq", "group"]


def find_all(plan: RunPlan, inputs: RunInputs, new: RunState) -> DataFrame:
    """Every finding of the new state (FINDING_SCHEMA)."""
    spark = inputs.records.sparkSession
    watermarks = spark.createDataFrame(
        [(p, o.low, plan.topic.ranges[p][1]) for p, o in plan.kafka["watermarks"].items()], WATERMARK_SCHEMA
    )
    s = new.frames
    held = inputs.held
    sent_judged_until = judged_until_ms(plan.read_at_ms, plan.send_outcome_ms)
    if not is_empty_plan(s["ledger_bounds"]):
        # v2 acks a leader may still hold beyond the high watermarks read, and sends whose
        # outcome is not known yet: judged by a later run
        maybe_held = acks_maybe_held(s["ledger_open"], plan.acks_judged_until_ms).unionByName(
            sends_unjudged(s["ledger_open"], sent_judged_until)
        )
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
            sent_judged_until_ms=sent_judged_until,
            held=held,
        )
    )
    if plan.recreated is None and plan.mode != "full":
        # a loss an earlier run read stays known once retention deletes its offset (a --full
        # run starts over: the user's way to drop what earlier runs concluded)
        kept = lost_gaps_kept(findings_before(spark, plan), gaps, watermarks, s["seq_coverage"])
        gaps = kept if gaps is None else gaps.unionByName(kept)
    # a key the ledger acked and the topic lost: its row is missing because the broker lost it
    lost_acks = None if gaps is None else gaps.where(F.col("cause") == "broker-lost")
    new.lost_acks, new.held = lost_acks, held
    new.held_late = late_rows_held(spark, plan, gaps, s["ledger_bounds"])
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
                inputs.died_passed,
            ),
        ),
        (s["reprocessed"], lambda: find_reprocessed(s["reprocessed"])),
    ]
    stepped_back = reported_before(spark, plan)
    return union_findings(
        [
            find_missing(
                s["pending_source"],
                plan.cutoff,
                inputs.unverifiable_until,
                s["lost_sightings"],
                lost_acks,
                held,
                kept=None if stepped_back is None else (stepped_back.cutoff, stepped_back.missing),
                held_late=new.held_late,
            ),
            find_duplicates(s["duplicates"]),
            find_orphans(
                s["orphan_candidates"],
                plan.cutoff,
                kept=None if stepped_back is None else (stepped_back.cutoff, stepped_back.orphans),
            ),
            *([] if gaps is None else [gaps]),
            *[build() for source, build in optional if not is_empty_plan(source)],
        ]
    )


@dataclass(frozen=True)
class KeptFindings:
    """reported_before's: the cutoff up to which what the last run reported stays past the
    cutoff, and what it reported (missing: key, created; orphans: partition, offset)."""

    cutoff: datetime
    missing: DataFrame
    orphans: DataFrame


def reported_before(spark: SparkSession, plan: RunPlan) -> KeptFindings | None:
    """Where the clock the window is read by stepped back (RunPlan.kept_cutoff): the rows the
    last run reported missing (key, created) and the records it reported orphan (partition,
    offset), which stay past the cutoff as they were then, while what this run reads for the
    first time is judged by the clock as it reads now. Each run that keeps them reports them,
    so the next one keeps them too, until the clock passes state.json's upper_high again.
    None when the clock did not step back (nearly always)."""
    kept = plan.kept_cutoff
    if kept is None:
        return None
    plan.warnings.append(
        f"the clock the source window is read by is {(kept - plan.cutoff).total_seconds():.0f}s behind an earlier "
        "run's: the rows and records the last run reported stay reported, those read since are judged by the clock "
        "as it reads now"
    )
    findings = findings_before(spark, plan)
    missing = findings.where(F.col("kind") == "missing").select("key", F.col("timestamp").alias("created"))
    orphans = findings.where(F.col("kind") == "orphan")
    positions = orphans.select(
        F.explode(
            F.coalesce(
                F.col("offsets"),
                F.array(F.struct(F.col("partition").alias("partition"), F.col("offset").alias("offset"))),
            )
        ).alias("o")
    ).select("o.partition", "o.offset")
    return KeptFindings(kept, missing, positions)


def findings_before(spark: SparkSession, plan: RunPlan) -> DataFrame:
    """The findings this run's are new against (RunPlan.findings_before: the last run's)."""
    return plan.store.dataset(spark, plan.findings_before, "findings")


def late_rows_held(
    spark: SparkSession, plan: RunPlan, gaps: DataFrame | None, ledger_bounds: DataFrame
) -> HeldLate | None:
    """find_missing's `held_late`: the windows of `created` leader changes hold (failover_hold),
    each with the keys it judges anyway. A change of the topic's leaders holds every row in its
    window but those the last run reported missing. A change of the producer ledger's holds rows
    only where a probed producer writes the topic (its sessions' bounds: a plain producer's row
    has no entry to wait for), for the entries' bound too (ledger_outcome_ms), and not those of
    this run's `gaps` either (their send's outcome came in an entry: that one was not late).
    None: no change holds rows."""
    topic = [c for c in plan.leader_changes if c.ledger is None]
    ledger = [c for c in plan.leader_changes if c.ledger is not None]
    ledger_window = held_window(ledger, plan.cutoff, ledger_outcome_ms(plan.send_outcome_ms))
    holds = [(w, "topic") for w in [held_window(topic, plan.cutoff, plan.send_outcome_ms)] if w is not None]
    # a Spark job, only where a ledger change holds a window: whether a probed session is known
    if ledger_window is not None and not is_empty_plan(ledger_bounds) and ledger_bounds.limit(1).count():
        holds.append((ledger_window, "ledger"))
    if not holds:
        return None
    reported = findings_before(spark, plan).where(F.col("kind") == "missing").select("key")
    outcome_known = reported
    if gaps is not None:
        outcome_known = reported.unionByName(gaps.where(F.col("key").isNotNull()).select("key"))
    return [(window, reported if kind == "topic" else outcome_known) for window, kind in holds]


def flag_new(spark: SparkSession, plan: RunPlan, current: DataFrame) -> DataFrame:
    """`is_new`: the previous run did not report the same finding (IDENTITY)."""
    seen = findings_before(spark, plan).select(*[F.col(c).alias(f"_seen_{c}") for c in IDENTITY]).distinct()
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
        unverifiable_rows(
            new.frames["pending_source"], plan.cutoff, until, new.frames["lost_sightings"], new.lost_acks, new.held
        ).count()
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
    counts[LATE] = (
        late_held_rows(
            new.frames["pending_source"],
            plan.cutoff,
            until,
            new.held_late,
            new.frames["lost_sightings"],
            new.lost_acks,
            new.held,
        ).count()
        if new.held_late is not None
        else 0
    )
    if counts[LATE] and new.held_late is not None:
        start = min(window[0] for window, _ in new.held_late)
        end = max(window[1] for window, _ in new.held_late)
        plan.warnings.append(
            f"{counts[LATE]} source row(s) past the grace have no record yet and are not reported missing: created "
            f"after {start.isoformat()} and up to {end.isoformat()}, after a leader change whose failover may still "
            "hold their sends (judged once the send outcome bound has passed beyond their grace)"
        )
    # Not findings: the records this run read whose audit headers were absent or undecodable.
    return counts | {name: int(inputs.totals[name]) for name in RECORD_COUNTS}, new_count, found
