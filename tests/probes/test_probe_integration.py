"""The probes against a real broker: headers, ledgers, failures, restarts, crashes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_STORED, KafkaError, KafkaException, TopicPartition

from auditor.lab.cluster import delete_records
from auditor.probes import (
    AuditedConsumerV1,
    AuditedProducerV1,
    ClientRecord,
    HeaderProblems,
    ProducerBatch,
    SequenceGap,
    SessionEnd,
    SessionStart,
    find_duplicate_sequences,
    find_reprocessed,
    find_sequence_gaps,
    parse_audit_headers,
    processed_offsets,
    seen_record_from_message,
    summarize_consumer_ledger,
    summarize_producer_ledger,
)
from tests.probes.kafka_helpers import (
    AuditTopics,
    TopicFactory,
    integration_marks,
    produce_plain,
    read_ledger,
    read_topic,
    wait_for,
)

pytestmark = integration_marks()

ROOT = Path(__file__).resolve().parents[2]


def audited_producer(bootstrap: str, topics: AuditTopics, **config: Any) -> AuditedProducerV1:
    return AuditedProducerV1(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, **config},
        ledger_topic=topics.producer_ledger,
        clients_topic=topics.clients,
    )


def audited_consumer(bootstrap: str, topics: AuditTopics, group: str, **config: Any) -> AuditedConsumerV1:
    return AuditedConsumerV1(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
         "auto.offset.reset": "earliest", **config},
        ledger_topic=topics.consumer_ledger,
        clients_topic=topics.clients,
    )  # fmt: skip


def seen_records(topic: str) -> list[Any]:
    records = [seen_record_from_message(m.topic(), m.partition(), m.offset(), m.headers()) for m in read_topic(topic)]
    assert all(r is not None for r in records)
    return records


def test_it_stamps_headers_and_its_ledger_matches_the_topic(
    probe_bootstrap: str, probe_topic: TopicFactory, audit_topics: AuditTopics
) -> None:
    topic = probe_topic("orders", partitions=3)
    with audited_producer(probe_bootstrap, audit_topics, **{"client.id": "orders-app"}) as producer:
        for i in range(120):
            producer.produce(topic, b"order-%d" % i, key=b"order-%d" % i if i % 3 else None, headers=[("trace", b"t")])
            producer.poll(0)
        assert producer.flush(30) == 0
        session = producer.session_id

    messages = read_topic(topic)
    assert len(messages) == 120
    parsed = [parse_audit_headers(m.headers()) for m in messages]
    assert all(p is not None and p.valid and p.pid == session for p in parsed)
    assert sorted(p.seq for p in parsed) == list(range(120))  # type: ignore[union-attr, type-var]
    assert all(("trace", b"t") in m.headers() for m in messages)
    keyed = {m.key().decode(): p.audit_id for m, p in zip(messages, parsed, strict=True) if m.key()}
    assert keyed and all(key == audit_id for key, audit_id in keyed.items())

    ledger_records = read_ledger(audit_topics.producer_ledger)
    ledger = summarize_producer_ledger(ledger_records)
    topic_ledger = ledger[session].topics[topic]
    actual = {p.seq: (m.partition(), m.offset()) for m, p in zip(messages, parsed, strict=True)}  # type: ignore[union-attr]
    assert topic_ledger.acked == actual
    assert not topic_ledger.failed
    assert ledger[session].ended and ledger[session].last_seq(topic) == 119
    assert isinstance(ledger_records[0], SessionStart) and isinstance(ledger_records[-1], SessionEnd)
    assert find_sequence_gaps(seen_records(topic), ledger) == []
    [client] = read_ledger(audit_topics.clients)
    assert isinstance(client, ClientRecord) and client.client_id == "orders-app" and client.session == session


def test_it_ledgers_failed_sends_as_failed(
    probe_bootstrap: str, probe_topic: TopicFactory, audit_topics: AuditTopics
) -> None:
    topic = probe_topic("small", partitions=1, config={"max.message.bytes": "2048"})
    missing_topic = f"never-created-{uuid.uuid4().hex[:10]}"
    outcome: dict[bytes, int] = {}

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        outcome[msg.value()[:8]] = err.code() if err else 0

    # retries=0: each failure's error speaks for the one attempt that may have written it
    settings = {"allow.auto.create.topics": False, "message.timeout.ms": 3000, "retries": 0}
    with audited_producer(probe_bootstrap, audit_topics, **settings) as producer:
        # Before metadata arrives a bad partition fails in the delivery report...
        producer.produce(topic, b"nowhere", partition=5, on_delivery=on_delivery)  # seq 0
        producer.produce(topic, b"fits", on_delivery=on_delivery)  # seq 1: acked
        producer.flush(10)  # alone in its batch: the broker rejects whole batches
        # ...after it, produce() itself raises, and the sequence is not used up.
        with pytest.raises(KafkaException):
            producer.produce(topic, b"nowhere", partition=5, on_delivery=on_delivery)
        producer.produce(topic, b"x" * 8192, on_delivery=on_delivery)  # seq 2: too large for the topic
        producer.produce(missing_topic, b"lost", on_delivery=on_delivery)  # the topic never exists
        producer.flush(20)
        session = producer.session_id

    assert outcome[b"fits"] == 0
    assert outcome[b"x" * 8] == KafkaError.MSG_SIZE_TOO_LARGE
    assert outcome[b"nowhere"] == KafkaError._UNKNOWN_PARTITION
    assert outcome[b"lost"] in (KafkaError._UNKNOWN_TOPIC, KafkaError._MSG_TIMED_OUT)
    ledger = summarize_producer_ledger(read_ledger(audit_topics.producer_ledger))[session]
    small = ledger.topics[topic]
    assert set(small.acked) == {1}
    assert {seq: (e.status, e.persisted) for seq, e in small.failed.items()} == {
        0: ("failed", "not"),
        2: ("failed", "not"),
    }
    assert small.failed[0].error.startswith("_UNKNOWN_PARTITION")  # type: ignore[union-attr]
    assert small.failed[2].error.startswith("MSG_SIZE_TOO_LARGE")  # type: ignore[union-attr]
    assert small.last_seq == 2
    [lost] = ledger.topics[missing_topic].failed.values()
    assert lost.seq == 0 and lost.persisted in ("not", "possibly") and lost.offset == -1

    records = seen_records(topic)
    assert [r.seq for r in records] == [1]
    assert find_sequence_gaps(records, {session: ledger}) == []
    gaps = find_sequence_gaps(records, {session: ledger}, include_failed=True)
    assert [(g.topic, g.first, g.last, g.reason) for g in gaps] == [
        (missing_topic, 0, 0, "failed"),
        (topic, 0, 0, "failed"),
        (topic, 2, 2, "failed"),
    ]


def test_it_survives_restarts_without_false_gaps_duplicates_or_reprocessing(
    probe_bootstrap: str, probe_topic: TopicFactory, audit_topics: AuditTopics
) -> None:
    topic = probe_topic("restart", partitions=2)
    for _ in range(2):
        with audited_producer(probe_bootstrap, audit_topics) as producer:
            for i in range(40):
                producer.produce(topic, b"v", key=b"k%d" % i)
            producer.flush(30)

    group = f"restart-{os.getpid()}"
    partitions = [TopicPartition(topic, p, OFFSET_STORED) for p in range(2)]
    handled = 0
    for budget in (50, 30):
        with audited_consumer(probe_bootstrap, audit_topics, group) as consumer:
            consumer.assign(partitions)
            done = 0
            while done < budget:
                msg = consumer.poll(5)
                assert msg is not None, "the topic ran dry before the budget"
                if msg.error() is not None:
                    continue
                with consumer.processing(msg):
                    done += 1
                consumer.commit(message=msg, asynchronous=False)
            handled += done
    assert handled == 80

    producer_ledger = summarize_producer_ledger(read_ledger(audit_topics.producer_ledger))
    assert len(producer_ledger) == 2
    assert all(s.ended and s.last_seq(topic) == 39 for s in producer_ledger.values())
    records = seen_records(topic)
    assert find_sequence_gaps(records, producer_ledger) == []
    assert find_duplicate_sequences(records) == []

    consumer_records = read_ledger(audit_topics.consumer_ledger)
    sessions = summarize_consumer_ledger(consumer_records)
    assert len(sessions) == 2 and all(s.ended and s.group == group for s in sessions.values())
    assert sorted(len(s.processed) for s in sessions.values()) == [30, 50]
    assert find_reprocessed(consumer_records) == []
    assert processed_offsets(consumer_records, group) == {(topic, r.partition, r.offset) for r in records}


def test_it_marks_only_what_was_processed(
    probe_bootstrap: str, probe_topic: TopicFactory, audit_topics: AuditTopics
) -> None:
    topic = probe_topic("marks")
    with audited_producer(probe_bootstrap, audit_topics) as producer:
        for i in range(10):
            producer.produce(topic, b"%d" % i, key=b"item-%d" % i)
    marked: list[tuple[int, str]] = []
    with audited_consumer(probe_bootstrap, audit_topics, f"marks-{os.getpid()}") as consumer:
        consumer.assign([TopicPartition(topic, 0, 0)])
        for _ in range(10):
            msg = consumer.poll(10)
            assert msg is not None and msg.error() is None
            try:
                with consumer.processing(msg):
                    if int(msg.value()) % 3 == 0:
                        raise RuntimeError("handler failed")
                    marked.append((msg.offset(), msg.key().decode()))
            except RuntimeError:
                pass
        assert consumer.stats()["processed"] == len(marked) == 6
        sid = consumer.session_id

    [session] = summarize_consumer_ledger(read_ledger(audit_topics.consumer_ledger)).values()
    assert session.sid == sid
    assert session.processed == {(topic, 0, offset) for offset, _ in marked}
    ids = [e.audit_id for r in read_ledger(audit_topics.consumer_ledger) if hasattr(r, "entries") for e in r.entries]
    assert ids == [key for _, key in marked]


def test_it_counts_missing_and_malformed_headers_and_keeps_going(
    probe_bootstrap: str, probe_topic: TopicFactory, audit_topics: AuditTopics
) -> None:
    topic = probe_topic("mixed")
    produce_plain(
        topic,
        [
            (b"no headers", None),
            (b"other headers", [("trace", b"1")]),
            (b"half audited", [("audit-id", b"x"), ("audit-seq", b"3")]),
            (b"bad seq", [("audit-id", b"x"), ("audit-pid", b"f" * 32), ("audit-seq", b"three"), ("audit-ts", b"1")]),
        ],
    )
    with audited_producer(probe_bootstrap, audit_topics) as producer:
        producer.produce(topic, b"good", key=b"good")
    with audited_consumer(probe_bootstrap, audit_topics, f"mixed-{os.getpid()}") as consumer:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = 0
        while got < 5:
            msg = consumer.poll(10)
            assert msg is not None
            if msg.error() is None:
                consumer.mark_processed(msg)
                got += 1
        stats = consumer.stats()
    assert {k: stats[k] for k in ("received", "processed", "missing_headers", "malformed_headers")} == {
        "received": 5,
        "processed": 5,
        "missing_headers": 2,
        "malformed_headers": 2,
    }


def test_it_publishes_masked_configs(
    probe_bootstrap: str, probe_topic: TopicFactory, audit_topics: AuditTopics
) -> None:
    secret = "do-not-leak-7f3a"
    with audited_producer(probe_bootstrap, audit_topics, **{"sasl.password": secret}) as producer:
        producer_view = producer.effective_config()
    with audited_consumer(probe_bootstrap, audit_topics, "masked", **{"ssl.key.password": secret}) as consumer:
        consumer_view = consumer.effective_config()
    raw = b"".join(m.value() for m in read_topic(audit_topics.clients))
    assert secret.encode() not in raw
    records = {r.kind: r for r in read_ledger(audit_topics.clients) if isinstance(r, ClientRecord)}
    assert records["producer"].config == producer_view and producer_view["sasl.password"] == "****"
    assert records["consumer"].config == consumer_view and consumer_view["ssl.key.password"] == "****"
    assert records["consumer"].group == "masked" and records["producer"].group is None


CRASHING_PRODUCER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {root!r})
    from auditor.probes import AuditedProducerV1
    producer = AuditedProducerV1(
        {{"bootstrap.servers": {bootstrap!r}}},
        ledger_topic={ledger!r}, clients_topic={clients!r},
        ledger_batch_size=10, ledger_flush_interval_s=3600,
    )
    for i in range(25):
        producer.produce({topic!r}, b"v%d" % i)
    assert producer.producer.flush(30) == 0  # records and acks done; 5 ledger rows still buffered
    print(producer.session_id, flush=True)
    time.sleep(120)  # killed with SIGKILL long before this ends
    """
)


