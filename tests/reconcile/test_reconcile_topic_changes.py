"""Reconciliation when what lies under a binding changes: offsets already read rewritten
(a broker that lost its disk, as an unclean leader election does), the topic deleted and
created again, the binding edited to read another topic or in another timestamp zone.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

from auditor.lab.cluster import Cluster as LabCluster
from auditor.lab.cluster import all_led, wait_until
from spark_jobs.kafka_offsets import topic_id
from spark_jobs.reconcile import run
from spark_jobs.reconcile_plan import RunOptions
from tests.support.reconcile_world import (
    World,
    finding_set,
    read_whole_topic,
    reconcile_once,
)

pytestmark = pytest.mark.integration


@pytest.mark.alone
@pytest.mark.parametrize("rewritten", [4, 1], ids=["offsets-hold-other-records", "log-end-moved-back"])
def test_it_notices_offsets_it_read_were_rewritten_and_names_what_the_broker_lost(
    spark: SparkSession, world: World, kafka_admin, make_topic, tmp_path: Path, rewritten: int
):
    """Offsets already read are truncated and rewritten (here: the broker holding the
    partition's only replica loses its disk and starts it over empty, as an unclean leader
    election rewrites a partition's tail). The next incremental run must neither report the
    new records' rows missing nor miss the records that are gone: those are missing with
    cause broker-lost, at the offset a run saw them."""
    cluster = LabCluster(world.bootstrap)
    broker = max(cluster.broker_ids())
    world.topic = f"rec-disk-{uuid.uuid4().hex[:8]}"
    cluster.create_topic_on(world.topic, broker, partitions=2)
    binding = world.binding(consumer_groups=[], guarantee="at-least-once")
    world.insert(1, 2, 3, 4, 5, 6)
    for ticket in (1, 2, 3, 4):  # a plain producer: no audit headers, no ledger
        world.produce(f"before-{ticket}", ticket)
    first = reconcile_once(spark, binding, tmp_path)
    assert finding_set(first) == {("missing", "5", None, None, None), ("missing", "6", None, None, None)}
    before = {ticket: world.at(f"before-{ticket}") for ticket in (1, 2, 3, 4)}
    id_before = topic_id(kafka_admin, world.topic)

    cluster.lose_disk(broker, world.topic, 0)
    assert topic_id(kafka_admin, world.topic) == id_before is not None  # the same topic
    for ticket in (1, 2, 5, 6)[:rewritten]:
        world.produce(f"after-{ticket}", ticket)

    # Ground truth, without the auditor: the rows, a full read of the topic, and where the
    # first producer's delivery reports put each record.
    now_in_topic = read_whole_topic(world.bootstrap, world.topic)
    present = {t for t in now_in_topic.values() if t is not None}
    gone = {1, 2, 3, 4, 5, 6} - present
    expected = {
        ("missing", str(t), "broker-lost", *before[t])
        if t in before and now_in_topic.get(before[t]) != t
        else ("missing", str(t), None, None, None)
        for t in gone
    }

    second = reconcile_once(spark, binding, tmp_path)
    assert second["mode"] == "rebuild"
    assert set(second["rewritten"]) == {"0"}
    assert finding_set(second) == expected
    lost = {f["key"]: f["evidence"] for f in second["findings"] if f["cause"] == "broker-lost"}
    assert {key: ev["seen"]["run_id"] for key, ev in lost.items()} == dict.fromkeys(lost, first["run_id"])

    # The next incremental run keeps what it knows and reports the same.
    third = reconcile_once(spark, binding, tmp_path)
    assert third["mode"] == "incremental"
    assert finding_set(third) == expected
    cluster.delete_topic(world.topic)


def wait_for_topic_gone(admin: AdminClient, topic: str) -> None:
    deadline = time.monotonic() + 30
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"topic {topic} still listed after deletion"
        time.sleep(0.2)


def make_topic_named(admin: AdminClient, topic: str, partitions: int) -> bool:
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + 30
    while True:
        try:
            admin.create_topics([NewTopic(topic, partitions)])[topic].result(timeout=30)
            return True
        except KafkaException:
            # The deletion may still be under way on some broker.
            assert time.monotonic() < deadline, f"could not re-create topic {topic}"
            time.sleep(0.5)


def test_a_binding_edited_to_read_another_topic_starts_over_and_nothing_recalls_the_old_topic(
    spark: SparkSession, world: World, make_topic, tmp_path: Path
):
    """A binding reads topic A (tickets 1, 2, 3), then is edited, under the same name and
    state folder, to read topic B, where only ticket 1 was ever produced. What the state knew
    of A is not B's: rows 2 and 3 are missing, and the stuck diagnosis' memory recalls no
    sighting of them. Ground truth: what was produced to each topic, and the table."""
    from auditor.pipelines.models import Binding as BindingModel
    from auditor.reconcile.memory import read_sightings
    from spark_jobs.state_location import StateLocation

    world.insert(1, 2, 3)
    for ticket in (1, 2, 3):
        world.produce(f"a{ticket}", ticket)
    binding = world.binding(consumer_groups=[])
    assert finding_set(reconcile_once(spark, binding, tmp_path)) == set()
    other = make_topic("rec-b")
    producer = Producer({"bootstrap.servers": world.bootstrap})
    producer.produce(other, json.dumps({"ticket_id": 1}).encode(), timestamp=int(time.time() * 1000) - 600_000)
    assert producer.flush(30) == 0
    edited = world.binding(consumer_groups=[], topic=other)
    assert edited.name == binding.name
    root = StateLocation(str(tmp_path)).join(binding.name)

    def model(topic: str) -> BindingModel:  # the stuck diagnosis' binding, as the dashboard saves it
        return BindingModel(
            name=binding.name, topic=topic, table=binding.table, key_column="id", record_key="json:$.ticket_id"
        )

    assert sorted(read_sightings(root, ["1", "2", "3"], model(world.topic))) == ["1", "2", "3"]
    assert read_sightings(root, ["1", "2", "3"], model(other)) == {}  # A's state is no memory of B

    result = reconcile_once(spark, edited, tmp_path)

    assert finding_set(result) == {("missing", "2", None, None, None), ("missing", "3", None, None, None)}
    assert any(
        "the binding changed since its state was built" in w and f"topic {world.topic!r} → {other!r}" in w
        for w in result["warnings"]
    )
    assert result["window"]["identity"]["topic"] == other
    assert sorted(read_sightings(root, ["1", "2", "3"], model(other))) == ["1"]
    assert read_sightings(root, ["1", "2", "3"], model(world.topic)) == {}


def test_a_binding_whose_timestamp_zone_changes_starts_over(spark: SparkSession, world: World, tmp_path: Path):
    """The window's bounds were taken in the old zone: a run in another one cannot build on
    them (rows would be skipped or read twice), so it starts over as a full run."""
    world.insert(1, 2)
    for ticket in (1, 2):
        world.produce(f"t{ticket}", ticket)
    binding = world.binding(consumer_groups=[])
    assert finding_set(reconcile_once(spark, binding, tmp_path)) == set()
    same = reconcile_once(spark, binding, tmp_path)
    assert same["window"]["lower"] is not None  # incremental: built on the first run's window
    moved = reconcile_once(spark, world.binding(consumer_groups=[], timestamp_zone="Asia/Tokyo"), tmp_path)
    assert finding_set(moved) == set()
    assert moved["window"]["lower"] is None  # a full run
    assert any("timestamp_zone 'UTC' → 'Asia/Tokyo'" in w for w in moved["warnings"]), moved["warnings"]


def test_a_topic_deleted_and_created_again_is_read_anew_and_nothing_it_held_is_reported(
    spark: SparkSession, world: World, kafka_admin: AdminClient, tmp_path: Path
):
    # Tickets 1-3 produced, processed and committed; the first run finds nothing wrong.
    for ticket in (1, 2, 3):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=20 * 60)
    world.processed("t1", "t2", "t3", age_s=19 * 60)
    world.commit(0, world.at("t3")[1] + 1)
    world.insert(1, 2, 3)
    # ten minutes ago, as the story goes: the new topic's records below are stamped after it
    # (records written after a run and stamped before it would prove their producer backdates)
    first = run(
        spark, world.binding(), RunOptions(state_dir=str(tmp_path), now=datetime.now(UTC) - timedelta(minutes=10))
    )
    assert finding_set(first) == set()
    id_before = topic_id(kafka_admin, world.topic)

    # An operator deletes the topic and creates it again. Tickets 4 and 5 take offsets 0 and 1
    # of partition 0 again and are processed; 6 is committed past and never processed.
    kafka_admin.delete_topics([world.topic])[world.topic].result(timeout=30)
    wait_for_topic_gone(kafka_admin, world.topic)
    assert make_topic_named(kafka_admin, world.topic, partitions=2)
    for ticket in (4, 5):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=5 * 60)
    world.processed("t4", "t5", age_s=4 * 60)
    world.produce("t6", 6, partition=0, age_s=3 * 60)
    # 7 is processed a minute ago, well after the new topic's first record: a mark of the new
    # topic for certain.
    world.produce("t7", 7, partition=0, age_s=2 * 60)
    world.processed("t7", mark_ms=int(time.time() * 1000) - 60_000)
    world.commit(0, world.at("t7")[1] + 1)
    world.insert(4, 5, 6, 7, age="2 minutes")

    # Ground truth: another topic under the name, where 4 and 5 sit where 1 and 2 were.
    assert topic_id(kafka_admin, world.topic) not in (id_before, None)
    assert [world.at(f"t{ticket}") for ticket in (4, 5, 6, 7)] == [(0, 0), (0, 1), (0, 2), (0, 3)]

    second = reconcile_once(spark, world.binding(), tmp_path)
    # Nothing of 1-3 is missing (they were delivered), 4, 5 and 7 were processed once each: only
    # 6 is unprocessed.
    assert finding_set(second) == {("unprocessed", "6", None, *world.at("t6"))}
    assert any("deleted and created again" in w for w in second["warnings"]), second["warnings"]


@pytest.mark.alone
def test_marks_of_records_the_broker_lost_are_not_taken_for_the_records_now_at_their_offsets(
    spark: SparkSession, world: World, kafka_admin: AdminClient, tmp_path: Path
):
    """The broker holding a partition's only replica loses its disk: tickets 1-3 are gone, and
    new records take offsets 0, 1, 2 again (as after an unclean leader election). The consumer
    ledger still holds the marks of 1-3 at those offsets. They are not marks of the new records:
    not a second processing of 4 and 5, and no proof that 6 was processed."""
    cluster = LabCluster(world.bootstrap)
    broker = max(cluster.broker_ids())
    world.topic = f"rec-disk-marks-{uuid.uuid4().hex[:8]}"
    cluster.create_topic_on(world.topic, broker, partitions=2)
    binding = world.binding(guarantee="at-least-once")
    now_ms = int(time.time() * 1000)
    # The story, in the past: 1-3 written 40 minutes ago and processed, the first run ten
    # minutes ago, the disk lost after it and 4-7 written in the last five minutes.
    for ticket in (1, 2, 3):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=40 * 60)
    world.processed("t1", "t2", "t3", age_s=39 * 60, mark_ms=now_ms - 39 * 60_000)
    world.commit(0, world.at("t3")[1] + 1)
    world.insert(1, 2, 3, age="40 minutes")
    first = run(spark, binding, RunOptions(state_dir=str(tmp_path), now=datetime.now(UTC) - timedelta(minutes=10)))
    assert finding_set(first) == set()
    lost_at = {ticket: world.at(f"t{ticket}") for ticket in (1, 2, 3)}
    id_before = topic_id(kafka_admin, world.topic)

    cluster.lose_disk(broker, world.topic, 0)
    assert topic_id(kafka_admin, world.topic) == id_before is not None  # the same topic
    # 4 and 5 are processed; 6 is committed past and never processed; 7 is processed.
    for ticket in (4, 5):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=5 * 60)
    world.processed("t4", "t5", age_s=4 * 60, mark_ms=now_ms - 4 * 60_000)
    world.produce("t6", 6, partition=0, age_s=3 * 60)
    world.produce("t7", 7, partition=0, age_s=2 * 60)
    world.processed("t7", mark_ms=now_ms - 60_000)
    world.commit(0, world.at("t7")[1] + 1)
    world.insert(4, 5, 6, 7, age="5 minutes")

    # Ground truth: a full read of the topic (1-3 are gone, 4-7 sit where 1-3 were and after),
    # the marks this test wrote for the consumer, and the group's commit.
    truth = read_whole_topic(world.bootstrap, world.topic)
    assert {o: t for (p, o), t in truth.items() if p == 0} == {0: 4, 1: 5, 2: 6, 3: 7}
    assert [lost_at[t] for t in (1, 2, 3)] == [(0, 0), (0, 1), (0, 2)]
    expected = {("missing", str(t), "broker-lost", *lost_at[t]) for t in (1, 2, 3)} | {
        ("unprocessed", "6", None, *world.at("t6"))
    }

    second = reconcile_once(spark, binding, tmp_path)
    assert second["mode"] == "rebuild"
    assert finding_set(second) == expected
    third = reconcile_once(spark, binding, tmp_path)
    assert third["mode"] == "incremental"
    assert finding_set(third) == expected
    # A full run starts over without the key index (1-3 are then plain missing), and still
    # knows where the broker rewrote the partition.
    full = reconcile_once(spark, binding, tmp_path, full=True)
    assert finding_set(full) == {("missing", str(t), None, None, None) for t in (1, 2, 3)} | {
        ("unprocessed", "6", None, *world.at("t6"))
    }
    cluster.delete_topic(world.topic)


@pytest.mark.parametrize("after", ["next-seq", "session-end"])
def test_a_probed_producer_that_outlives_a_topic_recreation_leaves_no_gap_behind(
    spark: SparkSession, world: World, kafka_admin: AdminClient, tmp_path: Path, after: str
):
    """A probed (v1) producer sends seq 0-2, acked and ledgered; the first run reads them all.
    The topic is deleted and created again while the producer keeps running: it sends seq 3
    into the new topic (or only ends its session, last seq 2). Sequences 0-2 were delivered to
    the old topic, as the first run saw: no run after it reports them never-sent."""
    for seq, ticket in enumerate((1, 2, 3)):
        world.produce(f"t{ticket}", ticket, seq=seq, partition=0, age_s=40 * 60)
        world.ledger(seq, "acked", ticket, f"t{ticket}")
    world.flush_ledger()
    world.insert(1, 2, 3)
    binding = world.binding(consumer_groups=[])
    # The first run twenty minutes ago, seq 3 ten minutes ago: older than the send outcome
    # wait (365 s), which holds back a hole below a sequence sent since.
    first = run(spark, binding, RunOptions(state_dir=str(tmp_path), now=datetime.now(UTC) - timedelta(minutes=20)))
    assert finding_set(first) == set()

    kafka_admin.delete_topics([world.topic])[world.topic].result(timeout=30)
    wait_for_topic_gone(kafka_admin, world.topic)
    assert make_topic_named(kafka_admin, world.topic, partitions=2)
    if after == "next-seq":
        world.produce("t4", 4, seq=3, partition=0, age_s=10 * 60)
        world.ledger(3, "acked", 4, "t4")
        world.flush_ledger()
        world.insert(4, age="10 minutes")
    else:
        world.flush_ledger(end_seq=2)

    # Ground truth: the new topic holds only what was produced after the re-creation, and the
    # producer ledger acked every sequence at an offset the producer saw delivered.
    in_topic = read_whole_topic(world.bootstrap, world.topic)
    assert sorted(t for t in in_topic.values() if t is not None) == ([4] if after == "next-seq" else [])

    second = reconcile_once(spark, binding, tmp_path)
    assert any("deleted and created again" in w for w in second["warnings"]), second["warnings"]
    assert finding_set(second) == set()
    third = reconcile_once(spark, binding, tmp_path)
    assert finding_set(third) == set()


def test_a_partition_added_while_a_run_reads_the_offsets_leaves_no_gap_for_an_ack_into_it(
    spark: SparkSession,
    world: World,
    kafka_admin: AdminClient,
    make_topic,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
):
    """While a run waits for the group's marks to settle (between its list of the topic's
    partitions and its read of their log ends), a partition is added and a probed (v1)
    producer's record is acked there and ledgered. The run reads the ledger end after that:
    the ack must not be judged against a log end the run never read (a false gap/broker-lost)."""
    from confluent_kafka.admin import NewPartitions

    from auditor.probes.producer_v1 import AuditedProducerV1
    from spark_jobs import reconcile_extract

    world.produce("t1", 1, partition=0, age_s=20 * 60)
    world.commit(0, world.at("t1")[1] + 1)  # a group committed: the run waits for its marks
    world.insert(1, 2)
    clients = make_topic("_audit.clients")
    delivered: dict[int, tuple[int, int]] = {}

    refused: list[object] = []

    def partition_added_and_acked() -> float:
        kafka_admin.create_partitions([NewPartitions(world.topic, 3)])[world.topic].result(timeout=30)
        wait_until(lambda: all_led(kafka_admin, world.topic, 3), 30, "the added partition with a leader")

        def report(err: object, msg: Message) -> None:
            if err is not None:
                refused.append(err)
            else:
                delivered[2] = (msg.partition(), msg.offset())

        # A broker whose metadata has not caught up with the new partition yet makes the
        # client fail the send as to an unknown partition: sent again (a send that failed and
        # whose item another send delivered is no gap).
        for _ in range(3):
            producer = AuditedProducerV1(
                {"bootstrap.servers": world.bootstrap, "linger.ms": 0},
                ledger_topic=world.producer_ledger,
                clients_topic=clients,
                ledger_flush_interval_s=0.2,
            )
            producer.produce(
                world.topic,
                json.dumps({"ticket_id": 2}).encode(),
                b"2",
                partition=2,
                timestamp=int(time.time() * 1000) - 10 * 60_000,
                on_delivery=report,
            )
            assert producer.close(60) == 0
            if delivered:
                break
            time.sleep(1)
        return 0.0

    monkeypatch.setattr(reconcile_extract, "mark_settle_seconds", partition_added_and_acked)
    result = reconcile_once(spark, world.binding(), tmp_path)

    # Ground truth: the producer's delivery report, and a full read of the topic.
    assert delivered == {2: (2, 0)}, (refused, result["error"])
    assert read_whole_topic(world.bootstrap, world.topic)[(2, 0)] == 2
    assert finding_set(result) == set()
