"""A group only partly probed, as in a rolling deploy of the probe or its rollback: a plain
instance of the group takes a partition a probed one had, processes and commits. Its records
have no marks, and a commit that names no probed session took the group past them: the
auditor cannot tell they were not processed, so they are never `unprocessed`. What a probed
consumer committed past without marking still is.

Ground truth is what the test's own consumers did: the records each one was handed and
processed, and the commits each one made. Each test runs with both group protocols: a
consumer-protocol group (KIP-848) writes its membership to `__consumer_offsets` in records of
other kinds than a classic group's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from auditor.lab.cluster import wait_until
from spark_jobs.commit_history import offsets_history
from tests.support.plain import commit_outside_membership
from tests.support.reconcile_world import World, finding_set, reconcile_once
from tests.support.waiting import handed

pytestmark = pytest.mark.integration

PROTOCOLS = pytest.mark.parametrize("protocol", ["classic", "consumer"])


@PROTOCOLS
def test_records_a_plain_instance_processed_after_a_probed_one_left_are_not_unprocessed(
    spark: SparkSession, world: World, make_topic, tmp_path: Path, protocol: str
) -> None:
    for ticket in range(1, 10):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=120)
    world.insert(*range(1, 10))
    settings = member_settings(world, protocol)
    probed = probed_member(world, make_topic, protocol)
    try:  # the probed instance processes tickets 1 and 2, and commits past ticket 3 unprocessed
        for msg in subscribed(probed, world.topic, 3)[:2]:
            probed.mark_processed(msg)
        probed.commit(offsets=[TopicPartition(world.topic, 0, 3)], asynchronous=False)
    finally:
        probed.close()
    plain = Consumer(settings)
    try:  # then a plain instance of the group (the probe not deployed to it) processes tickets 4 to 9
        handed = subscribed(plain, world.topic, 6)
        assert [m.offset() for m in handed] == [3, 4, 5, 6, 7, 8]
        plain.commit(message=handed[-1], asynchronous=False)
    finally:
        plain.close()

    first = reconcile_once(spark, world.binding(), tmp_path)

    assert finding_set(first) == {("unprocessed", "3", None, *world.at("t3"))}

    # The probe deployed again: a probed instance processes ticket 10, passes 11 without
    # processing it and processes 12, then commits past them all.
    for ticket in range(10, 13):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=90)
    world.insert(*range(10, 13))
    again = probed_member(world, make_topic, protocol)
    try:
        t10, t11, t12 = subscribed(again, world.topic, 3)
        assert t11.offset() == world.at("t11")[1]
        again.mark_processed(t10)
        again.mark_processed(t12)
        again.commit(offsets=[TopicPartition(world.topic, 0, 12)], asynchronous=False)
    finally:
        again.close()

    second = reconcile_once(spark, world.binding(), tmp_path)

    assert second["mode"] == "incremental"
    assert finding_set(second) == {
        ("unprocessed", "3", None, *world.at("t3")),
        ("unprocessed", "11", None, *world.at("t11")),
    }


@PROTOCOLS
def test_what_an_operators_reset_jumped_over_is_unprocessed(
    spark: SparkSession, world: World, make_topic, kafka_admin: AdminClient, tmp_path: Path, protocol: str
) -> None:
    """The group's probed consumer processes tickets 1 and 2, commits past 3 and leaves; an
    operator resets the empty group's offset to past ticket 9 (kafka-consumer-groups
    --reset-offsets, here AdminClient.alter_consumer_group_offsets). The reset's commit names no
    session, like a plain instance's, but the group had no member when it was made: no consumer
    processed 3 to 9, and they are unprocessed."""
    probed_member_passes_ticket_3(world, make_topic, protocol)
    reset = [ConsumerGroupTopicPartitions(world.group, [TopicPartition(world.topic, 0, world.at("t9")[1] + 1)])]
    wait_until(lambda: _altered(kafka_admin, reset), 60, "the group to be empty for the reset")

    result = reconcile_once(spark, world.binding(), tmp_path)

    assert finding_set(result) == {("unprocessed", str(t), None, *world.at(f"t{t}")) for t in range(3, 10)}


@PROTOCOLS
def test_records_a_consumer_outside_the_membership_processed_and_committed_are_not_unprocessed(
    spark: SparkSession, world: World, make_topic, kafka_admin: AdminClient, tmp_path: Path, protocol: str
) -> None:
    """The group's probed member processes tickets 1 and 2, commits past 3 and leaves. A plain
    consumer with the group's id but no membership (assign(), as a catch-up script or a framework
    that assigns its own partitions) then processes tickets 4 to 9 and commits its position: a
    commit the group accepts only while it has no member, like an operator's reset. It carries
    the leader epoch of the record read, which a reset does not: the records it passed are not
    unprocessed (stop 74's code called all six so)."""
    probed_member_passes_ticket_3(world, make_topic, protocol)
    outside = Consumer(member_settings(world, protocol))
    try:  # assigned, it starts at the group's committed offset
        outside.assign([TopicPartition(world.topic, 0)])
        got = handed(outside, 6)
        assert [m.offset() for m in got] == [world.at(f"t{t}")[1] for t in range(4, 10)]
        commit_outside_membership(outside, got[-1])
    finally:
        outside.close()
    # read back from the broker: the commit was made while the group had no member, as a reset's
    _, history = offsets_history(kafka_admin, world.bootstrap, {}, [world.group], world.topic)
    last = history[world.group][0][-1]
    assert (last.offset, last.empty, last.epoch >= 0) == (world.at("t9")[1] + 1, True, True)

    result = reconcile_once(spark, world.binding(), tmp_path)

    assert finding_set(result) == {("unprocessed", "3", None, *world.at("t3"))}


def probed_member_passes_ticket_3(world: World, make_topic: Callable[[str], str], protocol: str) -> None:
    """Tickets 1 to 9 at offsets 0 to 8 of partition 0, and their rows; the group's probed
    member processes tickets 1 and 2, commits past ticket 3 unprocessed, and leaves."""
    for ticket in range(1, 10):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=120)
    world.insert(*range(1, 10))
    probed = probed_member(world, make_topic, protocol)
    try:
        for msg in subscribed(probed, world.topic, 3)[:2]:
            probed.mark_processed(msg)
        probed.commit(offsets=[TopicPartition(world.topic, 0, 3)], asynchronous=False)
    finally:
        probed.close()


