"""A group whose committed offsets an operator deleted, judged by what __consumer_offsets
still shows (spark_jobs/commit_history.py), against the real broker."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from auditor.lab.cluster import delete_records
from auditor.stuck.evidence import ClusterView, GroupState, RemovedOffsets
from auditor.stuck.verdict_outcomes import no_commit
from spark_jobs.commit_history import java_string_hash, offsets_partition, parse_committed_offset, parse_offset_key
from tests.support.demo import read_topic
from tests.support.paths import ROOT
from tests.support.stuck import diagnose_both, verdicts_of


@pytest.mark.parametrize(
    ("text", "expected"),
    # Java's String.hashCode: "" is 0, "hello" 99162322, "polygenelubricants" Integer.MIN_VALUE,
    # "é" (U+00E9) 233 and "😀" (two UTF-16 code units) 1772899, as java.lang.String gives them
    [("", 0), ("hello", 99162322), ("polygenelubricants", -(2**31)), ("é", 233), ("😀", 1772899)],
)
def test_it_hashes_a_group_id_as_java_does(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_it_places_a_group_in_its_offsets_partition_as_kafka_does() -> None:
    # Utils.abs(Integer.MIN_VALUE) is 0 in Kafka, not Math.abs's MIN_VALUE
    assert offsets_partition("polygenelubricants", 50) == 0
    assert offsets_partition("hello", 50) == 99162322 % 50
    assert offsets_partition("x", 50) == ord("x") % 50


def test_it_reads_offset_commit_keys_and_values_and_nothing_else() -> None:
    key = b"\x00\x01" + b"\x00\x02g1" + b"\x00\x03top" + b"\x00\x00\x00\x07"
    assert parse_offset_key(key) == ("g1", "top", 7)
    assert parse_offset_key(b"\x00\x02" + b"\x00\x02g1") is None  # group metadata
    assert parse_offset_key(b"\x00\x01\x00") is None  # cut short
    assert parse_offset_key(None) is None
    assert parse_committed_offset(b"\x00\x03" + (42).to_bytes(8, "big") + b"\xff\xff\xff\xff") == 42
    assert parse_committed_offset(None) is None


def test_a_removal_counts_only_where_it_may_have_taken_a_commit_past_the_record() -> None:
    """The tombstone is the key's last record: a removal before the record was written (less
    the clock margin) took no commit past it, and the rule stands as before."""
    now = 10_000_000_000
    view = ClusterView(topic="t", now_ms=now, offsets_retention_minutes=10_080)
    group = GroupState("g", removed={0: RemovedOffsets(0, removed_ms=now - 3_600_000, last_offset=5)})
    info: dict[str, Any] = {}
    # written before the removal: it may have been committed past
    reason = no_commit(group, 0, now - 7_200_000, view, info)
    assert reason is not None and "removed" in reason and info["offsets_removed"]["last_committed_offset"] == 5
    # written after it (beyond the margin): never committed past; young, so no reason at all
    assert no_commit(group, 0, now - 600_000, view, {}) is None
    # another partition's removal says nothing of partition 1; for an unplaced record (None) it does
    assert no_commit(group, 1, now - 7_200_000, view, {}) is None
    assert "removed" in (no_commit(group, None, now - 7_200_000, view, {}) or "")
    # a record of unknown time: the removal may have taken it
    assert "removed" in (no_commit(group, 0, None, view, {}) or "")


def test_records_a_group_read_before_an_operator_deleted_its_offsets_are_not_called_expired(
    make_stuck: Any, spark: Any, kafka_admin: Any
) -> None:
    """The group reads partition 0 to its end and commits (its application never updates the
    rows: they stay NEW); it never reads partition 1. An operator deletes the group's offsets
    (`stack.sh delete-offsets`: the OffsetDelete request `kafka-consumer-groups
    --delete-offsets` sends), and retention
    (delete_records standing in) empties both partitions. The records are younger than
    offsets.retention.minutes, so the rule took the missing offset for one never committed,
    and called partition 0's records `expired`: the group had read them. Ground truth: the
    full read of the topic before the deletion, the commit the consumer made, the rows."""
    setup = make_stuck(partitions=2, contract=1)
    pipeline = setup.pipeline
    ids = pipeline.produce(12)
    where = {r.key: r.partition for r in read_topic(pipeline.bootstrap, pipeline.topic)}
    assert set(where) == set(ids) and set(where.values()) == {0, 1}
    ends = {p: high for p, (_, high) in pipeline.watermarks(pipeline.topic).items()}

    consumer = Consumer(
        {"bootstrap.servers": pipeline.bootstrap, "group.id": pipeline.group, "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(pipeline.topic, 0, 0)])
        read = 0
        while read < ends[0]:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                read += 1
        (committed,) = consumer.commit(offsets=[TopicPartition(pipeline.topic, 0, ends[0])], asynchronous=False)
        assert committed.error is None and committed.offset == ends[0]
    finally:
        consumer.close()
    assert pipeline.committed_offsets() == {0: ends[0], 1: -1001}

    # the operator's tool: kafka-consumer-groups.sh --delete-offsets's request, by the stack
    deleted = subprocess.run(
        [str(ROOT / "stack" / "stack.sh"), "delete-offsets", pipeline.group, pipeline.topic, "0"],
        env={**os.environ, "STACK": os.environ.get("STACK", "test")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert deleted.returncode == 0, deleted.stderr or deleted.stdout
    assert pipeline.committed_offsets() == {0: -1001, 1: -1001}
    delete_records(kafka_admin, [TopicPartition(pipeline.topic, p, end) for p, end in ends.items()])
    assert pipeline.watermarks(pipeline.topic) == {p: (end, end) for p, end in ends.items()}
    assert set(pipeline.statuses().values()) == {"NEW"}

    result = diagnose_both(setup, spark)

    read_ids = [t for t in ids if where[t] == 0]
    never_read = [t for t in ids if where[t] == 1]
    assert read_ids and never_read
    assert verdicts_of(result) == dict.fromkeys(read_ids, "unknown") | dict.fromkeys(never_read, "expired")
    item = next(i for i in result.items if i.row.key == read_ids[0])
    (group,) = item.diagnosis.evidence["groups"]
    assert group["offsets_removed"]["partition"] == 0
    assert group["offsets_removed"]["last_committed_offset"] == ends[0]
    assert "__consumer_offsets shows its offset there removed" in item.diagnosis.reason
