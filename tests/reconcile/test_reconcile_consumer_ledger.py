"""Reconciliation's reading of the consumer ledger against real probed consumers: marks
deleted unread, trailing an auto-commit or refused by the broker, a group processing before
its consumer was probed, the ledger moved, created again or left unread for a run, and a group
the binding stopped naming. What was processed is never called unprocessed; what was
committed past without processing still is.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from auditor.lab.cluster import wait_until
from tests.support.kafka_reads import consume
from tests.support.reconcile_world import (
    World,
    another_applications_marks,
    delete_records_before,
    finding_set,
    read_whole_ledger,
    reconcile_once,
)
from tests.support.topics import create_again

pytestmark = pytest.mark.integration


def test_it_never_calls_records_unprocessed_whose_marks_the_consumer_ledger_deleted_unread(
    spark: SparkSession, world: World, kafka_admin: AdminClient, tmp_path: Path
):
    # What the consumer did: it processed tickets 1-3, marking each in its own ledger record
    # after the record was written, and committed past ticket 4, which it never processed.
    world.produce("t1", 1, partition=0, age_s=40 * 60)
    world.produce("t2", 2, partition=0, age_s=35 * 60)
    world.produce("t3", 3, partition=0, age_s=5 * 60)
    world.produce("t4", 4, partition=0, age_s=60)
    world.processed("t1", age_s=39 * 60)
    world.processed("t2", age_s=34 * 60)
    third_mark = world.processed("t3", age_s=4 * 60)
    world.commit(0, world.at("t4")[1] + 1)
    world.insert(1, 2, 3, 4)
    # Retention on the consumer ledger deletes the marks of tickets 1 and 2 before any run
    # reads them; ticket 3's mark (written 4 minutes ago) is the first one left.
    delete_records_before(kafka_admin, world.consumer_ledger, 0, third_mark)
    binding = world.binding()

    first = reconcile_once(spark, binding, tmp_path)
    # Tickets 1 and 2 were processed: their marks are gone, not missing. Ticket 4 was written
    # after the first mark left (plus the 30 s grace): its mark would be there. It is not.
    assert finding_set(first) == {("unprocessed", "4", None, *world.at("t4"))}
    lost = [w for w in first["warnings"] if w.startswith("consumer ledger")]
    assert len(lost) == 1 and lost[0].startswith(
        f"consumer ledger {world.consumer_ledger}/0: offsets 0..{third_mark - 1} ({third_mark} record(s)) were deleted"
    ), first["warnings"]
    assert first["window"]["marks_lost_until"]

    # The bound holds across runs. Ticket 3's mark, read by the first run, may go too: that
    # is no loss. Ticket 5 comes after every deleted mark and is committed past, unprocessed.
    world.produce("t5", 5, partition=0, age_s=0)
    world.insert(5)
    world.commit(0, world.at("t5")[1] + 1)
    delete_records_before(kafka_admin, world.consumer_ledger, 0, third_mark + 1)
    second = reconcile_once(spark, binding, tmp_path)
    assert second["mode"] == "incremental"
    assert finding_set(second) == {
        ("unprocessed", "4", None, *world.at("t4")),
        ("unprocessed", "5", None, *world.at("t5")),
    }
    assert not [w for w in second["warnings"] if w.startswith("consumer ledger")], second["warnings"]
    assert second["window"]["marks_lost_until"] == first["window"]["marks_lost_until"]


def test_marks_that_trail_an_auto_commit_are_waited_for_not_called_unprocessed(
    spark: SparkSession, world: World, make_topic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The consumer configuration lint C001 advises (enable.auto.offset.store=false,
    store_offsets after processing, auto-commit): auto-commit commits stored offsets at once,
    and the probe writes their marks only at its next background ledger flush."""
    from auditor.probes import AuditedConsumer

    for ticket in range(1, 7):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=120)
    world.insert(1, 2, 3, 4, 5, 6)
    # This probe flushes its ledger every 16 s, and the run waits 18 s for marks: room for the
    # group's join, two commits and a flush on a busy machine before the first tick.
    flush_interval_s = 16.0
    monkeypatch.setenv("RECONCILE_MARK_SETTLE_SECONDS", "18")
    started = time.monotonic()  # the probe's background flushes come at started + 16 s, + 32 s, ...
    consumer = AuditedConsumer(
        {
            "bootstrap.servers": world.bootstrap,
            "group.id": world.group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 100,
            "enable.auto.offset.store": False,
        },
        ledger_topic=world.consumer_ledger,
        clients_topic=make_topic("_audit.clients"),
        ledger_flush_interval_s=flush_interval_s,
    )
    deadline = time.monotonic() + 30

    def process(count: int) -> list[int]:
        done: list[int] = []
        while len(done) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            consumer.mark_processed(msg)
            consumer.store_offsets(msg)
            done.append(msg.offset())
        return done

    def committed_reaches(offset: int) -> int:
        committed = 0
        while committed < offset and time.monotonic() < deadline:
            committed = consumer.committed([TopicPartition(world.topic, 0)], 10)[0].offset
        return committed

    try:
        consumer.subscribe([world.topic])
        # Records 0-2 processed, committed and their marks flushed: the group is probed from 0.
        assert process(3) == [0, 1, 2]
        assert committed_reaches(3) == 3
        consumer.flush_ledger(10)
        # Records 3-5 processed and committed; their marks wait for the next background flush.
        assert process(3) == [3, 4, 5]
        assert committed_reaches(6) == 6
        # What the consumer ledger holds when the run starts: those marks are not in it yet.
        assert time.monotonic() + 4 < started + flush_interval_s, "the probe's flush came too soon to tell"

        result = reconcile_once(spark, world.binding(), tmp_path)

        # Every record was processed (the consumer marked each one) and committed: nothing to report.
        assert finding_set(result) == set()
    finally:
        consumer.close()
    marks = {
        (entry[0], entry[1], offset)
        for record in read_whole_ledger(world.bootstrap, world.consumer_ledger)
        if record["type"] == "processed-ranges"  # rows: topic, partition, first, last offset, first, last ms
        for entry in record["entries"]
        for offset in range(entry[2], entry[3] + 1)
    }
    assert marks == {(world.topic, 0, offset) for offset in range(6)}


