"""Cluster-side risks from an inline view: open/hanging transactions, retention lag, offsets expiry."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from auditor.lab.cluster import delete_records
from auditor.lint.engine.terms import Overtaken
from auditor.stuck.evidence import ClusterView, GroupState, PartitionState
from auditor.stuck.kafka_view import read_cluster_view
from auditor.stuck.risks import cluster_risks
from spark_jobs.kafka_offsets import partition_offsets
from tests.support.transactions import caught_up_before_an_aborted_tail, commit_offsets

NOW = 1_800_000_000_000
HOUR = 3600_000


def test_it_reports_transactions_holding_the_last_stable_offset_back() -> None:
    view = ClusterView(topic="tickets", now_ms=NOW)
    view.partitions = {0: PartitionState(0, 0, 40, 75), 1: PartitionState(1, 0, 90, 95), 2: PartitionState(2, 0, 9, 9)}
    view.open_transaction_since_ms = {0: NOW - 20 * 60_000, 1: NOW - 5_000}

    (risk,) = cluster_risks(view)

    assert (risk["kind"], risk["severity"], risk["subject"]) == ("hanging-transaction", "error", "tickets/0")
    assert "35 record(s) behind" in risk["message"] and "read_committed consumers" in risk["message"]


def test_it_warns_when_a_groups_lag_approaches_retention() -> None:
    view = ClusterView(topic="tickets", now_ms=NOW, retention_ms=24 * HOUR)
    view.partitions = {0: PartitionState(0, 0, 100, 100), 1: PartitionState(1, 0, 100, 100)}
    slow = GroupState(
        "slow", committed={0: 10, 1: 50}, members=1, committed_timestamp_ms={0: NOW - 20 * HOUR, 1: NOW - HOUR}
    )
    fine = GroupState("fine", committed={0: 99}, members=1, committed_timestamp_ms={0: NOW - HOUR})
    view.groups = {"slow": slow, "fine": fine}

    (risk,) = cluster_risks(view)

    assert (risk["kind"], risk["subject"], risk["severity"]) == ("retention-lag", "slow", "error")
    assert risk["message"].startswith("group slow will lose data in 4.0 hours")
    assert risk["details"]["partition"] == 0


def test_it_counts_down_the_committed_offsets_of_an_empty_group() -> None:
    view = ClusterView(topic="tickets", now_ms=NOW, offsets_retention_minutes=10080)
    view.partitions = {0: PartitionState(0, 0, 10, 10)}
    view.groups = {"idle": GroupState("idle", committed={0: 10}, members=0), "busy": GroupState("busy", {0: 3}, 2)}

    (first,) = cluster_risks(view)
    assert (first["kind"], first["subject"], first["severity"]) == ("offsets-expiry", "idle", "warning")
    assert "7.0 days" in first["message"]

    # Later runs count from when the group was first seen empty.
    view.now_ms = NOW + 6 * 24 * HOUR + 12 * HOUR
    (later,) = cluster_risks(view, [first])
    assert later["details"]["empty_since_ms"] == NOW and later["severity"] == "error"
    assert "12.0 hours" in later["message"]


def test_it_says_the_group_risks_are_unknown_when_kafka_could_not_be_read_and_keeps_the_countdown() -> None:
    view = ClusterView(topic="tickets", now_ms=NOW, offsets_retention_minutes=10080)
    view.partitions = {0: PartitionState(0, 0, 10, 10)}
    view.groups = {"idle": GroupState("idle", committed={0: 10}, members=0, simple=False)}
    (first,) = cluster_risks(view)

    down = ClusterView(topic="tickets", now_ms=NOW + HOUR, kafka_error="broker transport failure")
    (unknown,) = cluster_risks(down, [first])
    assert (unknown["kind"], unknown["severity"], unknown["subject"]) == ("risks-unknown", "unknown", "tickets")
    assert unknown["message"] == (
        "the consumer groups' risks on tickets are unknown: Kafka could not be read: broker transport failure"
    )
    # the group was seen empty before the failed read: the next run counts from then, not from now
    view.now_ms = NOW + 2 * HOUR
    (later,) = cluster_risks(view, [unknown])
    assert later["details"]["empty_since_ms"] == NOW


def test_it_says_the_group_risks_are_unknown_when_the_committed_offsets_could_not_be_read() -> None:
    view = ClusterView(topic="tickets", now_ms=NOW, groups_error="coordinator not available")
    view.partitions = {0: PartitionState(0, 0, 10, 10)}
    # what the read left: no committed offset at all, which must not read as "nothing committed"
    view.groups = {"g": GroupState("g", members=0, simple=False)}

    assert [(r["kind"], r["severity"]) for r in cluster_risks(view)] == [("risks-unknown", "unknown")]


def test_a_simple_consumer_group_gets_no_countdown() -> None:
    view = ClusterView(topic="tickets", now_ms=NOW, offsets_retention_minutes=10080)
    view.partitions = {0: PartitionState(0, 0, 10, 10), 1: PartitionState(1, 0, 10, 10)}
    # Flink's KafkaSource: commits without joining, so it always reads as empty; it reads
    # partition 0 only, on purpose
    view.groups = {"flink": GroupState("flink", committed={0: 10}, members=0, state="empty", simple=True)}

    (risk,) = cluster_risks(view, [])
    assert (risk["kind"], risk["severity"], risk["subject"]) == ("offsets-expiry", "info", "flink")
    assert "no countdown" in risk["message"] and "expire" not in risk["message"].split("commits")[0]
    view.now_ms = NOW + 7 * 24 * HOUR  # a week later it is still no error
    assert [r["severity"] for r in cluster_risks(view, [risk])] == ["info"]


def test_it_names_partitions_where_an_idle_group_has_no_committed_offset() -> None:
    view = ClusterView(topic="tickets", now_ms=NOW)
    view.partitions = {0: PartitionState(0, 0, 10, 10), 1: PartitionState(1, 2, 7, 7), 2: PartitionState(2, 4, 4, 4)}
    view.groups = {
        "half": GroupState("half", committed={0: 10}, members=0, simple=False),
        "nobody": GroupState("nobody", members=0, state="dead", simple=False),
        # active, its assignment unknown: nothing claimed
        "busy": GroupState("busy", committed={0: 3}, members=2, simple=False),
        # active on partitions 0 and 2, never committed there: where its consumers are is not visible
        "latest": GroupState("latest", committed={1: 7}, members=1, simple=False, assigned=frozenset({0, 2})),
        # active on partition 1 only, committed there (partition 0's records are another member's business)
        "reading": GroupState("reading", committed={1: 2}, members=1, simple=False, assigned=frozenset({1})),
        "unread": GroupState("unread", members=None),  # could not be described: nothing claimed
    }

    risks = {r["subject"]: r for r in cluster_risks(view) if r["kind"] == "no-committed-offset"}

    assert sorted(risks) == ["half", "latest", "nobody"]
    assert risks["half"]["severity"] == "warning"
    # partition 2 holds no record: nothing to skip or reread there
    assert risks["half"]["details"] == {"group": "half", "partitions": [1], "records": 5, "active": False}
    assert risks["latest"]["details"] == {"group": "latest", "partitions": [0], "records": 10, "active": True}
    assert risks["latest"]["message"].startswith(
        "group latest is active (1 member(s)) but has no committed offset on tickets/0, assigned to its members "
        "(10 record(s) there): where its consumers are is not visible; with auto.offset.reset=latest"
    )
    assert risks["half"]["message"].startswith(
        "group half has no active members and no committed offset on tickets/1 (5 record(s) there): "
    )
    assert risks["nobody"]["details"]["partitions"] == [0, 1]
    assert "it has committed nothing on this topic" in risks["nobody"]["message"]


def test_it_says_a_group_the_log_start_overtook_is_losing_data_now() -> None:
    view = ClusterView(topic="tickets", now_ms=NOW, retention_ms=24 * HOUR)
    view.partitions = {0: PartitionState(0, 50, 100, 100), 1: PartitionState(1, 30, 100, 100)}
    # its lag in time is an hour (the oldest record left): the deleted ones are what count
    gone = GroupState("gone", committed={0: 10, 1: 20}, members=0, committed_timestamp_ms={0: None, 1: NOW - HOUR})
    gone.overtaken = {0: Overtaken("gone", 0, 10, 50), 1: Overtaken("gone", 1, 20, 30)}
    view.groups = {"gone": gone}

    (risk,) = cluster_risks(view)

    assert (risk["kind"], risk["subject"], risk["severity"]) == ("retention-lag", "gone", "error")
    assert risk["message"] == (
        "group gone is losing data now: it committed offset 10 on tickets/0 but the log starts at 50: "
        "40 record(s) were deleted before it committed them (1 more partition(s) likewise)"
    )
    assert risk["details"] == {
        "group": "gone",
        "partition": 0,
        "committed": 10,
        "log_start": 50,
        "deleted_uncommitted": 40,
        "partitions": [0, 1],
        "retention_ms": 24 * HOUR,
    }


def _produce(producer: Producer, topic: str, counts: dict[int, int]) -> None:
    """`counts[p]` records into each partition p, all delivered."""
    for partition, n in counts.items():
        for i in range(n):
            producer.produce(topic, value=f"r{i}".encode(), partition=partition)
    assert producer.flush(30) == 0


def test_it_confirms_a_committed_offset_below_the_log_start_against_the_real_cluster(
    kafka_bootstrap: str, make_topic: Callable[..., str], kafka_admin: AdminClient
) -> None:
    topic = make_topic("risk-overtaken", partitions=2, replication_factor=1)
    _produce(Producer({"bootstrap.servers": kafka_bootstrap}), topic, {0: 5, 1: 5})
    behind, caught_up = f"behind-{uuid.uuid4().hex[:6]}", f"caught-up-{uuid.uuid4().hex[:6]}"
    for group, offset in ((behind, 1), (caught_up, 4)):
        commit_offsets(kafka_bootstrap, group, [TopicPartition(topic, 0, offset)])
    # the log start of partition 0 moves to 3: behind (at 1) never committed 1 and 2
    deleted = TopicPartition(topic, 0, 3)
    delete_records(kafka_admin, [deleted])

    view, _ = read_cluster_view(
        {"bootstrap.servers": kafka_bootstrap}, topic, [behind, caught_up], "_none-p", "_none-c"
    )

    assert view.groups[behind].overtaken == {0: Overtaken(behind, 0, 1, 3)}
    assert view.groups[caught_up].overtaken == {}
    (risk,) = [r for r in cluster_risks(view) if r["kind"] == "retention-lag"]
    assert (risk["subject"], risk["severity"], risk["details"]["deleted_uncommitted"]) == (behind, "error", 2)


def test_it_tells_a_simple_group_from_an_idle_one_and_a_missing_one_on_the_real_cluster(
    kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    topic = make_topic("risk-groups", partitions=2, replication_factor=1)
    _produce(Producer({"bootstrap.servers": kafka_bootstrap}), topic, {0: 3, 1: 3})
    simple, idle, missing = (f"{name}-{uuid.uuid4().hex[:6]}" for name in ("simple", "idle", "missing"))
    # simple: commits without joining, as assign()-only applications do
    commit_offsets(kafka_bootstrap, simple, [TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 3)])
    # idle: subscribed, read partition 0 only, committed it and left
    reader = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": idle,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        reader.subscribe([topic])
        seen: set[int] = set()
        deadline = time.monotonic() + 30
        while 0 not in seen and time.monotonic() < deadline:
            message = reader.poll(0.5)
            if message is not None and message.error() is None:
                seen.add(message.partition())
        reader.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
    finally:
        reader.close()

    view, _ = read_cluster_view(
        {"bootstrap.servers": kafka_bootstrap}, topic, [simple, idle, missing], "_none-p", "_none-c"
    )

    assert (view.groups[simple].simple, view.groups[simple].members) == (True, 0)
    assert (view.groups[idle].simple, view.groups[idle].members, view.groups[idle].committed) == (False, 0, {0: 3})
    assert (view.groups[missing].simple, view.groups[missing].state, view.groups[missing].committed) == (
        False,
        "dead",
        {},
    )
    kinds = {(r["subject"], r["kind"], r["severity"]) for r in cluster_risks(view)}
    assert (simple, "offsets-expiry", "info") in kinds
    assert (idle, "offsets-expiry", "warning") in kinds
    assert (idle, "no-committed-offset", "warning") in kinds
    assert (missing, "no-committed-offset", "warning") in kinds
    assert not [k for k in kinds if k[0] == simple and k[1] != "offsets-expiry"]
    assert not [k for k in kinds if k[0] == missing and k[1] != "no-committed-offset"]


def test_it_warns_of_an_active_group_that_never_committed_on_a_partition_on_the_real_cluster(
    kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    # Records wait on both partitions; the application joins with auto.offset.reset=latest, so it
    # starts past them and, no record coming, never commits. Partition 0 it committed earlier.
    topic = make_topic("risk-latest", partitions=2, replication_factor=1)
    _produce(Producer({"bootstrap.servers": kafka_bootstrap}), topic, {0: 3, 1: 4})
    group = f"latest-{uuid.uuid4().hex[:6]}"
    commit_offsets(kafka_bootstrap, group, [TopicPartition(topic, 0, 3)])
    app = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": group,
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 200,
            "auto.offset.reset": "latest",
        }
    )
    try:
        app.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(app.assignment()) < 2 and time.monotonic() < deadline:
            assert app.poll(0.2) is None  # nothing new comes
        assert {tp.partition for tp in app.assignment()} == {0, 1}
        for _ in range(10):  # two seconds of auto-commits: nothing read on partition 1, nothing committed
            assert app.poll(0.2) is None

        view, _ = read_cluster_view({"bootstrap.servers": kafka_bootstrap}, topic, [group], "_none-p", "_none-c")

        # Ground truth from the client: the next record on partition 1 is the first it gets (it is
        # past the 4 there and will never read them).
        _produce(Producer({"bootstrap.servers": kafka_bootstrap}), topic, {1: 1})
        first = None
        while first is None and time.monotonic() < deadline + 30:
            message = app.poll(0.2)
            first = message if message is not None and message.error() is None else None
        assert first is not None and (first.partition(), first.offset()) == (1, 4)
    finally:
        app.close()

    state = view.groups[group]
    assert (state.members, state.assigned, state.committed) == (1, frozenset({0, 1}), {0: 3})
    (risk,) = [r for r in cluster_risks(view) if r["kind"] == "no-committed-offset"]
    assert (risk["subject"], risk["severity"]) == (group, "warning")
    assert risk["details"] == {"group": group, "partitions": [1], "records": 4, "active": True}


def test_an_aborted_transaction_after_a_caught_up_group_is_no_unread_record(
    kafka_bootstrap: str, make_topic: Callable[..., str], kafka_admin: AdminClient
) -> None:
    topic = make_topic("risk-aborted", partitions=1, replication_factor=1, config={"retention.ms": str(3 * HOUR)})
    caught_up, behind = caught_up_before_an_aborted_tail(kafka_bootstrap, topic, 2 * HOUR)

    view, _ = read_cluster_view(
        {"bootstrap.servers": kafka_bootstrap}, topic, [caught_up, behind], "_none-p", "_none-c"
    )

    assert view.partitions[0].high == 6  # 3 records, 2 aborted, the abort marker
    # the aborted records (2 h of a 3 h retention) are nothing the caught-up group will read
    assert view.groups[caught_up].committed_timestamp_ms == {0: None}
    assert view.now_ms - (view.groups[behind].committed_timestamp_ms[0] or 0) < 300_000
    assert not [r for r in cluster_risks(view) if r["kind"] == "retention-lag"]


def test_it_reads_an_open_transaction_below_the_high_watermark_and_nothing_else(
    kafka_bootstrap: str, make_topic: Callable[..., str], kafka_admin: AdminClient
) -> None:
    topic = make_topic("risk-lso", partitions=2, replication_factor=1)
    _produce(Producer({"bootstrap.servers": kafka_bootstrap}), topic, {1: 4})
    txn = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"risk-lso-{uuid.uuid4().hex[:6]}"})
    txn.init_transactions(30)
    txn.begin_transaction()
    try:
        _produce(txn, topic, {0: 3})

        offsets = partition_offsets(kafka_admin, topic, [0, 1])

        # partition 0: the open transaction holds the stable offset at its first record
        assert (offsets[0].low, offsets[0].stable, offsets[0].high) == (0, 0, 3)
        # partition 1: no transaction, nothing held back
        assert (offsets[1].low, offsets[1].stable, offsets[1].high) == (0, 4, 4)
    finally:
        txn.abort_transaction(30)