def test_it_never_reports_a_gap_past_a_crashed_sessions_ledger(
    probe_bootstrap: str, probe_topic: TopicFactory, audit_topics: AuditTopics
) -> None:
    topic = probe_topic("crash")
    script = CRASHING_PRODUCER.format(
        root=str(ROOT), bootstrap=probe_bootstrap, ledger=audit_topics.producer_ledger,
        clients=audit_topics.clients, topic=topic,
    )  # fmt: skip
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        session = child.stdout.readline().strip()
        assert len(session) == 32, "the crashing producer did not start"

        def two_batches_ledgered() -> bool:
            records = read_ledger(audit_topics.producer_ledger)
            return sum(isinstance(r, ProducerBatch) for r in records) == 2

        wait_for(two_batches_ledgered, 30, "the crashing producer's size-triggered ledger batches")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)

    ledger = summarize_producer_ledger(read_ledger(audit_topics.producer_ledger))
    crashed = ledger[session]
    assert not crashed.ended
    assert crashed.last_seq(topic) == 19 and len(crashed.topics[topic].acked) == 20
    records = seen_records(topic)
    assert len(records) == 25  # the topic holds the unledgered tail 20..24
    assert find_sequence_gaps(records, ledger) == []

    with audited_producer(probe_bootstrap, audit_topics) as restarted:
        for _ in range(5):
            restarted.produce(topic, b"after")
    ledger = summarize_producer_ledger(read_ledger(audit_topics.producer_ledger))
    records = seen_records(topic)
    assert len(records) == 30
    assert find_sequence_gaps(records, ledger) == []
    assert find_duplicate_sequences(records) == []
    # Losing an acked record inside the ledgered range is still caught.
    assert [(g.first, g.last, g.reason) for g in find_sequence_gaps(records[1:], ledger)] == [(0, 0, "acked-not-seen")]