def test_records_a_group_processed_before_its_consumer_was_probed_are_not_called_unprocessed(
    spark: SparkSession, world: World, make_topic, tmp_path: Path
):
    """The auditor adopted on a running pipeline: the group's plain consumer processed and
    committed records before the probed one took over, and one instance (partition 1) still
    runs without the probe. Only what the probed consumer passed without marking is unprocessed."""
    from auditor.probes import AuditedConsumer

    for ticket in range(1, 7):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=120)
    for ticket in (7, 8):
        world.produce(f"t{ticket}", ticket, partition=1, age_s=120)
    world.insert(*range(1, 9))
    settings = {"bootstrap.servers": world.bootstrap, "group.id": world.group, "enable.auto.commit": False}
    plain = Consumer(settings)
    try:  # before the probe: tickets 1 and 2 processed and committed; partition 1 never probed
        plain.commit(message=consume(plain, world.topic, 0, 0, 2)[-1], asynchronous=False)
        plain.commit(message=consume(plain, world.topic, 1, 0, 2)[-1], asynchronous=False)
    finally:
        plain.close()
    probed = AuditedConsumer(settings, ledger_topic=world.consumer_ledger, clients_topic=make_topic("_audit.clients"))
    try:  # the probed consumer processes tickets 3-5, then commits past ticket 6 unprocessed
        for msg in consume(probed, world.topic, 0, 2, 4)[:3]:
            probed.mark_processed(msg)
        probed.commit(offsets=[TopicPartition(world.topic, 0, 6)], asynchronous=False)
    finally:
        probed.close()

    result = reconcile_once(spark, world.binding(), tmp_path)

    assert finding_set(result) == {("unprocessed", "6", None, *world.at("t6"))}


