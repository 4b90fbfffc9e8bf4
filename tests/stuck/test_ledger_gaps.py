"""Where the producer ledger or the clients topic cannot speak for an item, its verdict is
`unknown`, never one read from their silence: a probe whose audit ids are not the binding's
keys, and a clients topic the diagnosis could not read (stop 70's review).

Ground truth comes from the producers' delivery reports (and the demo producer's own count of
the transactions it aborted), a full read of the topic and the ledger, and the table; never
from the auditor.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from auditor.demo.options import DeliveryMode, Faults
from auditor.demo.producer import audited_producer, ticket_value
from auditor.lab.cluster import delete_records
from auditor.lint import observed
from auditor.pipelines import producers
from auditor.pipelines.producers import observed_producers
from auditor.probes import ProducerBatch, ProducerKeys, decode_ledger_records
from auditor.stuck.service import diagnose_rule
from tests.support.clock import shared_clock_slack
from tests.support.demo import read_topic
from tests.support.stuck import StuckSetup, verdicts_of

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def _ledgered_ids(setup: StuckSetup) -> set[str | None]:
    """Every id the producer ledger names a record of the topic by (either contract)."""
    pipeline = setup.pipeline
    records, bad = decode_ledger_records(
        r.value for r in read_topic(pipeline.bootstrap, pipeline.probes.producer_ledger)
    )
    assert not bad
    named: set[str | None] = set()
    for record in records:
        if isinstance(record, ProducerBatch) and record.topic == pipeline.topic:
            named.update(e.audit_id for e in record.entries)
        if isinstance(record, ProducerKeys) and record.topic == pipeline.topic:
            named.update(k for run in record.runs for k in run.keys)
    return named


def test_a_probe_whose_audit_ids_are_not_the_binding_s_keys_leaves_a_deleted_record_unknown_not_never_produced(
    make_stuck: Callable[..., StuckSetup], kafka_admin: AdminClient, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A binding keyed by a value field (json:$.ticket_id) over records keyed by an order
    number, produced by a probe without key_fn (each contract): its ledger names the order
    numbers. The session runs past the clock margin (ticket 1), ticket 2's row is created and
    its record produced and acked, then ticket 3's; the producer closes; retention
    (delete_records) takes tickets 1 and 2. The ledger is complete since before ticket 2's row
    was created and never names a ticket: read at its word, ticket 2 was never produced
    (shared_clock_slack shortens the margin)."""
    speaks_after_s = shared_clock_slack(monkeypatch)
    setups = {
        contract: make_stuck(partitions=1, contract=contract, record_key="json:$.ticket_id") for contract in (1, 2)
    }
    reports: dict[int, dict[str, tuple[KafkaError | None, int, int]]] = {1: {}, 2: {}}
    running = {}
    for contract, setup in setups.items():

        def report(err: KafkaError | None, msg: Any, into: dict[str, Any] = reports[contract]) -> None:
            into[msg.key().decode()] = (err, msg.partition(), msg.offset())

        config = {"bootstrap.servers": setup.pipeline.bootstrap, "linger.ms": 0, "on_delivery": report}
        running[contract] = (audited_producer(config, setup.pipeline.probes), setup.pipeline.store(), time.time())

    def send(contract: int, done: bool) -> str:
        producer, store, _ = running[contract]
        ticket = store.insert_ticket({"subject": "order"})
        # keyed by its order number; the ticket only in the value (no key_fn: audit id = record key)
        producer.produce(setups[contract].pipeline.topic, ticket_value(ticket), f"order-{ticket.id}".encode())
        assert producer.flush(30) == 0
        if done:
            store.mark_done(ticket.ticket_id)
        return ticket.ticket_id

    try:
        for contract in setups:
            send(contract, done=True)
        started = min(s for _, _, s in running.values())
        time.sleep(max(0.0, started + speaks_after_s - time.time()))
        stuck = {contract: send(contract, done=False) for contract in setups}
        for contract in setups:
            send(contract, done=True)
    finally:
        for producer, store, _ in running.values():
            assert producer.close(30) == 0
            store.close()

    for contract, setup in setups.items():
        pipeline = setup.pipeline
        ticket = stuck[contract]
        # Ground truth: the broker acked ticket 2's record (its delivery report); the ledger
        # names the order numbers, never a ticket; retention takes tickets 1 and 2.
        (order,) = [k for k, (err, p, o) in reports[contract].items() if o == 1]
        err, partition, offset = reports[contract][order]
        assert err is None and (partition, offset) == (0, 1), reports[contract]
        records = read_topic(pipeline.bootstrap, pipeline.topic)
        assert [r.offset for r in records] == [0, 1, 2] and all((r.key or "").startswith("order-") for r in records)
        assert f'"ticket_id":"{ticket}"'.encode() in records[1].value and records[1].key == order
        named = _ledgered_ids(setup)
        assert order in named and not any(n and n.startswith("TCK-") for n in named), named
        delete_records(kafka_admin, [TopicPartition(pipeline.topic, 0, offset + 1)])
        remaining = read_topic(pipeline.bootstrap, pipeline.topic)
        assert [r.offset for r in remaining] == [2]
        assert pipeline.statuses()[ticket] == "NEW"

        results = [
            diagnose_rule(setup.rule, setup.options(engine, spark=spark, use_index=False))
            for engine in ("python", "spark")
        ]
        by_python, by_spark = ({i.row.key: (i.diagnosis.verdict, i.diagnosis.reason) for i in r.items} for r in results)
        assert by_spark == by_python
        assert set(by_python) == {ticket}, by_python
        verdict, reason = by_python[ticket]
        # The old code: "no producer-ledger entry for this key since the row was created (the
        # ledger ... is complete since then ...)" (never-produced).
        assert verdict == "unknown", (contract, reason)
        assert "audit id is not their key by the binding's record_key json:$.ticket_id" in reason, reason
        assert "no ledger evidence for this key" in reason, reason