def test_it_ledgers_acks_0_sends_as_unconfirmed_and_never_as_broker_acked(
    probe_bootstrap: str, probe_topic: TopicFactory, audit_topics: AuditTopics, probe_admin: Any
) -> None:
    topic = probe_topic("acks0")
    with audited_producer(probe_bootstrap, audit_topics, acks=0) as producer:
        for i in range(5):
            producer.produce(topic, b"v%d" % i, key=b"k%d" % i)
        assert producer.flush(30) == 0
        session = producer.session_id

    [batch] = [r for r in read_ledger(audit_topics.producer_ledger) if isinstance(r, ProducerBatch)]
    assert [(e.seq, e.status, e.partition, e.offset, e.error, e.persisted, e.audit_id) for e in batch.entries] == [
        (seq, "unconfirmed", 0, -1, None, "possibly", f"k{seq}") for seq in range(5)
    ]
    assert len(read_topic(topic)) == 5  # the broker did write them; nobody told the producer
    # Two of them disappear (as a dropped send would): they are unconfirmed sends not seen,
    # never acked-not-seen (a broker-side loss).
    delete_records(probe_admin, [TopicPartition(topic, 0, 2)])
    ledger = summarize_producer_ledger(read_ledger(audit_topics.producer_ledger))
    assert not ledger[session].topics[topic].acked
    assert find_sequence_gaps(seen_records(topic), ledger) == [
        SequenceGap(session, topic, 0, 1, "unconfirmed-not-seen")
    ]


