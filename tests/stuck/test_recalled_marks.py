"""Processed marks the consumer ledger deleted after a reconciliation read them: the stuck
verdict recalls them from the run's state instead of losing the evidence (real Kafka,
PostgreSQL and Spark)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from auditor.demo.options import DeliveryMode, Faults
from auditor.demo.store import ApplyOutcome
from auditor.lab.cluster import delete_records
from auditor.stuck.service import diagnose_rule
from tests.support.stuck import StuckSetup, reconcile_now, verdicts_of

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def _reading_its_own_ledgers(stuck: StuckSetup) -> Any:
    """The rule's binding, named the pipeline's own ledger topics (as the probes write them)."""
    binding = stuck.rule.binding
    binding.producer_ledger_topic = stuck.pipeline.probes.producer_ledger
    binding.consumer_ledger_topic = stuck.pipeline.probes.consumer_ledger
    binding.save()
    return binding


def test_a_mark_the_ledger_deleted_after_a_run_read_it_still_says_processed(
    make_stuck: Any, kafka_admin: AdminClient, spark: Any
) -> None:
    stuck: StuckSetup = make_stuck()
    pipeline, binding = stuck.pipeline, _reading_its_own_ledgers(stuck)
    ids = pipeline.produce(10)
    consumed = pipeline.consumer(DeliveryMode.AT_LEAST_ONCE, Faults(fail_update_every=4)).run(
        max_records=10, timeout_s=60
    )
    # The truth, from the consumer's own account and the table: every ticket was processed
    # once; the update of the 4th and 8th was rolled back after processing, so they stayed
    # NEW. One partition: ids[i] is at offset i.
    assert consumed.ticket_ids() == ids
    new = set(consumed.ticket_ids(ApplyOutcome.LOST))
    assert new == {ids[3], ids[7]}
    assert {key for key, status in pipeline.statuses().items() if status == "NEW"} == new

    run = reconcile_now(binding)  # reads the topic and both ledgers
    # Retention on the consumer ledger (delete_records standing in) removes every mark after
    # the run read them: the ledger is empty, its log start past 0.
    ledger = pipeline.probes.consumer_ledger
    ends = {p: high for p, (_, high) in pipeline.watermarks(ledger).items()}
    assert any(ends.values())
    points = [TopicPartition(ledger, p, high) for p, high in ends.items()]
    delete_records(kafka_admin, points)

    for engine in ("python", "spark"):
        result = diagnose_rule(stuck.rule, stuck.options(engine, spark=spark))
        assert verdicts_of(result) == dict.fromkeys(new, "processed-not-updated"), (engine, result.notes)
        item = next(i for i in result.items if i.row.key == ids[3])
        assert f"as reconciliation run {run.job_run_id} read" in item.diagnosis.reason
        (group,) = item.diagnosis.evidence["groups"]
        assert group["processed"] == {"seen_by_run": run.job_run_id}
        assert any("recalled from reconciliation run" in n for n in result.notes), result.notes

    # Not asked to use the auditor's memory (use_index=False), nothing is recalled: the
    # evidence is gone, and the verdict says so instead of guessing.
    without = diagnose_rule(stuck.rule, stuck.options("python", use_index=False))
    assert set(verdicts_of(without).values()) == {"unknown"}


def test_a_mark_made_after_a_run_read_the_ledger_of_a_record_deleted_since_says_processed(
    make_stuck: Any, kafka_admin: AdminClient, spark: Any
) -> None:
    """A reconciliation run sees the records; only then does the consumer process them all,
    losing the update of the 4th and 8th; then retention (delete_records standing in) deletes
    every record. The marks are in the consumer ledger, not in the run's state. The truth,
    from the consumer's own account and the table: both rows were processed and their updates
    lost: `processed-not-updated`, never `skipped` or `expired`."""
    stuck: StuckSetup = make_stuck()
    pipeline, binding = stuck.pipeline, _reading_its_own_ledgers(stuck)
    ids = pipeline.produce(10)
    reconcile_now(binding)  # sees every record; no mark exists yet
    consumed = pipeline.consumer(DeliveryMode.AT_LEAST_ONCE, Faults(fail_update_every=4)).run(
        max_records=10, timeout_s=60
    )
    assert consumed.ticket_ids() == ids
    new = set(consumed.ticket_ids(ApplyOutcome.LOST))
    assert new == {ids[3], ids[7]}
    assert {key for key, status in pipeline.statuses().items() if status == "NEW"} == new
    assert pipeline.committed_offsets() == {0: 10}
    delete_records(kafka_admin, [TopicPartition(pipeline.topic, 0, 10)])
    assert pipeline.watermarks(pipeline.topic) == {0: (10, 10)}

    for engine in ("python", "spark"):
        result = diagnose_rule(stuck.rule, stuck.options(engine, spark=spark))
        assert verdicts_of(result) == dict.fromkeys(new, "processed-not-updated"), (engine, result.notes)
        assert any("second look at the consumer ledger" in n for n in result.notes), result.notes
