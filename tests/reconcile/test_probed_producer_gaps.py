"""Probed producers (both contract versions) against the real brokers and Spark, in the cases a
review of stop 70 found them misreported: a v1 copier passing on its input's v2 header, a
checkpoint written while sends were in flight, a failure named by another form of its key.

Ground truth comes from the clients (delivery reports, return values) and full reads of the
topics, never from the probe.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import NewTopic
from pyspark.sql import SparkSession

from auditor.lab.cluster import all_led, wait_until
from auditor.probes import AuditedProducer, AuditedProducerV1
from tests.probes.kafka_helpers import read_topic
from tests.support.reconcile_world import World, reconcile_once
from tests.support.stalled_producer import TICKETS, run_stalled_and_kill

pytestmark = pytest.mark.integration


def _findings(result: dict[str, Any]) -> list[tuple[Any, ...]]:
    assert result["status"] == "ok", result["error"]
    return sorted((f["kind"], f["cause"], f["session"], f["seq"], f["key"]) for f in result["findings"])


def test_a_v1_copier_passing_on_its_inputs_v2_header_is_read_by_its_own_headers(
    spark: SparkSession, world: World, make_topic: Any, tmp_path: Path
) -> None:
    """A v2 producer writes five tickets to an input topic; a v1 copier copies each to the
    reconciled topic with the input record's headers (its v2 `audit` header among them)."""
    source = make_topic("in")
    world.insert(*TICKETS)
    config = {"bootstrap.servers": world.bootstrap, "linger.ms": 5}
    clients = make_topic("_audit.clients")
    with AuditedProducer(config, ledger_topic=world.producer_ledger, clients_topic=clients) as upstream:
        for ticket in TICKETS:
            upstream.produce(source, json.dumps({"ticket_id": ticket}).encode(), str(ticket).encode())
        assert upstream.flush(30) == 0
    inputs = read_topic(source, bootstrap=world.bootstrap)
    assert [m.key() for m in inputs] == [str(t).encode() for t in TICKETS]
    assert all(any(name == "audit" for name, _ in m.headers() or []) for m in inputs)

    delivered: list[tuple[int, int]] = []

    def report(err: Any, msg: Any) -> None:
        assert err is None, err
        delivered.append((msg.partition(), msg.offset()))

    copier = AuditedProducerV1(config, ledger_topic=world.producer_ledger, clients_topic=clients)
    try:
        for m in inputs:
            copier.produce(world.topic, m.value(), m.key(), headers=m.headers(), on_delivery=report)
        assert copier.flush(30) == 0
    finally:
        copier.close()
    assert len(delivered) == len(TICKETS)
    copied = read_topic(world.topic, bootstrap=world.bootstrap)
    assert sorted((m.partition(), m.offset()) for m in copied) == sorted(delivered)

    result = reconcile_once(spark, world.binding(consumer_groups=[], guarantee="at-least-once"), tmp_path)
    assert _findings(result) == []


@pytest.mark.parametrize("ending", ["flush", "close"])
def test_a_v1_checkpoint_never_names_sends_still_in_flight(
    spark: SparkSession, world: World, make_topic: Any, kafka_admin: Any, tmp_path: Path, ending: str
) -> None:
    """A v1 producer's five sends stall (their topic does not exist yet: they wait in the
    client), so flush(2) or close(2) returns with all of them in flight, and the process is
    killed (-9). Its ledger must not name them as sent with nothing ledgered: a run would
    judge them `never-sent` at once, though produce() took each."""
    topic = f"stall-{uuid.uuid4().hex[:10]}"
    clients = make_topic("_audit.clients")
    told = run_stalled_and_kill(world.bootstrap, topic, world.producer_ledger, clients, ending)
    # The stall was real: every send still in flight, no delivery report, no topic yet.
    assert told["returned"] == len(TICKETS) and told["reports"] == 0
    assert topic not in kafka_admin.list_topics(timeout=10).topics
    kafka_admin.create_topics([NewTopic(topic, num_partitions=1)])[topic].result(30)
    try:
        wait_until(lambda: all_led(kafka_admin, topic, 1), 20, f"topic {topic} with a leader")
        assert read_topic(topic, bootstrap=world.bootstrap) == []  # nothing of them was written
        world.insert(*TICKETS, age="0 seconds")  # within grace: only the session's sequences are judged
        result = reconcile_once(
            spark, world.binding(topic=topic, consumer_groups=[], guarantee="at-least-once"), tmp_path
        )
        assert [f for f in _findings(result) if f[0] == "gap"] == []
    finally:
        kafka_admin.delete_topics([topic])[topic].result(30)


