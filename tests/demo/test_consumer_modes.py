"""Each delivery mode leaves the ticket states it predicts under its faults (real Kafka and PostgreSQL).

The ticket topic has one partition unless said otherwise, so record order is creation
order and ``ids[i]`` sits at offset ``i``.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from auditor.demo.options import DeliveryMode, Faults
from auditor.demo.store import ApplyOutcome
from auditor.probes import ConsumerBatch, find_reprocessed, processed_offsets
from tests.support.demo import DemoPipeline, read_topic

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("contract", [1, 2])
def test_it_leaves_the_committed_but_unprocessed_tail_new_at_most_once(pipeline: DemoPipeline, contract: int) -> None:
    ids = pipeline.produce(20)

    crashed = pipeline.consumer(DeliveryMode.AT_MOST_ONCE, Faults(crash_after=5)).run(max_records=20, timeout_s=60)

    assert crashed.crashed
    assert crashed.ticket_ids() == ids[:5]
    # The whole first batch (offsets 0-9) was committed before any of it was processed.
    assert pipeline.committed_offsets() == {0: 10}
    assert [record.ticket_id for record in crashed.skipped] == ids[5:10]

    restarted = pipeline.consumer(DeliveryMode.AT_MOST_ONCE).run(max_records=10, timeout_s=60)

    assert restarted.ticket_ids() == ids[10:]
    statuses = pipeline.statuses()
    assert [ticket for ticket in ids if statuses[ticket] == "NEW"] == ids[5:10]
    marked = processed_offsets(pipeline.ledger(pipeline.probes.consumer_ledger), pipeline.group)
    assert marked == {(pipeline.topic, 0, offset) for offset in [*range(5), *range(10, 20)]}


@pytest.mark.parametrize("contract", [1, 2])
def test_it_processes_again_after_a_crash_at_least_once(pipeline: DemoPipeline, contract: int) -> None:
    ids = pipeline.produce(20)

    crashed = pipeline.consumer(DeliveryMode.AT_LEAST_ONCE, Faults(crash_after=15)).run(max_records=20, timeout_s=60)
    assert crashed.crashed and crashed.ticket_ids() == ids[:15]
    assert pipeline.committed_offsets() == {0: 10}  # the commit after record 10; 11-15 were only stored

    restarted = pipeline.consumer(DeliveryMode.AT_LEAST_ONCE).run(max_records=10, timeout_s=60)

    assert restarted.ticket_ids() == ids[10:]
    assert set(pipeline.statuses().values()) == {"DONE"}
    assert pipeline.committed_offsets() == {0: 20}
    reprocessed = find_reprocessed(pipeline.ledger(pipeline.probes.consumer_ledger))
    assert [(r.offset, r.times) for r in reprocessed] == [(offset, 2) for offset in range(10, 15)]
    assert {r.sessions for r in reprocessed} == {tuple(sorted([crashed.session_id, restarted.session_id]))}


def test_it_applies_each_ticket_once_with_the_idempotency_table(make_pipeline) -> None:
    pipeline = make_pipeline(partitions=3)
    ids = pipeline.produce(30)

    crashed = pipeline.consumer(DeliveryMode.EXACTLY_ONCE, Faults(crash_after=15)).run(max_records=30, timeout_s=60)
    assert crashed.crashed and len(crashed.handled) == 15
    processed_before_crash = crashed.ticket_ids(ApplyOutcome.APPLIED)
    assert len(processed_before_crash) == 15

    restarted = pipeline.consumer(DeliveryMode.EXACTLY_ONCE).run(max_records=20, timeout_s=60)

    # Records 11-15 of the first run were applied but their offsets never committed:
    # they came back and were skipped; everything else was applied exactly once.
    assert sorted(restarted.ticket_ids(ApplyOutcome.DUPLICATE)) == sorted(processed_before_crash[10:])
    applied = Counter(crashed.ticket_ids(ApplyOutcome.APPLIED) + restarted.ticket_ids(ApplyOutcome.APPLIED))
    assert applied == Counter(ids)
    assert set(pipeline.statuses().values()) == {"DONE"}
    with pipeline.store() as store:
        assert sorted(store.processed_keys(pipeline.group)) == sorted(ids)
    # The consumer ledger agrees: no record of the topic was processed twice.
    assert find_reprocessed(pipeline.ledger(pipeline.probes.consumer_ledger)) == []


def test_it_writes_each_ticket_once_to_the_output_topic_in_transactions(pipeline: DemoPipeline) -> None:
    ids = pipeline.produce(20)

    crashed = pipeline.consumer(DeliveryMode.TRANSACTIONAL, Faults(crash_after=15)).run(max_records=20, timeout_s=60)
    # The first transaction (records 1-10) committed; the second died open after record 15.
    assert crashed.crashed and crashed.ticket_ids() == ids[:10]
    assert pipeline.committed_offsets() == {0: 10}

    restarted = pipeline.consumer(DeliveryMode.TRANSACTIONAL).run(max_records=10, timeout_s=60)
    assert restarted.ticket_ids() == ids[10:]

    committed = read_topic(pipeline.bootstrap, pipeline.output_topic, "read_committed")
    assert sorted(record.key for record in committed) == sorted(ids)
    assert [json.loads(record.value)["ticket_id"] for record in committed] == ids
    # The aborted transaction's records are in the log, hidden from read_committed readers.
    everything = Counter(
        record.key for record in read_topic(pipeline.bootstrap, pipeline.output_topic, "read_uncommitted")
    )
    assert {ticket for ticket, times in everything.items() if times > 1} == set(ids[10:15])
    assert set(pipeline.statuses().values()) == {"DONE"}
    assert pipeline.committed_offsets() == {0: 20}


@pytest.mark.parametrize("contract", [1, 2])
def test_it_leaves_processed_but_not_updated_tickets_new(pipeline: DemoPipeline, contract: int) -> None:
    ids = pipeline.produce(10)

    consumer = pipeline.consumer(DeliveryMode.AT_LEAST_ONCE, Faults(fail_update_every=4, slow_ms=30))
    started = time.monotonic()
    result = consumer.run(max_records=10, timeout_s=60)
    assert time.monotonic() - started >= 10 * 0.030  # the slow fault sleeps per record

    assert result.ticket_ids(ApplyOutcome.LOST) == [ids[3], ids[7]]
    statuses = pipeline.statuses()
    assert [ticket for ticket in ids if statuses[ticket] == "NEW"] == [ids[3], ids[7]]
    assert pipeline.committed_offsets() == {0: 10}  # nothing will bring them back
    ledger = pipeline.ledger(pipeline.probes.consumer_ledger)
    if contract == 1:
        marks = {
            entry.offset: entry.audit_id
            for batch in ledger
            if isinstance(batch, ConsumerBatch)
            for entry in batch.entries
        }
        assert marks == {offset: ticket for offset, ticket in enumerate(ids)}
    else:
        # v2 marks are offset ranges without ids: every offset marked once.
        assert processed_offsets(ledger, pipeline.group) == {(pipeline.topic, 0, offset) for offset in range(10)}
        assert find_reprocessed(ledger) == []