def test_it_never_calls_records_unprocessed_whose_marks_the_consumer_ledger_refused(
    spark: SparkSession, world: World, make_topic, tmp_path: Path
):
    """A probed consumer processes tickets 3 and 4 while the broker refuses its ledger's
    records, commits past them, and names the lost marks in a marks-lost record once the
    ledger takes records again; it then passes ticket 5 without processing it and processes
    6. A first run read the records before any of that: they are the state's candidates. The
    second run must not call 3 and 4 unprocessed (processed or not cannot be told), and still
    reports 5. Ground truth: what the test's consumer did and what the real ledger holds."""
    from auditor.probes import AuditedConsumer
    from tests.support.lost_marks import ledgered_offsets, lost_offsets, mark_while_the_ledger_refuses

    for ticket in range(1, 7):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=120)
    world.insert(*range(1, 7))
    first = reconcile_once(spark, world.binding(), tmp_path)
    assert finding_set(first) == set()

    settings = {"bootstrap.servers": world.bootstrap, "group.id": world.group, "enable.auto.commit": False}
    probed = AuditedConsumer(
        settings,
        ledger_topic=world.consumer_ledger,
        clients_topic=make_topic("_audit.clients"),
        ledger_flush_interval_s=0.2,
        ledger_flush_timeout_s=5.0,
    )
    try:
        got = consume(probed, world.topic, 0, 0, 6)
        for msg in got[:2]:  # tickets 1 and 2, their marks written
            probed.mark_processed(msg)
        wait_until(
            lambda: ledgered_offsets(world.bootstrap, world.consumer_ledger, world.topic) == {(0, 0), (0, 1)},
            15,
            "the first marks in the ledger",
        )
        mark_while_the_ledger_refuses(probed, world.bootstrap, world.consumer_ledger, got[2:4], commit_to=4)
        probed.mark_processed(got[5])  # ticket 6; ticket 5 is passed unprocessed
        probed.commit(offsets=[TopicPartition(world.topic, 0, 6)], asynchronous=False)
    finally:
        probed.close()
    refused = {world.at("t3"), world.at("t4")}
    assert refused <= lost_offsets(world.bootstrap, world.consumer_ledger, world.topic)
    assert not refused & ledgered_offsets(world.bootstrap, world.consumer_ledger, world.topic)

    second = reconcile_once(spark, world.binding(), tmp_path)
    third = reconcile_once(spark, world.binding(), tmp_path)

    assert finding_set(second) == {("unprocessed", "5", None, *world.at("t5"))}
    assert finding_set(third) == {("unprocessed", "5", None, *world.at("t5"))}


@pytest.mark.parametrize("new_ledger", ["longer", "shorter"])
def test_a_binding_that_names_another_consumer_ledger_has_it_read_from_its_start(
    spark: SparkSession, world: World, make_topic, tmp_path: Path, new_ledger: str
):
    # The consumer processed tickets 1-3 and marked them in the ledger the first run reads.
    for ticket in (1, 2, 3):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=10 * 60)
        world.processed(f"t{ticket}", age_s=9 * 60)
    another_applications_marks(world, world.consumer_ledger, 5 if new_ledger == "shorter" else 0)
    world.commit(0, world.at("t3")[1] + 1)
    world.insert(1, 2, 3)
    first = reconcile_once(spark, world.binding(), tmp_path)
    assert finding_set(first) == set()

    # The deployment moves its probes to another ledger (a binding's consumer_ledger_topic, or
    # AUDITOR_CONSUMER_LEDGER_TOPIC). Tickets 4-6 are processed and marked there, at its first
    # offsets; it then holds more records than the old one (another application's) or fewer.
    old_ledger, world.consumer_ledger = world.consumer_ledger, make_topic("_audit.consumer-ledger")
    for ticket in (4, 5, 6):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=5 * 60)
        world.processed(f"t{ticket}", age_s=4 * 60)
    another_applications_marks(world, world.consumer_ledger, 5 if new_ledger == "longer" else 0)
    world.commit(0, world.at("t6")[1] + 1)
    world.insert(4, 5, 6, age="2 minutes")  # inside the incremental run's window
    # Ticket 7: committed past and never processed, the one real skip.
    world.produce("t7", 7, partition=0, age_s=3 * 60)
    world.commit(0, world.at("t7")[1] + 1)
    world.insert(7, age="2 minutes")

    second = reconcile_once(spark, world.binding(), tmp_path)
    # Every mark of 1-6 was read, from both ledgers: only 7 is unprocessed.
    assert finding_set(second) == {("unprocessed", "7", None, *world.at("t7"))}
    assert second["mode"] == "incremental"
    assert [w for w in second["warnings"] if "ledger is now" in w] == [
        f"the consumer ledger is now {world.consumer_ledger} (earlier runs read {old_ledger}): it is read from its start"
    ]