def test_a_v2_failure_is_placed_by_the_id_the_key_function_gave_when_the_record_was_produced(
    spark: SparkSession, world: World, make_topic: Any, tmp_path: Path
) -> None:
    """The application passes str keys to a key function that formats them: the failure
    report's key is bytes, so the id computed again from it (`ticket-b'15'`) matched no `keys`
    entry (`ticket-15`), and the failure stayed unplaced (`send-unconfirmed` after 365 s instead
    of `send-failed`). Ground truth: the delivery reports and a full read of the topic."""
    world.insert(15, 16, age="0 seconds")  # within grace: only the session's sequences are judged
    reports: dict[str, str | None] = {}

    def report(err: Any, msg: Any) -> None:
        reports[msg.key().decode()] = None if err is None else err.name()

    config = {"bootstrap.servers": world.bootstrap, "message.max.bytes": 10_000_000, "on_delivery": report}
    with AuditedProducer(
        config,
        ledger_topic=world.producer_ledger,
        clients_topic=make_topic("_audit.clients"),
        key_fn=lambda value, key: f"ticket-{key}",
    ) as producer:
        too_large = json.dumps({"ticket_id": 15, "pad": "x" * 3_000_000}).encode()  # the broker refuses it
        producer.produce(world.topic, too_large, "15")
        producer.produce(world.topic, json.dumps({"ticket_id": 16}).encode(), "16")
        assert producer.flush(30) == 0
        session = producer.session_id
    assert reports == {"15": "MSG_SIZE_TOO_LARGE", "16": None}
    assert [m.key() for m in read_topic(world.topic, bootstrap=world.bootstrap)] == [b"16"]

    result = reconcile_once(spark, world.binding(consumer_groups=[], guarantee="at-least-once"), tmp_path)
    assert [f for f in _findings(result) if f[0] == "gap"] == [("gap", "send-failed", session, 0, "ticket-15")]


def test_a_failed_send_of_a_binary_key_sent_again_and_delivered_is_no_gap(
    spark: SparkSession, world: World, make_topic: Any, tmp_path: Path
) -> None:
    """A v2 producer's send of an item keyed by bytes that are not UTF-8 fails (too large) and
    the application sends it again, delivered. The ledger names the failed item by its text
    form (backslash escapes); the run read the delivered record's key with U+FFFD for those
    bytes, so the item matched no delivery and its failed send was a `send-failed` gap. Ground
    truth: the delivery reports and a full read of the topic."""
    key = b"\xff" + uuid.uuid4().bytes
    reports: list[str | None] = []

    def report(err: Any, msg: Any) -> None:
        assert msg.key() == key
        reports.append(None if err is None else err.name())

    config = {"bootstrap.servers": world.bootstrap, "message.max.bytes": 10_000_000, "on_delivery": report}
    with AuditedProducer(config, ledger_topic=world.producer_ledger, clients_topic=make_topic("_audit.clients")) as p:
        p.produce(world.topic, b"x" * 3_000_000, key)  # the broker refuses it
        assert p.flush(30) == 0
        p.produce(world.topic, b"again", key)
        assert p.flush(30) == 0
    assert reports == ["MSG_SIZE_TOO_LARGE", None]
    assert [(m.key(), m.value()) for m in read_topic(world.topic, bootstrap=world.bootstrap)] == [(key, b"again")]

    binding = world.binding(record_key="key", consumer_groups=[], guarantee="at-least-once")
    result = reconcile_once(spark, binding, tmp_path)
    assert [f for f in _findings(result) if f[0] == "gap"] == []
