"""The producer side: what the topic and the producer ledger hold, with and without the send faults."""

from __future__ import annotations

import json

import pytest

from auditor.demo.options import DeliveryMode, Faults
from auditor.demo.producer import producer_config
from auditor.probes import AUDIT, AUDIT_ID, ProducerBatch, decode_audit_header, summarize_producer_ledger
from tests.support.demo import DemoPipeline, read_topic


@pytest.mark.integration
@pytest.mark.parametrize("contract", [1, 2])
def test_it_never_produces_dropped_tickets_and_they_stay_new(pipeline: DemoPipeline, contract: int) -> None:
    ids = pipeline.produce(9, Faults(drop_every=3))
    dropped = [ids[2], ids[5], ids[8]]
    sent = [ticket for ticket in ids if ticket not in dropped]

    records = read_topic(pipeline.bootstrap, pipeline.topic)
    assert [record.key for record in records] == sent
    assert [json.loads(record.value)["ticket_id"] for record in records] == sent
    ledger = pipeline.ledger(pipeline.probes.producer_ledger)
    if contract == 1:
        assert [record.headers[AUDIT_ID].decode() for record in records] == sent
        ledgered = [
            entry.audit_id
            for batch in ledger
            if isinstance(batch, ProducerBatch)
            for entry in batch.entries
            if entry.status == "acked"
        ]
        assert ledgered == sent  # the producer ledger never heard of the dropped ones either
    else:
        # The id is the key, so the packed header does not repeat it.
        assert [decode_audit_header(record.headers[AUDIT], record.key).audit_id for record in records] == sent
        assert [len(record.headers[AUDIT]) for record in records] == [33] * len(sent)
        (session,) = summarize_producer_ledger(ledger).values()
        acked = session.topics[pipeline.topic]
        # Acked in ranges, one sequence per send: the dropped ones never got one.
        assert sorted(acked.acked_ranges) == list(range(len(sent))) and not acked.failures

    pipeline.consumer(DeliveryMode.AT_LEAST_ONCE).run(max_records=len(sent), timeout_s=60)

    statuses = pipeline.statuses()
    assert [ticket for ticket in ids if statuses[ticket] == "NEW"] == dropped


@pytest.mark.integration
def test_it_aborts_every_nth_tickets_transaction_and_never_sends_it_again(pipeline: DemoPipeline) -> None:
    with pipeline.producer(Faults(abort_every=3)) as producer:
        created = producer.create_tickets(6)
        assert producer.flush(30) == 0
    ids = [item.ticket_id for item in created]
    aborted = [ids[2], ids[5]]
    assert producer.stats.aborted_ids == aborted
    assert producer.config["transactional.id"] == f"ticket-producer.{pipeline.topic}"

    # Every ticket reached the log once; read_committed readers never see the aborted ones.
    assert [record.key for record in read_topic(pipeline.bootstrap, pipeline.topic, "read_uncommitted")] == ids
    committed = [ticket for ticket in ids if ticket not in aborted]
    assert [record.key for record in read_topic(pipeline.bootstrap, pipeline.topic)] == committed

    pipeline.consumer(DeliveryMode.AT_LEAST_ONCE).run(max_records=len(committed), idle_timeout_s=3, timeout_s=60)

    statuses = pipeline.statuses()
    assert [ticket for ticket in ids if statuses[ticket] == "NEW"] == aborted


def test_it_weakens_the_producer_config_only_when_asked() -> None:
    base = {"bootstrap.servers": "127.0.0.1:9092"}

    durable = producer_config(base, Faults(), "p")
    assert (durable["acks"], durable["enable.idempotence"]) == ("all", True)

    fire_and_forget = producer_config(base, Faults(fire_and_forget=True), "p")
    assert (fire_and_forget["acks"], fire_and_forget["retries"], fire_and_forget["enable.idempotence"]) == (0, 0, False)

    no_idempotence = producer_config(base, Faults(no_idempotence=True), "p")
    assert no_idempotence["enable.idempotence"] is False
    assert no_idempotence["retries"] > 0 and no_idempotence["acks"] == "all"
