"""An acks=1 record that a frozen follower keeps behind the high watermark is not lost.

The leader acks an acks=1 record as soon as it has written it; the high watermark passes the
record only once every in-sync replica has fetched it. A follower frozen (SIGSTOP) while still
in the in-sync set holds the high watermark back (for up to 1.5 x replica.lag.time.max.ms; and,
once the controller fences it, for as long as the partition stays under min.insync.replicas):
no reader sees the record, at either of the diagnosis's reads of the log end. It was never lost:
once the follower thaws, the record is there at the offset its delivery report named.

Ground truth: the producer's delivery reports, full reads of the topic while the follower is
frozen and after it thawed, and the table. Real brokers of the 3-broker test stack.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from auditor.lab.cluster import Cluster as LabCluster
from auditor.stuck.kafka_view import read_in_sync
from auditor.stuck.service import diagnose_rule
from tests.support.held_watermark import HeldWatermark, frozen_follower
from tests.support.stuck import StuckSetup, make_rule

pytestmark = [pytest.mark.alone, pytest.mark.integration, pytest.mark.django_db]


def test_an_acks_1_record_a_frozen_in_sync_follower_holds_behind_the_high_watermark_is_not_broker_lost(
    make_held_watermark: Callable[..., HeldWatermark],
) -> None:
    case = make_held_watermark(contract=1, topic_prefix="held")
    pipeline, before, held = case.pipeline, case.before, case.held
    setup = StuckSetup(pipeline, make_rule(pipeline))

    case.produce(before)
    with case.follower_frozen():
        case.produce(held)
        acked_at = time.time()
        case.assert_held_back()
        frozen = diagnose_rule(setup.rule, setup.options())
        # the diagnosis read the log end within the span a held watermark can last (45 s with
        # the stack's replica.lag.time.max.ms of 30 s, plus the producer clock's 60 s)
        assert time.time() - acked_at < 45, "the diagnosis came too late to prove anything"
    case.assert_at_the_acked_offsets_once_thawed()

    items = {item.row.key: item.diagnosis for item in frozen.items}
    assert set(items) == {before, held}
    assert items[before].verdict == "waiting", items[before].reason  # the group never read anything
    # The old code: "acked at .../0@1, but the log has no record with this key there: lost on the
    # broker side". The ack, with acks=1, does not say the high watermark ever passed it.
    assert items[held].verdict == "unknown", items[held].reason
    assert "lost or still held back cannot be told" in items[held].reason
    assert items[held].evidence["held_watermark"]["replica_lag_time_max_ms"] == 30_000

    # and once it thawed, the next diagnosis sees it
    after = {item.row.key: item.diagnosis.verdict for item in diagnose_rule(setup.rule, setup.options()).items}
    assert after == {before: "waiting", held: "waiting"}


def test_the_diagnosis_reads_which_partitions_are_under_min_insync_replicas(
    make_topic: Callable[..., str], kafka_bootstrap: str, kafka_brokers: int
) -> None:
    """Under min.insync.replicas a partition's leader does not advance its high watermark at all:
    the frozen follower, once fenced, leaves the partition with one in-sync replica of two."""
    if kafka_brokers < 2:
        pytest.skip("needs a follower: the 3-broker test stack")
    topic = make_topic("in-sync", replication_factor=2, config={"min.insync.replicas": "2"})
    config = {"bootstrap.servers": kafka_bootstrap}
    cluster = LabCluster(kafka_bootstrap)
    cluster.wait_for_isr(topic, 2)
    assert read_in_sync(config, topic) == {}

    start = cluster.partition(topic)
    with frozen_follower(cluster, topic) as follower:
        deadline = time.monotonic() + 60
        while follower in cluster.partition(topic).isr:  # fenced: broker.session.timeout.ms
            assert time.monotonic() < deadline, "the frozen follower stayed in sync"
            time.sleep(0.5)
        assert cluster.partition(topic).isr == (start.leader,)
        stalled = read_in_sync(config, topic)

    assert set(stalled) == {0} and f"{topic}/0 has 1 in-sync replica(s) of 2" in stalled[0], stalled
    # back in sync (as the metadata of the broker asked first said): every broker learns it soon
    deadline = time.monotonic() + 30
    while (stalled := read_in_sync(config, topic)) != {}:
        assert time.monotonic() < deadline, stalled
        time.sleep(0.5)


def test_a_v2_acks_1_record_a_frozen_in_sync_follower_holds_behind_the_high_watermark_is_not_broker_lost(
    make_held_watermark: Callable[..., HeldWatermark], spark: Any
) -> None:
    """As above, through a contract-v2 AuditedProducer: its ledger acks the record in a range
    (no partition or offset), and the `keys` record names the ticket. Both engines."""
    case = make_held_watermark(contract=2, topic_prefix="held-v2")
    pipeline, before, held = case.pipeline, case.before, case.held
    setup = StuckSetup(pipeline, make_rule(pipeline))

    case.produce(before)
    with case.follower_frozen():
        acked_at = case.produce(held)
        case.assert_held_back()
        by_python = diagnose_rule(setup.rule, setup.options("python", use_index=False))
        by_spark = diagnose_rule(setup.rule, setup.options("spark", spark=spark, use_index=False))
        frozen_for = time.time() - acked_at
    case.assert_at_the_acked_offsets_once_thawed()

    for frozen in (by_python, by_spark):
        items = {item.row.key: item.diagnosis for item in frozen.items}
        assert set(items) == {before, held}
        assert items[before].verdict == "waiting", items[before].reason
        # The old code: "acked between ... (sequence 0 of producer session ...; contract v2
        # ledgers no partition or offset), but no partition of ... has a record with this key
        # although each still holds everything produced since then: lost on the broker side".
        assert items[held].verdict == "unknown", (frozen.engine, frozen_for, items[held].reason)
        assert "lost or still held back cannot be told" in items[held].reason
        # within the lag span it is the follower's hold; once the follower was fenced, the
        # partition under min.insync.replicas
        assert {"held_watermark", "stalled_watermark"} & set(items[held].evidence), items[held].evidence

    # and once it thawed, the next diagnosis sees it
    after = {item.row.key: item.diagnosis.verdict for item in diagnose_rule(setup.rule, setup.options()).items}
    assert after == {before: "waiting", held: "waiting"}
