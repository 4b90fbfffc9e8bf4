"""Locating without reading: when the key index stands in for the whole topic and the ledgers
hold nothing, no engine starts; and the record timestamps of the cluster view are read one
record per target."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from auditor.probes.producer import AuditedProducer
from auditor.probes.producer_v1 import AuditedProducerV1
from auditor.stuck import locate as locate_module
from auditor.stuck.evidence import LocatedRecord, PartitionState
from auditor.stuck.kafka_view import LedgerRange, ReadPlan
from auditor.stuck.locate import LocateError, LocateRequest, locate
from auditor.stuck.locate_python import read_ranges
from auditor.stuck.record_reader import record_timestamps

pytestmark = pytest.mark.integration


def test_it_runs_no_engine_when_the_index_leaves_nothing_to_read(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_subprocess(request: LocateRequest, timeout_s: float = 0) -> None:
        raise AssertionError("the Spark job was started with nothing to read")

    monkeypatch.setattr(locate_module, "locate_with_spark_subprocess", no_subprocess)
    known = LocatedRecord("TCK-1", 0, 3, 1_000, "committed", "s", 7)
    plan = ReadPlan(
        "tickets",
        {0: PartitionState(0, 0, 10, 10), 1: PartitionState(1, 0, 5, 5)},
        producer_ledger=LedgerRange("_audit.producer", {0: (4, 4)}),
        consumer_ledger=LedgerRange("_audit.consumer", {0: (9, 9)}),
    )
    request = LocateRequest(
        {"bootstrap.servers": "127.0.0.1:1"},  # nothing listens: any read would fail
        plan,
        "key",
        ["TCK-1", "TCK-2"],
        ["ticket-processor"],
        starts={0: 10, 1: 5},
        known={"TCK-1": [known]},
    )

    result = locate(request, "spark")

    assert request.records_to_read == 0
    assert result.engine == "spark" and result.records == {"TCK-1": [known]}
    assert (result.records_scanned, result.keyed_records, result.ledger_entries, result.marks) == (0, 0, {}, {})
    assert (result.unattributed_to_ms, result.group_marks, result.max_mark_below_low) == (None, {}, {})


def test_it_reads_the_timestamp_of_each_target_even_several_in_one_partition(
    make_topic: Callable[..., str], kafka_bootstrap: str
) -> None:
    topic = make_topic("stuck-stamps", partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    base = int(time.time() * 1000) - 60_000
    for partition in (0, 1):
        for offset in range(2000):
            producer.produce(topic, b"v", b"k", partition=partition, timestamp=base + partition * 10_000 + offset)
    assert producer.flush(30) == 0
    targets = [(topic, 0, 2), (topic, 0, 1500), (topic, 1, 0), (topic, 1, 3), (topic, 1, 1999), (topic, 0, 2000)]

    stamps = record_timestamps(kafka_bootstrap, {}, targets, timeout_s=10)

    assert stamps == {
        (topic, 0, 2): base + 2,
        (topic, 0, 1500): base + 1500,
        (topic, 1, 0): base + 10_000,
        (topic, 1, 3): base + 10_003,
        (topic, 1, 1999): base + 11_999,
        (topic, 0, 2000): None,  # past the end: no record
    }


def test_a_read_that_ends_before_its_planned_end_fails_instead_of_stopping_short(
    make_topic: Callable[..., str], kafka_bootstrap: str
) -> None:
    """After a leader change the new leader's high watermark can lag its predecessor's for a
    moment, and a truncation moves it back for good: the log then ends before where the plan
    said. Records past that end would look absent (never produced, or lost) if the read just
    stopped there. Planned here as a range past the log's real end."""
    topic = make_topic("stuck-short-read")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(10):
        producer.produce(topic, f"v{i}".encode(), f"TCK-{i}".encode(), partition=0)
    assert producer.flush(30) == 0

    whole = [m.offset() for m in read_ranges(kafka_bootstrap, {}, topic, {0: (0, 10)}, idle_timeout_s=10)]
    assert whole == list(range(10))
    with pytest.raises(LocateError, match=rf"{topic}/0 reached the end of its log at offset 10, before offset 15"):
        list(read_ranges(kafka_bootstrap, {}, topic, {0: (0, 15)}, idle_timeout_s=10))

    # The diagnosis's python engine: the locate step fails (its items become unknown), rather
    # than reporting TCK-12 (planned, never read) as having no record.
    request = LocateRequest(
        {"bootstrap.servers": kafka_bootstrap},
        ReadPlan(topic, {0: PartitionState(0, 0, 15, 15)}),
        "key",
        ["TCK-3", "TCK-12"],
        [],
    )
    with pytest.raises(LocateError, match="before offset 15"):
        locate(request, "python")


