"""`persisted` of a failed send: what the delivery error and the producer's retries prove.

A failure report carries the error of the message's last attempt only; with retries an
earlier attempt may have written the record (librdkafka keeps such a message
POSSIBLY_PERSISTED whatever a later attempt answers). The broker test reproduces that on
real brokers: the first attempt is appended but times out waiting for a frozen follower, the
retry is refused with NOT_ENOUGH_REPLICAS, and a full read of the topic shows the record.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, Producer

from auditor.lab.cluster import Cluster
from auditor.probes import (
    AuditedProducer,
    AuditedProducerV1,
    ProducerBatch,
    ProducerFailures,
    classify_persistence,
    decode_ledger_record,
    sends_may_be_retried,
)
from auditor.probes.persistence import describe_error
from tests.probes.fakes import FactoryRecorder
from tests.probes.kafka_helpers import AuditTopics, read_ledger, read_topic

LEDGER = "ledger-topic"

# Errors of the attempt the broker refused before appending, or of a message that never left
# the client: "not" only when no earlier attempt can have written it (retries=0).
REFUSED_OR_UNSENT = [
    KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.INVALID_MSG,
    KafkaError.INVALID_RECORD,
    KafkaError.INVALID_PRODUCER_EPOCH,
    KafkaError._PURGE_QUEUE,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._UNKNOWN_TOPIC,
]
# The attempt may have been written (librdkafka: MSG_POSSIBLY_PERSISTED), retries or not.
UNCERTAIN = [
    KafkaError._MSG_TIMED_OUT,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError._PURGE_INFLIGHT,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KafkaError.NETWORK_EXCEPTION,
    KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
]
# produce() raises these for a message that never entered the queue.
NEVER_QUEUED = [
    KafkaError._INVALID_ARG,
    KafkaError._QUEUE_FULL,
    KafkaError._KEY_SERIALIZATION,
    KafkaError._VALUE_SERIALIZATION,
]


@pytest.mark.parametrize(
    ("code", "may_retry", "persisted"),
    [(code, False, "not") for code in REFUSED_OR_UNSENT + NEVER_QUEUED]
    + [(code, True, "possibly") for code in REFUSED_OR_UNSENT]
    + [(code, may_retry, "possibly") for code in UNCERTAIN for may_retry in (False, True)]
    + [(code, True, "not") for code in NEVER_QUEUED],
    ids=lambda v: KafkaError(v).name() if isinstance(v, int) and not isinstance(v, bool) else str(v),
)
def test_it_classifies_a_failure_by_its_error_and_whether_an_earlier_attempt_may_have_written_it(
    code: int, may_retry: bool, persisted: str
) -> None:
    assert classify_persistence(KafkaError(code), may_retry=may_retry) == persisted


def test_it_assumes_retries_unless_told_otherwise() -> None:
    assert classify_persistence(KafkaError(KafkaError.NOT_ENOUGH_REPLICAS)) == "possibly"


@pytest.mark.parametrize(
    ("config", "may_retry"),
    [
        ({}, True),  # librdkafka's default: INT32_MAX
        ({"retries": 0}, False),
        ({"retries": "0"}, False),
        ({"message.send.max.retries": 0}, False),
        ({"retries": 1}, True),
        ({"retries": "2147483647"}, True),
        ({"retries": 0, "message.send.max.retries": 3}, True),  # aliases: the last one wins
        ({"message.send.max.retries": 3, "retries": 0}, False),
        ({"retries": "several"}, True),  # not a number: the cautious side
        ({"enable.idempotence": True}, True),
    ],
)
def test_it_reads_whether_sends_may_be_retried_from_the_config(config: dict[str, Any], may_retry: bool) -> None:
    assert sends_may_be_retried(config) is may_retry


def test_it_describes_errors_by_stable_name_first() -> None:
    assert describe_error(KafkaError(KafkaError._MSG_TIMED_OUT)) == "_MSG_TIMED_OUT: Local: Message timed out"


def _ledger_after_a_refused_send(
    producer_class: type[AuditedProducerV1] | type[AuditedProducer], config: dict[str, Any], key: bytes
) -> list[Any]:
    """The ledger records a producer of `producer_class` (on a fake client) writes for one send
    of `key` that the broker refused with NOT_ENOUGH_REPLICAS, once closed."""
    factory = FactoryRecorder()
    producer = producer_class(
        {"bootstrap.servers": "fake:9092", **config},
        ledger_topic=LEDGER,
        clients_topic="clients",
        producer_factory=factory,
    )
    producer.produce("t", b"v", key)
    factory.producers[0].deliver(KafkaError(KafkaError.NOT_ENOUGH_REPLICAS))
    producer.close()
    ledger = factory.ledger
    return [decode_ledger_record(item.value) for item in ledger.delivered + ledger.queued if item.topic == LEDGER]


@pytest.mark.parametrize(("config", "persisted"), [({}, "possibly"), ({"retries": 0}, "not")])
def test_both_producers_classify_failures_with_their_own_retries(config: dict[str, Any], persisted: str) -> None:
    v1_ledger = _ledger_after_a_refused_send(AuditedProducerV1, config, b"k1")
    [batch] = [r for r in v1_ledger if isinstance(r, ProducerBatch)]
    assert [(e.status, e.persisted) for e in batch.entries] == [("failed", persisted)]

    v2_ledger = _ledger_after_a_refused_send(AuditedProducer, config, b"k2")
    [failures] = [r for r in v2_ledger if isinstance(r, ProducerFailures)]
    assert [(f.audit_id, f.persisted) for f in failures.entries] == [("k2", persisted)]


# ---------------------------------------------------------------- real brokers ------------
# The retry must reach the leader after the controller has fenced the frozen follower
# (broker.session.timeout.ms, 9 s, plus a controller election when the follower was the active
# controller) and taken it out of the ISR: then it is refused with NOT_ENOUGH_REPLICAS, while
# the first attempt's record stays in the leader's log and is committed once the follower is
# back. librdkafka jitters the backoff by 20 %: the retry comes 16 to 20 s after the timeout.
RETRY_BACKOFF_MS = 20_000
REFUSED_RETRY_CONFIG = {
    "acks": "all",
    "enable.idempotence": False,
    "retries": 1,
    "request.timeout.ms": 2000,
    "retry.backoff.ms": RETRY_BACKOFF_MS,
    "retry.backoff.max.ms": RETRY_BACKOFF_MS,
    "message.timeout.ms": 90_000,
    "linger.ms": 0,
}


@pytest.mark.alone
@pytest.mark.integration
def test_a_send_whose_retry_was_refused_after_its_first_attempt_was_written_is_not_called_unpersisted(
    make_topic: Callable[..., str], kafka_bootstrap: str, kafka_brokers: int, audit_topics: AuditTopics
) -> None:
    if kafka_brokers < 3:
        pytest.skip("needs the 3-broker test stack")
    topic = make_topic("persist", partitions=1, replication_factor=2, config={"min.insync.replicas": "2"})
    cluster = Cluster(kafka_bootstrap)
    layout = cluster.partition(topic)
    follower = next(r for r in layout.replicas if r != layout.leader)
    config = {"bootstrap.servers": kafka_bootstrap, **REFUSED_RETRY_CONFIG}
    ledgers = {"ledger_topic": audit_topics.producer_ledger, "clients_topic": audit_topics.clients}
    v1 = AuditedProducerV1(config, **ledgers)
    v2 = AuditedProducer(config, **ledgers)
    reports: dict[bytes, KafkaError] = {}

    def failed(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            reports[msg.key()] = err

    # Both know the partition's leader before the follower freezes.
    v1.produce(topic, b"warm", b"warm-v1", on_delivery=failed)
    v2.produce(topic, b"warm", b"warm-v2", on_delivery=failed)
    assert v1.flush(30) == 0 and v2.flush(30) == 0 and reports == {}

    cluster.broker("pause", follower)
    try:
        v1.produce(topic, b"sent once", b"v1", on_delivery=failed)
        v2.produce(topic, b"sent once", b"v2", on_delivery=failed)
        deadline = time.monotonic() + RETRY_BACKOFF_MS / 1000 * 1.2 + 30
        while len(reports) < 2 and time.monotonic() < deadline:
            v1.poll(0.2)
            v2.poll(0.2)
    finally:
        cluster.broker("resume", follower)
    v1.close(60)
    v2.close(60)
    cluster.wait_for_isr(topic, 2)
    # An acks=all ack once the follower is back: the high watermark is past everything
    # appended before it, so the read below sees every record the leader kept.
    marker = Producer({"bootstrap.servers": kafka_bootstrap, "acks": "all"})
    marker.produce(topic, b"marker", b"marker")
    assert marker.flush(60) == 0

    # The clients' view: each send failed, its last attempt refused before the append.
    assert {key: err.code() for key, err in reports.items()} == {
        b"v1": KafkaError.NOT_ENOUGH_REPLICAS,
        b"v2": KafkaError.NOT_ENOUGH_REPLICAS,
    }, f"the retry was not refused for want of replicas (the sequence did not happen): {reports}"
    # The log's view: the first attempt of each was written.
    keys = [msg.key() for msg in read_topic(topic)]
    assert sorted(keys) == [b"marker", b"v1", b"v2", b"warm-v1", b"warm-v2"], keys

    ledger = read_ledger(audit_topics.producer_ledger)
    v1_failed = [
        (e.audit_id, e.error, e.persisted)
        for r in ledger
        if isinstance(r, ProducerBatch) and r.topic == topic
        for e in r.entries
        if e.status == "failed"
    ]
    assert v1_failed == [("v1", describe_error(reports[b"v1"]), "possibly")]
    v2_failed = [
        (f.audit_id, f.error, f.persisted)
        for r in ledger
        if isinstance(r, ProducerFailures) and r.topic == topic
        for f in r.entries
    ]
    assert v2_failed == [("v2", describe_error(reports[b"v2"]), "possibly")]