@pytest.mark.parametrize("unread", ["no-groups", "ledger-typo", "another-ledger"])
def test_it_never_counts_a_consumer_ledger_read_again_after_a_run_that_did_not_read_it(
    spark: SparkSession, world: World, make_topic, tmp_path: Path, unread: str
):
    """One run does not read the consumer ledger (the binding has no group for a while, or
    names a ledger topic that does not exist); the next one reads it from where the runs
    before stopped: the marks they read are not counted a second time."""
    from auditor.probes import AuditedConsumer

    for ticket in (1, 2, 3):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=120)
    world.insert(1, 2, 3)
    settings = {"bootstrap.servers": world.bootstrap, "group.id": world.group, "enable.auto.commit": False}
    probed = AuditedConsumer(settings, ledger_topic=world.consumer_ledger, clients_topic=make_topic("_audit.clients"))
    try:  # one consumer session processes tickets 1-3, once each, and commits past them
        for msg in consume(probed, world.topic, 0, 0, 3):
            probed.mark_processed(msg)
        probed.commit(offsets=[TopicPartition(world.topic, 0, 3)], asynchronous=False)
    finally:
        probed.close()
    assert len(read_whole_ledger(world.bootstrap, world.consumer_ledger)) >= 1

    assert finding_set(reconcile_once(spark, world.binding(), tmp_path)) == set()
    if unread == "no-groups":
        second = world.binding(consumer_groups=[])
    elif unread == "ledger-typo":
        second = world.binding(consumer_ledger_topic=f"_audit.typo-{uuid.uuid4().hex[:8]}")
    else:  # the probes moved to another ledger for a while, then back
        second = world.binding(consumer_ledger_topic=make_topic("_audit.consumer-ledger"))
    assert finding_set(reconcile_once(spark, second, tmp_path)) == set()
    # The binding as it was: every record was processed once, by the one session.
    third = reconcile_once(spark, world.binding(), tmp_path)
    assert finding_set(third) == set()
    assert third["counts"]["reprocessed"] == 0
    assert finding_set(reconcile_once(spark, world.binding(), tmp_path)) == set()


