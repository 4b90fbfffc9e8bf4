"""The probes over the stack's SASL_SSL listener (SCRAM-SHA-512, a PEM CA): a round trip whose
ledgers match what the clients saw, and the client settings shown without the password."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, TopicPartition

from auditor.probes import (
    AuditedConsumer,
    AuditedProducer,
    parse_audit_headers,
    processed_offsets,
    summarize_consumer_ledger,
    summarize_producer_ledger,
)
from tests.probes.kafka_helpers import AuditTopics, TopicFactory, integration_marks, read_ledger, read_topic
from tests.support.secured import Secured

pytestmark = integration_marks()


def test_it_round_trips_over_sasl_ssl_with_ledgers_matching_what_the_clients_saw(
    secured: Secured, probe_topic: TopicFactory, audit_topics: AuditTopics
) -> None:
    topic = probe_topic("secured", partitions=2)
    acked: dict[bytes, tuple[int, int]] = {}

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        assert err is None, err
        acked[msg.key()] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]

    producer = AuditedProducer(
        secured.client_config(**{"client.id": "secured-app"}),
        ledger_topic=audit_topics.producer_ledger,
        clients_topic=audit_topics.clients,
        delivery_reports="all",  # the test's ground truth is every delivery report
    )
    with producer:
        for i in range(40):
            producer.produce(topic, b"v%d" % i, key=b"k%d" % i, on_delivery=on_delivery)
        assert producer.flush(30) == 0
        session = producer.session_id
        assert producer.effective_config()["sasl.password"] == "****"

    consumer = AuditedConsumer(
        secured.client_config(
            **{"group.id": f"secured-{topic}", "enable.auto.commit": "false", "auto.offset.reset": "earliest"}
        ),
        ledger_topic=audit_topics.consumer_ledger,
        clients_topic=audit_topics.clients,
    )
    processed: dict[bytes, tuple[int, int]] = {}
    with consumer:
        consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
        for _ in range(200):
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                if len(processed) == 40:
                    break
                continue
            with consumer.processing(msg):
                processed[msg.key()] = (msg.partition(), msg.offset())
        consumer.commit(asynchronous=False)
        consumer_session = consumer.session_id

    # Ground truth: the delivery reports and a full read of the topic (over the plaintext listener).
    assert len(acked) == 40 and processed == acked
    on_topic = {m.key(): (m.partition(), m.offset()) for m in read_topic(topic)}
    assert on_topic == acked
    assert all(parse_audit_headers(m.headers()).pid == session for m in read_topic(topic))  # type: ignore[union-attr]
    # Contract v2: the ledger acks sequence ranges; every record's seq (from its header) is acked.
    seqs = {parse_audit_headers(m.headers(), m.key()).seq for m in read_topic(topic)}  # type: ignore[union-attr]
    ledger = summarize_producer_ledger(read_ledger(audit_topics.producer_ledger))
    assert seqs == set(range(40)) and set(ledger[session].topics[topic].acked_ranges) == seqs
    marks = processed_offsets(read_ledger(audit_topics.consumer_ledger))
    assert marks == {(topic, p, o) for p, o in acked.values()}
    assert consumer_session in summarize_consumer_ledger(read_ledger(audit_topics.consumer_ledger))
    # What the probes published about the clients (read by live lint) holds no password.
    clients = read_ledger(audit_topics.clients)
    assert len(clients) == 2 and all(secured.password not in repr(c) for c in clients)


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"sasl.password": "not-the-password"}, "Authentication failed"),
        ({"sasl.mechanisms": "SCRAM-SHA-256"}, "Unsupported SASL mechanism"),
    ],
)
def test_it_surfaces_the_brokers_refusal_through_the_error_callback(
    secured: Secured, overrides: dict[str, str], reason: str
) -> None:
    from confluent_kafka import Producer

    errors: list[str] = []
    producer = Producer({**secured.client_config(**overrides), "error_cb": lambda e: errors.append(e.str())})
    producer.produce("never-delivered", b"x")
    for _ in range(20):
        producer.poll(0.25)
        if errors:
            break
    assert any(reason in e for e in errors), errors
    assert not any(secured.password in e for e in errors)