def member_settings(world: World, protocol: str = "classic") -> dict[str, Any]:
    """A consumer of the world's group that commits only when told, from the log start."""
    return {
        "bootstrap.servers": world.bootstrap,
        "group.id": world.group,
        "group.protocol": protocol,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }


def probed_member(world: World, make_topic: Callable[[str], str], protocol: str = "classic") -> Any:
    """An audited member of the world's group, its marks in the world's consumer ledger."""
    from auditor.probes import AuditedConsumer

    return AuditedConsumer(
        member_settings(world, protocol),
        ledger_topic=world.consumer_ledger,
        clients_topic=make_topic("_audit.clients"),
    )


def _altered(admin: AdminClient, reset: list[ConsumerGroupTopicPartitions]) -> bool:
    try:
        answer = admin.alter_consumer_group_offsets(reset)[reset[0].group_id].result(10)
    except KafkaException:  # the group is not empty yet (its member's leave is on its way)
        return False
    # a consumer-protocol group refuses it partition by partition
    return all(tp.error is None for tp in answer.topic_partitions)


@PROTOCOLS
def test_the_history_tells_a_members_commit_from_one_made_while_the_group_had_none(
    world: World, kafka_admin: AdminClient, protocol: str
) -> None:
    """Read back from the broker: a member's commit, a reset refused while a member is in the
    group, and the reset made once it left. Only the last was made by an empty group."""

    for ticket in range(1, 10):
        world.produce(f"t{ticket}", ticket, partition=0)
    member = Consumer(member_settings(world, protocol))
    try:
        handed = subscribed(member, world.topic, 3)
        member.commit(message=handed[-1], asynchronous=False)  # committed 3
        while_member = [ConsumerGroupTopicPartitions(world.group, [TopicPartition(world.topic, 0, 5)])]
        assert not _altered(kafka_admin, while_member)  # the group has a member: refused
    finally:
        member.close()
    reset = [ConsumerGroupTopicPartitions(world.group, [TopicPartition(world.topic, 0, 9)])]
    wait_until(lambda: _altered(kafka_admin, reset), 60, "the group to be empty for the reset")

    _, history = offsets_history(kafka_admin, world.bootstrap, {}, [world.group], world.topic)

    assert [(c.offset, c.empty) for c in history[world.group][0]] == [(3, False), (9, True)]


def subscribed(consumer: Any, topic: str, count: int) -> list[Message]:
    """The first `count` records a member of the group is handed once it joined."""
    consumer.subscribe([topic])
    got = handed(consumer, count)
    assert len(got) == count, f"handed {len(got)} of {count} records"
    return got


def test_a_run_that_cannot_read_who_committed_says_so_and_judges_by_the_marks_alone() -> None:
    """No broker answers: the read of `__consumer_offsets` fails, and the note names the groups
    and what it means for them; nothing is left out of the candidates."""
    from spark_jobs.binding import Binding, parse_record_key
    from spark_jobs.kafka_offsets import admin_client
    from spark_jobs.reconcile_extract import plain_commits
    from spark_jobs.reconcile_state import StateMeta

    binding = Binding(
        "b", "tickets", "127.0.0.1:1", "postgresql://x/y", "t", "id", "created_at", parse_record_key("key", "b"),
        consumer_groups=("billing",),
    )  # fmt: skip
    earlier = StateMeta(sessions_named=["billing"])
    admin = admin_client(binding.bootstrap_servers, timeout_s=2)
    spans = plain_commits(binding, admin, [("billing", 0, 5)], earlier)
    note = spans.note

    assert spans.plain == [] and spans.last == [] and spans.named == ["billing"]  # what earlier runs saw is kept
    assert note is not None and note.startswith("who committed the offsets of group(s) billing could not be read (")
    assert note.endswith("the records it committed past are judged by the group's marks alone")