def test_it_says_where_a_consumer_session_ended_and_counts_its_bad_headers_in_the_ledger(
    probe_bootstrap: str, probe_topic: TopicFactory, audit_topics: AuditTopics
) -> None:
    mixed, clean = probe_topic("mixed"), probe_topic("clean", partitions=2)
    produce_plain(
        mixed,
        [
            (b"no headers", None),
            (b"other headers", [("trace", b"1")]),
            (b"half audited", [("audit-id", b"x"), ("audit-seq", b"3")]),
            (b"bad seq", [("audit-id", b"x"), ("audit-pid", b"f" * 32), ("audit-seq", b"three"), ("audit-ts", b"1")]),
            (b"no headers again", None),
        ],
    )
    with audited_producer(probe_bootstrap, audit_topics) as producer:
        producer.produce(mixed, b"good", key=b"good")
        for i in range(5):
            producer.produce(clean, b"c%d" % i, key=b"c%d" % i, partition=i % 2)
    consumer = AuditedConsumerV1(
        {"bootstrap.servers": probe_bootstrap, "group.id": f"ends-{uuid.uuid4().hex[:8]}",
         "enable.auto.commit": False},
        ledger_topic=audit_topics.consumer_ledger,
        clients_topic=audit_topics.clients,
        ledger_flush_interval_s=0.2,
    )  # fmt: skip
    expected_problems = {mixed: HeaderProblems(missing=3, malformed=2)}
    expected_last = {mixed: {0: 5}, clean: {0: 2, 1: 1}}
    try:
        consumer.assign([TopicPartition(mixed, 0, 0), TopicPartition(clean, 0, 0), TopicPartition(clean, 1, 0)])
        got = 0
        while got < 11:
            msg = consumer.poll(10)
            assert msg is not None
            if msg.error() is None:
                if msg.value() != b"bad seq":  # processed all but one: the ledger says so
                    consumer.mark_processed(msg)
                got += 1
        sid = consumer.session_id

        def checkpoint_says_it_all() -> bool:
            ends = [r for r in read_ledger(audit_topics.consumer_ledger) if isinstance(r, SessionEnd)]
            return bool(ends) and (ends[-1].last_offset, ends[-1].header_problems) == (expected_last, expected_problems)

        # The background flush writes a checkpoint without being asked.
        wait_for(checkpoint_says_it_all, 20, "a session-end checkpoint with the last offsets and header counts")
        checkpoints = sum(isinstance(r, SessionEnd) for r in read_ledger(audit_topics.consumer_ledger))
        time.sleep(1)  # five flush intervals with nothing new: no more checkpoints
        assert sum(isinstance(r, SessionEnd) for r in read_ledger(audit_topics.consumer_ledger)) == checkpoints
    finally:
        consumer.close()

    records = read_ledger(audit_topics.consumer_ledger)
    final = records[-1]
    assert isinstance(final, SessionEnd) and final.session == sid
    assert (final.last_offset, final.header_problems) == (expected_last, expected_problems)
    session = summarize_consumer_ledger(records)[sid]
    assert session.last_offset == {(mixed, 0): 5, (clean, 0): 2, (clean, 1): 1}
    assert (mixed, 0, 3) not in session.processed and len(session.processed) == 10
