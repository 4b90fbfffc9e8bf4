"""Reconciliation where retention or the log cleaner removed records and ledger entries
before any run read them, on known ground truth: what was deleted unread is not reported
missing, a gap or broker-lost, and what came after it still is.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

from auditor.lab.cluster import Cluster as LabCluster
from auditor.lab.cluster import all_led, wait_until
from spark_jobs import reconcile_findings, reconcile_updates
from tests.support.reconcile_world import (
    World,
    delete_records_before,
    finding_set,
    produce_keyed,
    reconcile_once,
)

pytestmark = pytest.mark.integration


def test_it_never_reports_rows_whose_records_were_deleted_unread_as_missing(
    spark: SparkSession, world: World, kafka_admin: AdminClient, tmp_path: Path
):
    # Partition 0 held tickets 1 and 2 (50 and 45 minutes old); both are deleted before the
    # first run. Ticket 3 (20 minutes old) is the first record still there; the rest of
    # the data is in partition 1.
    world.produce("t1", 1, partition=0, age_s=50 * 60)
    world.produce("t2", 2, partition=0, age_s=45 * 60)
    world.produce("t3", 3, partition=0, age_s=20 * 60)
    world.produce("t4", 4, partition=1, age_s=40 * 60)
    delete_records_before(kafka_admin, world.topic, 0, world.at("t3")[1])
    world.insert(1, 2, 3, 4, age="1 hour")
    world.insert(5, age="55 minutes")  # no record, but as old as the deleted ones: cannot be told apart
    world.insert(6, age="10 minutes")  # no record, created after every deleted record: really missing
    binding = world.binding()

    first = reconcile_once(spark, binding, tmp_path)
    assert finding_set(first) == {("missing", "6", None, None, None)}
    assert first["counts"]["unverifiable"] == 3  # rows 1, 2 and 5
    assert first["counts"]["missing"] == 1
    assert first["offset_ranges"]["topic"] == {"0": [2, 3], "1": [0, 1]}
    lost = [w for w in first["warnings"] if "were deleted" in w]
    assert len(lost) == 1 and lost[0].startswith(f"{world.topic}/0: offsets 0..1 (2 record(s)) were deleted"), lost
    assert first["window"]["unverifiable_until"]

    # Ticket 5's record turns up late: the row is no longer unverifiable. The bound holds
    # across incremental runs although nothing new was lost.
    world.produce("t5", 5, partition=1, age_s=60)
    second = reconcile_once(spark, binding, tmp_path)
    assert second["mode"] == "incremental"
    assert finding_set(second) == {("missing", "6", None, None, None)}
    assert second["counts"]["unverifiable"] == 2  # rows 1 and 2
    assert not [w for w in second["warnings"] if "were deleted" in w]


def test_rows_reported_broker_lost_or_held_by_an_open_transaction_are_not_counted_unverifiable(
    spark: SparkSession, world: World, kafka_admin: AdminClient, tmp_path: Path
):
    """Partition 1 held ticket 100's record (50 minutes old), deleted before the first run:
    rows created up to the first record left there (ticket 102's, 20 minutes old) may have had
    their record among the deleted, and are unverifiable. The ledger acked ticket 101 at the
    offset that holds ticket 102's record (the broker lost it): row 101 is `missing`,
    broker-lost. Ticket 99's record is behind a transaction left open in partition 0: its row
    is not judged this run. Only row 100 is unverifiable; before stop 70 the count said 3."""
    world.produce("t0", 100, seq=0, partition=1, age_s=50 * 60)
    world.ledger(0, "acked", 100, "t0")
    world.produce("t2", 102, seq=2, partition=1, age_s=20 * 60)
    world.ledger(1, "acked", 101, "t2")  # the ack the leader gave before it lost the record
    world.ledger(2, "acked", 102, "t2")
    world.flush_ledger()
    delete_records_before(kafka_admin, world.topic, 1, world.at("t2")[1])
    world.insert(99, 100, 101, 102, age="1 hour")
    txn = Producer({"bootstrap.servers": world.bootstrap, "transactional.id": f"held-{uuid.uuid4().hex[:8]}"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(world.topic, json.dumps({"ticket_id": 99}).encode(), partition=0)
    assert txn.flush(30) == 0  # written, and the transaction left open
    try:
        # Ground truth: the offset acked for ticket 101 holds ticket 102; ticket 99 is in the log.
        tickets = {
            (r.partition, r.offset): json.loads(r.value)["ticket_id"]
            for r in LabCluster(world.bootstrap).read_topic(world.topic)
            if r.value is not None
        }
        assert tickets == {world.at("t2"): 102, (0, 0): 99}

        result = reconcile_once(spark, world.binding(consumer_groups=[]), tmp_path)
    finally:
        txn.abort_transaction(30)

    assert finding_set(result) == {
        ("gap", "101", "broker-lost", *world.at("t2")),
        ("missing", "101", "broker-lost", *world.at("t2")),
    }
    assert result["window"]["unverifiable_until"]
    assert any("behind an open transaction" in w for w in result["warnings"]), result["warnings"]
    assert result["counts"]["unverifiable"] == 1  # row 100


def test_it_never_calls_sequences_never_sent_whose_records_and_ledger_entries_were_deleted_unread(
    spark: SparkSession, world: World, kafka_admin: AdminClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # A block per sequence number, so that these few records stand for a long session's blocks.
    monkeypatch.setattr(reconcile_findings, "SEQ_TIME_BUCKET", 1)
    monkeypatch.setattr(reconcile_updates, "SEQ_TIME_BUCKET", 1)
    # What the producer did: sequences 0-3 and 5 sent and acked, each ledgered in a ledger
    # record of its own soon after; sequence 4 never sent at all.
    # Sequence 5 older than the send outcome wait (6 min): a hole below a sequence sent since
    # may still be on its way, and is not judged yet.
    sent = {0: 40 * 60, 1: 38 * 60, 2: 12 * 60, 3: 10 * 60, 5: 8 * 60}  # seq → age in seconds
    for seq, age_s in sent.items():
        world.produce(f"t{seq}", 100 + seq, seq=seq, partition=0, age_s=age_s)
        world.ledger(seq, "acked", 100 + seq, label=f"t{seq}")
        world.flush_ledger(age_s=max(0, age_s - 30))
    world.insert(102, 103, 105)
    # Retention deletes sequences 0 and 1 from the topic and from the producer ledger before any
    # run reads them.
    delete_records_before(kafka_admin, world.topic, 0, world.at("t2")[1])
    delete_records_before(kafka_admin, world.producer_ledger, 0, 2)

    result = reconcile_once(spark, world.binding(), tmp_path)

    gaps = sorted((f["cause"], f["seq"], f["seq_end"]) for f in result["findings"] if f["kind"] == "gap")
    # Sequence 4 came after sequence 3, written after both deletions: nothing deleted could
    # have held it. Nothing is left to tell whether 0 and 1 were sent: not reported.
    assert gaps == [("never-sent", 4, 4)], gaps
    assert result["counts"]["gap"] == 1
    deleted = [w for w in result["warnings"] if w.startswith("producer ledger")]
    assert len(deleted) == 1 and deleted[0].startswith(
        f"producer ledger {world.producer_ledger}/0: offsets 0..1 (2 record(s)) were deleted"
    ), result["warnings"]
    assert result["window"]["entries_lost_until"] and result["window"]["unverifiable_until"]


# A compacted topic whose cleaner removes superseded records, then tombstones, within seconds
# (a segment closes after 1 s; any dirt is worth a pass; tombstones are kept for no time).
CLEANED_AT_ONCE = {
    "cleanup.policy": "compact",
    "segment.ms": "1000",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "0",
}


@pytest.mark.alone
def test_a_rebuild_keeps_a_record_the_log_cleaner_removed_as_delivered(
    spark: SparkSession, world: World, kafka_admin, tmp_path: Path
):
    """A compacted topic. Item 1's record is read by a run; then the application deletes the
    item (a tombstone; its row stays, as a soft delete), and the log cleaner removes the record
    and the tombstone before any run reads the tombstone. Then the broker loses the other
    partition's log, and the next run rebuilds. Item 1 was delivered: no `missing`."""
    cluster = LabCluster(world.bootstrap)
    broker = max(cluster.broker_ids())
    world.topic = f"rec-cmp-{uuid.uuid4().hex[:8]}"
    created = kafka_admin.create_topics(
        [NewTopic(world.topic, 2, replica_assignment=[[broker]] * 2, config=CLEANED_AT_ONCE)]
    )
    created[world.topic].result(timeout=60)
    wait_until(lambda: all_led(kafka_admin, world.topic, 2), 30, f"leaders for {world.topic}")
    binding = world.binding(record_key="key", consumer_groups=[], guarantee="at-least-once")
    world.insert(1, 2)
    produce_keyed(world, "t1", "1", 1, partition=1)
    produce_keyed(world, "t2", "2", 2, partition=0)
    first = reconcile_once(spark, binding, tmp_path)
    assert finding_set(first) == set()

    produce_keyed(world, "x1", "1", None, partition=1)

    def cleaned() -> bool:
        # Another tombstone (no item's) rolls the segment and dirties the log again: the
        # cleaner removes record 1 on one pass and its tombstone on a later one.
        time.sleep(1.1)
        produce_keyed(world, "filler", "filler", None, partition=1)
        return not any(r.key == "1" for r in cluster.read_topic(world.topic))

    wait_until(cleaned, 120, f"the log cleaner to remove item 1's record and tombstone from {world.topic}")
    cluster.lose_disk(broker, world.topic, 0)

    # Ground truth, without the auditor: item 1's record was acked (its delivery report) in a
    # partition whose log was never cut (its end only grew: the cleaner removed it); item 2's
    # record was acked in the partition whose log the broker lost, now empty.
    left = cluster.read_topic(world.topic)
    assert not any(r.key in {"1", "2"} for r in left)
    assert all(r.partition == 1 for r in left)
    assert cluster.watermarks(world.topic)[1][1] > world.offsets["x1"][1]
    expected = {("missing", "2", "broker-lost", *world.at("t2"))}

    second = reconcile_once(spark, binding, tmp_path)
    assert second["mode"] == "rebuild" and set(second["rewritten"]) == {"0"}
    assert finding_set(second) == expected
    third = reconcile_once(spark, binding, tmp_path)
    assert third["mode"] == "incremental" and finding_set(third) == expected
    cluster.delete_topic(world.topic)


def test_an_item_whose_record_and_tombstone_the_cleaner_removed_unread_is_neither_missing_nor_a_gap(
    spark: SparkSession, world: World, kafka_admin, tmp_path: Path
):
    """A compacted topic keyed by the item id, with delete.retention.ms=0. A v1 probe (its
    ledger names each acked record's key) sends items 1 and 2; the application then deletes
    item 1 with a tombstone (its row stays, a soft delete), and the log cleaner removes the
    record and the tombstone before any run reads the topic. Item 3 was never sent. Nothing
    left tells item 1's fate: a first run reports neither a `missing` row nor a `gap` for its
    acked record, and counts rows 1 and 3 unverifiable. delete.retention.ms is then raised to
    30 minutes: the next run, minutes after the first, has no new horizon of its own, and
    still reports no gap for that acked record."""
    from auditor.probes import AuditedProducerV1

    cluster = LabCluster(world.bootstrap)
    world.topic = f"rec-tomb-{uuid.uuid4().hex[:8]}"
    kafka_admin.create_topics([NewTopic(world.topic, 1, 1, config=CLEANED_AT_ONCE)])[world.topic].result(timeout=60)
    wait_until(lambda: all_led(kafka_admin, world.topic, 1), 30, f"a leader for {world.topic}")
    binding = world.binding(record_key="key", consumer_groups=[], guarantee="at-least-once")
    world.insert(1, 2, 3)
    config = {"bootstrap.servers": world.bootstrap}
    ledgers = {"ledger_topic": world.producer_ledger, "clients_topic": world.consumer_ledger}
    acked: dict[str, tuple[int, int]] = {}

    def report(err: Any, msg: Any) -> None:
        assert err is None, err
        acked[msg.key().decode()] = (msg.partition(), msg.offset())

    # stamped as produce_keyed stamps the tombstones after them: a segment rolls on the record
    # timestamps (a later one segment.ms past its first), and an earlier stamp never rolls it
    stamp = int(time.time() * 1000) - 10 * 60 * 1000
    with AuditedProducerV1(config, **ledgers) as probe:
        for item in (1, 2):
            value = json.dumps({"ticket_id": item}).encode()
            probe.produce(world.topic, value, str(item).encode(), 0, on_delivery=report, timestamp=stamp)
        probe.flush(30)
    produce_keyed(world, "x1", "1", None)

    def cleaned() -> bool:
        time.sleep(1.1)
        produce_keyed(world, "filler", "filler", None)  # rolls the segment, dirties the log
        return not any(r.key == "1" for r in cluster.read_topic(world.topic))

    wait_until(cleaned, 120, f"the log cleaner to remove item 1's record and tombstone from {world.topic}")
    # Ground truth, without the auditor: item 1's record and tombstone were acked (delivery
    # reports) and a full read holds neither; item 2's record is there; item 3 was never sent.
    assert set(acked) == {"1", "2"} and "x1" in world.offsets
    left = cluster.read_topic(world.topic)
    assert not any(r.key in {"1", "3"} for r in left) and any(r.key == "2" for r in left)

    first = reconcile_once(spark, binding, tmp_path)
    assert first["mode"] == "full"
    # the old code: a broker-lost gap for item 1's acked record, and rows 1 and 3 missing
    assert finding_set(first) == set()
    assert first["counts"]["unverifiable"] == 2
    assert any("delete.retention.ms=0" in w and "no earlier run" in w for w in first["warnings"])

    cluster.set_topic_config(world.topic, {"delete.retention.ms": "1800000"})
    second = reconcile_once(spark, binding, tmp_path)
    assert second["mode"] == "incremental"
    # the first run's horizon is kept: without it, the gap (and row 1 broker-lost) came back
    assert finding_set(second) == set()
    assert second["counts"]["unverifiable"] == 2
    assert not any("delete.retention.ms=" in w for w in second["warnings"])
    cluster.delete_topic(world.topic)


def test_a_broker_lost_gap_a_run_read_stays_reported_once_retention_deletes_its_offset(
    spark: SparkSession, world: World, kafka_admin: AdminClient, tmp_path: Path
):
    """The leader acked ticket 101 (sequence 1) at an offset that, after a failover, holds
    ticket 102's record (sequence 2): the broker lost it. A run reads that offset and reports
    the gap. Retention then deletes the partition up to ticket 103's record: the offset can no
    longer be read, which does not make the record found again. Before stop 70 the next run
    counted the acked entry below the log start as present, dropped the gap, reported row 101
    missing without a cause and resolved the gap's alert."""
    world.produce("t0", 100, seq=0, partition=0)
    world.ledger(0, "acked", 100, "t0")
    world.produce("t2", 102, seq=2, partition=0)
    world.ledger(1, "acked", 101, "t2")  # the ack the leader gave before it lost the record
    world.ledger(2, "acked", 102, "t2")
    world.flush_ledger()
    world.insert(100, 101, 102)
    binding = world.binding()
    # Ground truth, without the auditor: the offset acked for ticket 101 holds ticket 102.
    cluster = LabCluster(world.bootstrap)
    at_lost = [r for r in cluster.read_topic(world.topic) if (r.partition, r.offset) == world.at("t2")]
    assert len(at_lost) == 1 and json.loads(at_lost[0].value)["ticket_id"] == 102
    expected = {("gap", "101", "broker-lost", *world.at("t2")), ("missing", "101", "broker-lost", *world.at("t2"))}

    first = reconcile_once(spark, binding, tmp_path)
    assert finding_set(first) == expected

    world.produce("t3", 103, seq=3, partition=0)
    world.ledger(3, "acked", 103, "t3")
    world.flush_ledger()
    world.insert(103)
    delete_records_before(kafka_admin, world.topic, 0, world.at("t3")[1])
    assert cluster.watermarks(world.topic)[0][0] == world.at("t3")[1] > world.at("t2")[1]

    second = reconcile_once(spark, binding, tmp_path)
    assert second["mode"] == "incremental"
    assert finding_set(second) == expected
    assert not [f for f in second["findings"] if f.get("is_new")], second["findings"]
    third = reconcile_once(spark, binding, tmp_path)
    assert finding_set(third) == expected
    # a --full run starts over: what it cannot read it does not report (the user's reset)
    full = reconcile_once(spark, binding, tmp_path, full=True)
    assert not [f for f in full["findings"] if f["kind"] == "gap"], full["findings"]


def test_a_broker_lost_gap_whose_sequence_a_later_run_reads_is_not_kept(
    spark: SparkSession, world: World, kafka_admin: AdminClient, tmp_path: Path
):
    """A run reports sequence 1 broker-lost (its ack names an offset holding sequence 2); the
    record turns up after all in partition 1 (as a write the run did not see yet would), and
    retention deletes partition 0 past the acked offset. The next run reads sequence 1: the gap
    is no longer reported, neither found again nor kept from the first run."""
    world.produce("t0", 100, seq=0, partition=0)
    world.ledger(0, "acked", 100, "t0")
    world.produce("t2", 102, seq=2, partition=0)
    world.ledger(1, "acked", 101, "t2")
    world.ledger(2, "acked", 102, "t2")
    world.flush_ledger()
    world.insert(100, 101, 102)
    binding = world.binding()
    first = reconcile_once(spark, binding, tmp_path)
    assert ("gap", "101", "broker-lost", *world.at("t2")) in finding_set(first)

    world.produce("t1", 101, seq=1, partition=1)
    world.produce("t3", 103, seq=3, partition=0)
    world.ledger(3, "acked", 103, "t3")
    world.flush_ledger()
    world.insert(103)
    delete_records_before(kafka_admin, world.topic, 0, world.at("t3")[1])

    second = reconcile_once(spark, binding, tmp_path)
    assert not [f for f in second["findings"] if f["kind"] == "gap"], second["findings"]


def test_a_rebuild_reports_no_acked_range_lost_whose_record_a_run_read_before_retention_deleted_it(
    spark: SparkSession, world: World, kafka_admin: AdminClient, tmp_path: Path
):
    """A v2 producer's acked range 0-2: seq 0 and 1 in partition 0, seq 2 in partition 1, all
    read by the first run. Retention then deletes partition 0's records, and the next run is a
    rebuild (partition 1's checkpoint no longer matches, as after a truncation: here the
    state's print is altered, no broker is harmed). Sequences 0 and 1 were delivered, and an
    earlier run saw them: no gap/broker-lost, in the rebuild nor after."""
    now_ms = int(time.time() * 1000)
    world.produce("t1", 1, seq=0, partition=0, age_s=40 * 60)
    world.produce("t2", 2, seq=1, partition=0, age_s=39 * 60)
    world.produce("t3", 3, seq=2, partition=1, age_s=38 * 60)
    ranges = {
        "v": 2,
        "type": "ranges",
        "pid": world.session,
        "client_id": "app",
        "topic": world.topic,
        "entries": [[0, 2, "acked", now_ms - 40 * 60_000, now_ms - 38 * 60_000]],
    }
    world.producer.produce(
        world.producer_ledger,
        key=world.session.encode(),
        value=json.dumps(ranges).encode(),
        timestamp=now_ms - 37 * 60_000,
    )
    assert world.producer.flush(30) == 0
    world.insert(1, 2, 3)
    binding = world.binding(consumer_groups=[])
    first = reconcile_once(spark, binding, tmp_path)
    assert finding_set(first) == set()

    delete_records_before(kafka_admin, world.topic, 0, world.at("t2")[1] + 1)
    state_file = tmp_path / binding.name / "state.json"
    state = json.loads(state_file.read_text())
    offset, timestamp_ms, crc = state["checkpoints"]["1"]
    state["checkpoints"]["1"] = [offset, timestamp_ms, crc ^ 1]
    state_file.write_text(json.dumps(state))

    # Ground truth: the producer's delivery reports put seq 0 and 1 in partition 0, now below its
    # log start; partition 1 still holds seq 2 where it was.
    assert world.at("t1")[0] == world.at("t2")[0] == 0 and world.at("t3") == (1, 0)
    low, _ = partition_watermarks(world, 0)
    assert low == world.at("t2")[1] + 1

    second = reconcile_once(spark, binding, tmp_path)
    assert second["mode"] == "rebuild" and set(second["rewritten"]) == {"1"}
    assert finding_set(second) == set()
    assert finding_set(reconcile_once(spark, binding, tmp_path)) == set()


def partition_watermarks(world: World, partition: int) -> tuple[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": world.bootstrap, "group.id": f"truth-{uuid.uuid4().hex[:8]}"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(world.topic, partition), timeout=10)
    finally:
        consumer.close()
    return int(low), int(high)


def test_a_rebuild_keeps_the_duplicates_and_aborted_records_a_run_read_before_retention_deleted_them(
    spark: SparkSession, world: World, kafka_admin: AdminClient, tmp_path: Path
):
    """Ticket 1 is produced twice into partition 0, and ticket 2's transaction aborted there
    (then committed as ticket 3); the first run reads them all. Retention then deletes
    partition 0's records, and the next run is a rebuild (partition 1's checkpoint altered, as
    after a truncation there). What the first run saw happened: the duplicate and the aborted
    record stay reported, in the rebuild and after."""
    world.produce("t1", 1, partition=0, age_s=40 * 60)
    world.produce("t1-again", 1, partition=0, age_s=39 * 60)
    world.aborted_transaction("t2", 2, "t3", 3)
    world.produce("t4", 4, partition=1, age_s=38 * 60)
    world.insert(1, 3, 4)
    binding = world.binding(consumer_groups=[], guarantee="at-least-once", transactions=True)
    first = reconcile_once(spark, binding, tmp_path)
    seen = {(kind, key) for kind, key, *_ in finding_set(first)}
    assert seen == {("duplicate", "1"), ("aborted", "2")}, seen

    # Ground truth: the producers' delivery reports put every record but ticket 4 in partition 0,
    # now wholly below its log start.
    assert {world.at(label)[0] for label in ("t1", "t1-again", "t2", "t3")} == {0}
    _, high = partition_watermarks(world, 0)
    delete_records_before(kafka_admin, world.topic, 0, high)
    assert partition_watermarks(world, 0) == (high, high)
    state_file = tmp_path / binding.name / "state.json"
    state = json.loads(state_file.read_text())
    offset, timestamp_ms, crc = state["checkpoints"]["1"]
    state["checkpoints"]["1"] = [offset, timestamp_ms, crc ^ 1]
    state_file.write_text(json.dumps(state))

    second = reconcile_once(spark, binding, tmp_path)
    assert second["mode"] == "rebuild" and set(second["rewritten"]) == {"1"}
    assert {(kind, key) for kind, key, *_ in finding_set(second)} == seen
    assert {(kind, key) for kind, key, *_ in finding_set(reconcile_once(spark, binding, tmp_path))} == seen