@pytest.mark.parametrize("contract", [1, 2])
def test_both_engines_date_an_ack_by_the_ledger_record_that_reported_it_not_by_when_it_was_produced(
    make_topic: Callable[..., str], kafka_bootstrap: str, spark: Any, contract: int
) -> None:
    """A producer that keeps a record before sending it (here linger.ms; retries through a
    leader failover alike) is acked well after the record was produced: the held-watermark
    rule must count from the ack, whose upper bound is the ledger record that reported it.
    Ground truth: when the producer's own delivery report came (its client's clock)."""
    topic = make_topic("stuck-late-ack")
    ledger = make_topic("stuck-late-ack-pledger")
    clients = make_topic("stuck-late-ack-clients")
    config = {"bootstrap.servers": kafka_bootstrap, "linger.ms": 2500, "acks": "1", "enable.idempotence": False}
    reported_ms: list[int] = []

    def report(err: KafkaError | None, msg: Message) -> None:
        assert err is None, err
        reported_ms.append(int(time.time() * 1000))

    produced_ms = int(time.time() * 1000)
    if contract == 1:
        probe: Any = AuditedProducerV1(config, ledger_topic=ledger, clients_topic=clients, ledger_flush_interval_s=0.2)
    else:
        probe = AuditedProducer(
            config, ledger_topic=ledger, clients_topic=clients, ledger_flush_interval_s=0.2, delivery_reports="all"
        )
    probe.produce(topic, b"{}", b"TCK-late", partition=0, on_delivery=report)
    deadline = time.monotonic() + 30
    while not reported_ms and time.monotonic() < deadline:  # no flush: it would end the linger
        probe.poll(0.1)
    assert probe.close(30) == 0
    assert reported_ms and reported_ms[0] - produced_ms >= 2000  # lingered, then acked
    watcher = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "stuck-late-ack"})
    try:
        _, ledger_records = watcher.get_watermark_offsets(TopicPartition(ledger, 0), timeout=10)
    finally:
        watcher.close()
    request = LocateRequest(
        {"bootstrap.servers": kafka_bootstrap},
        ReadPlan(
            topic,
            {0: PartitionState(0, 0, 1, 1)},
            producer_ledger=LedgerRange(ledger, {0: (0, ledger_records)}),
        ),
        "key",
        ["TCK-late"],
        [],
    )

    for engine in ("python", "spark"):
        located = locate(request, engine, spark)
        [entry] = [e for e in located.ledger_entries["TCK-late"] if e.status in ("acked", "acked-range")]
        # the ack is dated no earlier than the delivery report came (the same host's clock)
        assert entry.acked_no_later_ms is not None and entry.acked_no_later_ms >= reported_ms[0] - 50, (engine, entry)
        if contract == 2:
            # v2 stamps the record when produced, before it lingered; the ledger record that
            # reported it acked was written after the delivery report came
            assert entry.ts_ms is not None and entry.ts_ms <= produced_ms + 500, (engine, entry)
            assert entry.acked_by_ms is not None and entry.acked_no_later_ms == entry.acked_by_ms, (engine, entry)
        else:
            # v1 dates an entry when its delivery report came
            assert entry.acked_by_ms is None and entry.acked_no_later_ms == entry.ts_ms, (engine, entry)