@pytest.mark.parametrize("contract", [1])
def test_an_aborted_record_deleted_while_the_clients_topic_is_unreadable_is_unknown_not_expired(
    stuck: StuckSetup, kafka_admin: AdminClient, monkeypatch: pytest.MonkeyPatch, contract: int
) -> None:
    """A v1 transactional producer: ticket 2's transaction aborts, tickets 1 and 3 commit; the
    group processes ticket 1 and commits before ticket 2; retention (delete_records) takes
    tickets 1 and 2. The v1 ledger acked ticket 2 (the abort leaves no trace in it); only the
    clients topic says the session is transactional, and the diagnosis cannot read it: its
    silence read as "not transactional", ticket 2 is expired (deleted before the group
    reached it)."""
    pipeline = stuck.pipeline
    with pipeline.producer(Faults(abort_every=2)) as producer:
        ids = [t.ticket.ticket_id for t in producer.create_tickets(3)]
        # Ground truth: abort_transaction() returned for ticket 2, commit_transaction() for the rest.
        aborted = list(producer.stats.aborted_ids)
    assert aborted == [ids[1]]
    every = read_topic(pipeline.bootstrap, pipeline.topic, "read_uncommitted")
    committed = read_topic(pipeline.bootstrap, pipeline.topic)
    (written,) = [r.offset for r in every if r.key == ids[1]]
    assert ids[1] not in {r.key for r in committed}
    pipeline.consumer(DeliveryMode.AT_LEAST_ONCE).run(max_records=1, idle_timeout_s=3, timeout_s=60)
    assert pipeline.statuses() == {ids[0]: "DONE", ids[1]: "NEW", ids[2]: "NEW"}
    assert pipeline.committed_offsets()[0] <= written
    (third,) = [r.offset for r in committed if r.key == ids[2]]
    delete_records(kafka_admin, [TopicPartition(pipeline.topic, 0, third)])
    assert [r.key for r in read_topic(pipeline.bootstrap, pipeline.topic, "read_uncommitted")] == [ids[2]]

    # The clients topic read: the session is transactional, its ack proves nothing.
    result = diagnose_rule(stuck.rule, stuck.options("python"))
    assert verdicts_of(result) == {ids[1]: "unknown", ids[2]: "waiting"}, [i.diagnosis.reason for i in result.items]

    # The clients topic unreadable (the read fails under the diagnosis).
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "clients topic refused"))

    monkeypatch.setattr(producers, "read_reported_clients", refused)
    result = diagnose_rule(stuck.rule, stuck.options("python"))
    reasons = {i.row.key: i.diagnosis.reason for i in result.items}
    # The old code: "acked at ... deleted by retention or delete-records ... before group ...
    # reached it" (expired).
    assert verdicts_of(result) == {ids[1]: "unknown", ids[2]: "waiting"}, reasons
    assert f"the clients topic {pipeline.probes.clients} could not be read" in reasons[ids[1]], reasons[ids[1]]
    assert "whether the session is transactional" in reasons[ids[1]]
    assert any("which producer sessions are transactional is not known" in n for n in result.notes), result.notes
    assert result.degraded


def test_a_clients_topic_the_cluster_refuses_is_unread_not_empty(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clients topic that does not exist is one no probe reported to: nothing unread. One the
    cluster describes with another error (an ACL refusing it) was not read: before stop 71 it
    was taken for a topic without reports, so no session was transactional."""
    config = {"bootstrap.servers": kafka_bootstrap}
    missing = observed_producers(config, f"no-such-clients-{uuid.uuid4().hex[:8]}")
    assert missing.unread is None and missing.transactional_sessions == frozenset()

    class Refused:
        """A reader whose metadata request comes back with the topic refused."""

        def list_topics(self, topic: str, timeout: float) -> Any:
            error = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)
            return SimpleNamespace(topics={topic: SimpleNamespace(error=error, partitions={})})

        def close(self) -> None:
            pass

    monkeypatch.setattr(observed, "_reader", lambda *args, **kwargs: Refused())
    refused = observed_producers(config, "_audit.clients")
    assert refused.unread is not None and "_audit.clients could not be read" in refused.unread, refused
    assert "TOPIC_AUTHORIZATION_FAILED" in refused.unread