@pytest.mark.parametrize("new_ledger", ["longer", "shorter"])
def test_a_consumer_ledger_deleted_and_created_again_is_read_from_its_start(
    spark: SparkSession, world: World, make_topic, tmp_path: Path, new_ledger: str
):
    """The consumer ledger is deleted and created again between two runs; the probed consumer
    goes on into the new one, whose first offsets hold its marks again, below where the first
    run stopped reading the old one. The new ledger is read from its start: what the group
    processed is not called unprocessed (nor does a shorter new ledger fail the run), and what
    it committed past without processing still is."""
    from auditor.probes import AuditedConsumer

    clients = make_topic("_audit.clients")
    settings = {"bootstrap.servers": world.bootstrap, "group.id": world.group, "enable.auto.commit": False}

    def process(start: int, count: int) -> None:
        """`count` records from `start` processed by the group's probed consumer, once each,
        then committed past (none: a commit at `start`)."""
        probed = AuditedConsumer(settings, ledger_topic=world.consumer_ledger, clients_topic=clients)
        try:
            for msg in consume(probed, world.topic, 0, start, count) if count else []:
                probed.mark_processed(msg)
            probed.commit(offsets=[TopicPartition(world.topic, 0, start + count)], asynchronous=False)
        finally:
            probed.close()

    binding = world.binding(grace="2s")
    for ticket in (1, 2, 3):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=120)
    world.insert(1, 2, 3)
    process(0, 3)
    another_applications_marks(world, world.consumer_ledger, 5)
    assert finding_set(reconcile_once(spark, binding, tmp_path)) == set()
    old_length = len(read_whole_ledger(world.bootstrap, world.consumer_ledger))

    create_again(world.bootstrap, world.consumer_ledger)
    # The new ledger's first record; past the binding's grace after it, tickets 4-6 are
    # produced, processed and committed past, so their marks cannot be of what the old
    # ledger held unread.
    another_applications_marks(world, world.consumer_ledger, 1)
    time.sleep(3)
    for ticket in (4, 5, 6):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=0)
    world.insert(4, 5, 6, age="2 minutes")
    process(3, 3)
    # Ticket 7: committed past by the group's probed consumer and never processed, the one
    # real skip (a plain client's commit past it would say nothing of it: see
    # test_partly_probed_group.py).
    world.produce("t7", 7, partition=0, age_s=0)
    process(world.at("t7")[1] + 1, 0)
    world.insert(7, age="2 minutes")
    if new_ledger == "longer":
        another_applications_marks(world, world.consumer_ledger, old_length + 5)
    # Ground truth, a full read of the new ledger: the group's marks of 4-6 lie below where
    # the first run stopped reading the old ledger, and the new one ends past it or before.
    new_records = read_whole_ledger(world.bootstrap, world.consumer_ledger)
    ours = [at for at, record in enumerate(new_records) if record.get("group") == world.group]
    assert ours and max(ours) < old_length
    assert (len(new_records) > old_length) == (new_ledger == "longer")

    second = reconcile_once(spark, binding, tmp_path)
    assert finding_set(second) == {("unprocessed", "7", None, *world.at("t7"))}
    assert second["counts"]["reprocessed"] == 0
    assert [w for w in second["warnings"] if "deleted and created again" in w and world.consumer_ledger in w]
    third = reconcile_once(spark, binding, tmp_path)
    assert finding_set(third) == {("unprocessed", "7", None, *world.at("t7"))}
    assert third["counts"]["reprocessed"] == 0


def test_it_never_calls_unprocessed_what_a_group_processed_while_the_binding_did_not_name_it(
    spark: SparkSession, world: World, make_topic, tmp_path: Path
):
    """A group taken out of the binding and named again: its marks written in between are not
    read, so what it had not processed before cannot be judged against its commits after."""
    from auditor.probes import AuditedConsumer

    for ticket in (1, 2, 3, 4):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=120)
    world.insert(1, 2, 3, 4)
    clients = make_topic("_audit.clients")
    g, h = world.group, f"{world.group}-h"

    def process(group: str, start: int, count: int) -> None:
        """`count` records from `start` processed by the group's probed consumer, once each,
        then committed past (none: a commit at `start`)."""
        settings = {"bootstrap.servers": world.bootstrap, "group.id": group, "enable.auto.commit": False}
        probed = AuditedConsumer(settings, ledger_topic=world.consumer_ledger, clients_topic=clients)
        try:
            for msg in consume(probed, world.topic, 0, start, count) if count else []:
                probed.mark_processed(msg)
            probed.commit(offsets=[TopicPartition(world.topic, 0, start + count)], asynchronous=False)
        finally:
            probed.close()

    process(h, 0, 4)
    process(g, 0, 3)  # g has not reached ticket 4 yet
    assert finding_set(reconcile_once(spark, world.binding(consumer_groups=[g, h]), tmp_path)) == set()
    # g is taken out of the binding; meanwhile it processes ticket 4 and commits past it.
    process(g, 3, 1)
    assert finding_set(reconcile_once(spark, world.binding(consumer_groups=[h]), tmp_path)) == set()
    # g named again: it processed every record, each once.
    assert finding_set(reconcile_once(spark, world.binding(consumer_groups=[g, h]), tmp_path)) == set()
