"""The reconciliation and the stuck diagnosis read the same ledgers: the topics a deployment
names (AUDITOR_PRODUCER_LEDGER_TOPIC / AUDITOR_CONSUMER_LEDGER_TOPIC), not each its own
default (real Kafka, PostgreSQL and Spark)."""

from __future__ import annotations

from typing import Any

import pytest

from auditor.demo.options import DeliveryMode, Faults
from auditor.reconcile.models import Finding
from tests.support.stuck import StuckSetup, reconcile_now

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def test_a_run_reads_the_consumer_ledger_the_deployment_names(stuck: StuckSetup, settings: Any) -> None:
    pipeline = stuck.pipeline
    # The pipeline's probes write ledgers of their own names, as a deployment whose cluster
    # does not allow the default `_audit.*` names would configure them.
    settings.AUDITOR_PRODUCER_LEDGER_TOPIC = pipeline.probes.producer_ledger
    settings.AUDITOR_CONSUMER_LEDGER_TOPIC = pipeline.probes.consumer_ledger
    ids = pipeline.produce(20)
    crashed = pipeline.consumer(DeliveryMode.AT_MOST_ONCE, Faults(crash_after=5)).run(max_records=20, timeout_s=60)
    assert crashed.crashed
    pipeline.consumer(DeliveryMode.AT_MOST_ONCE).run(max_records=10, timeout_s=60)
    # The truth, from the group's commit and the table: one partition, ids[i] at offset i; the
    # group committed past every record, and the rows still NEW are the ones never processed.
    assert pipeline.committed_offsets() == {0: 20}
    statuses = pipeline.statuses()
    never_processed = {key for key in ids if statuses[key] == "NEW"}
    assert len(never_processed) == 5, statuses

    run = reconcile_now(stuck.rule.binding)

    unprocessed = Finding.objects.filter(run=run, kind="unprocessed")
    assert {f.key for f in unprocessed} == never_processed
    assert {f.group for f in unprocessed} == {pipeline.group}
