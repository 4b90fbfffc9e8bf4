"""The last phase of a reconciliation run: commit_state points state.json at the new state
(reconcile_new_state.py), last, so that a run that failed before leaves the old one."""

from __future__ import annotations

from pyspark.sql import SparkSession

from spark_jobs.group_commits import remember
from spark_jobs.ledger_ids import LEDGER_KINDS, ledger_ids_after
from spark_jobs.mark_rules import rules_to_json
from spark_jobs.reconcile_extract import OffsetRange
from spark_jobs.reconcile_plan import RunInputs, RunPlan, RunState
from spark_jobs.reconcile_state import StateMeta
from spark_jobs.reconcile_transform import KEY_INDEX_SCHEMA, SOURCE_ROW_SCHEMA


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
    """Point state.json at the new state: last, so a failed run leaves the old one. What fails
    after state.json is written is a warning of the run (StateStore.commit)."""
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
    meta = StateMeta(
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
        window_upper=plan.source_upper.isoformat(),
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
        rows_looked_up_until=new.rows_looked_up.until,
        rows_looked_up_at=new.rows_looked_up.at,
        upper_high=plan.latest_upper.isoformat(),
        sessions_named=kafka["sessions_named"],
        leader_epochs=plan.leader_epochs,
        leader_epochs_at_ms=plan.leader_epochs_at_ms,
        leader_changes=plan.leader_changes,
        ledger_epochs=plan.ledger_epochs,
        passed_unjudged=inputs.passed_unjudged,
        sessions_closed=inputs.sessions_closed,
        session_marks=inputs.session_marks,
    )
    new.laps.check()  # the last point where a cancelled run leaves the old state (the compactions ran Spark jobs)
    plan.warnings += store.commit(meta)
