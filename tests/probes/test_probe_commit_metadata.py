"""The audited consumer names its session in the metadata of every commit it makes (docs/contracts.md,
"Commit metadata"), read back through AdminClient.list_consumer_group_offsets on a real broker."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from auditor.probes import AuditedConsumer, AuditedConsumerV1, AuditedProducer
from tests.probes.kafka_helpers import AuditTopics, TopicFactory, integration_marks

pytestmark = integration_marks()


def _produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, b"v%d" % i)
    assert producer.flush(30) == 0


def _group_offsets(admin: AdminClient, group: str) -> dict[int, tuple[int, str | None]]:
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=30)
    return {tp.partition: (tp.offset, tp.metadata) for tp in listed.topic_partitions if tp.offset >= 0}


def _consumer(bootstrap: str, topics: AuditTopics, kind: Any = AuditedConsumer, **config: Any) -> Any:
    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": f"meta-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
        **config,
    }
    return kind(settings, ledger_topic=topics.consumer_ledger, clients_topic=topics.clients)


def _poll_records(consumer: Any, count: int) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            got.append(msg)
    assert len(got) == count
    return got


@pytest.mark.parametrize("kind", [AuditedConsumer, AuditedConsumerV1])
def test_it_names_the_session_in_auto_commits(
    probe_bootstrap: str, probe_admin: AdminClient, probe_topic: TopicFactory, audit_topics: AuditTopics, kind: Any
) -> None:
    topic = probe_topic("meta")
    _produce(probe_bootstrap, topic, 5)
    consumer = _consumer(
        probe_bootstrap, audit_topics, kind, **{"enable.auto.commit": True, "auto.commit.interval.ms": 100}
    )
    group = str(consumer.group)
    consumer.subscribe([topic])
    _poll_records(consumer, 5)
    deadline = time.monotonic() + 30
    while _group_offsets(probe_admin, group).get(0, (None,))[0] != 5 and time.monotonic() < deadline:
        consumer.poll(0.2)  # auto-commit runs in the background
    assert _group_offsets(probe_admin, group) == {0: (5, f"audit:v2:{consumer.session_id}")}
    consumer.close()


def test_it_names_the_session_in_explicit_commits_of_each_form(
    probe_bootstrap: str, probe_admin: AdminClient, probe_topic: TopicFactory, audit_topics: AuditTopics
) -> None:
    topic = probe_topic("meta")
    _produce(probe_bootstrap, topic, 6)
    consumer = _consumer(probe_bootstrap, audit_topics, **{"enable.auto.commit": False})
    group, mark = str(consumer.group), f"audit:v2:{consumer.session_id}"
    consumer.subscribe([topic])
    records = _poll_records(consumer, 4)
    consumer.commit(message=records[0], asynchronous=False)
    assert _group_offsets(probe_admin, group) == {0: (1, mark)}
    consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    assert _group_offsets(probe_admin, group) == {0: (2, mark)}
    # the application's own metadata is kept, the session's after it
    consumer.commit(offsets=[TopicPartition(topic, 0, 3, "app-state")], asynchronous=False)
    assert _group_offsets(probe_admin, group) == {0: (3, f"app-state\n{mark}")}
    consumer.commit(asynchronous=False)  # the positions handed over: after the fourth record
    assert _group_offsets(probe_admin, group) == {0: (4, mark)}
    consumer.close()


def test_it_names_the_session_in_stored_offsets_that_are_committed(
    probe_bootstrap: str, probe_admin: AdminClient, probe_topic: TopicFactory, audit_topics: AuditTopics
) -> None:
    topic = probe_topic("meta")
    _produce(probe_bootstrap, topic, 4)
    consumer = _consumer(
        probe_bootstrap, audit_topics, **{"enable.auto.commit": False, "enable.auto.offset.store": False}
    )
    group = str(consumer.group)
    consumer.subscribe([topic])
    records = _poll_records(consumer, 3)
    consumer.store_offsets(message=records[1])
    consumer.commit(asynchronous=False)  # the stored offset, not the position
    assert _group_offsets(probe_admin, group) == {0: (2, f"audit:v2:{consumer.session_id}")}
    consumer.close()


def test_a_store_where_the_application_left_the_auto_store_on_is_refused_as_librdkafka_refuses_it(
    probe_bootstrap: str, probe_topic: TopicFactory, audit_topics: AuditTopics
) -> None:
    from confluent_kafka import KafkaException

    topic = probe_topic("meta")
    _produce(probe_bootstrap, topic, 1)
    consumer = _consumer(probe_bootstrap, audit_topics, **{"enable.auto.commit": False})
    consumer.subscribe([topic])
    (record,) = _poll_records(consumer, 1)
    with pytest.raises(KafkaException):
        consumer.store_offsets(message=record)
    consumer.close()


def test_offsets_sent_to_a_probed_producers_transaction_name_the_consumer_session(
    probe_bootstrap: str, probe_admin: AdminClient, probe_topic: TopicFactory, audit_topics: AuditTopics
) -> None:
    source, sink = probe_topic("meta"), probe_topic("meta-out")
    _produce(probe_bootstrap, source, 3)
    consumer = _consumer(
        probe_bootstrap, audit_topics, **{"enable.auto.commit": False, "isolation.level": "read_committed"}
    )
    producer = AuditedProducer(
        {"bootstrap.servers": probe_bootstrap, "transactional.id": f"meta-{uuid.uuid4().hex[:8]}"},
        ledger_topic=audit_topics.producer_ledger,
        clients_topic=audit_topics.clients,
    )
    try:
        group = str(consumer.group)
        consumer.subscribe([source])
        records = _poll_records(consumer, 3)
        producer.init_transactions(30)
        producer.begin_transaction()
        for msg in records:
            producer.produce(sink, msg.value())
            consumer.mark_processed(msg)
        producer.send_offsets_to_transaction([TopicPartition(source, 0, 3)], consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        # the coordinator makes a transaction's offsets visible once its marker is written
        deadline = time.monotonic() + 30
        while not _group_offsets(probe_admin, group) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _group_offsets(probe_admin, group) == {0: (3, f"audit:v2:{consumer.session_id}")}
    finally:
        producer.close()
        consumer.close()
