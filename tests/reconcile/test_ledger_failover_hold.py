"""A run does not report a probed row `missing` while a failover of the producer ledger may
still hold the probe's entry for it, even at a binding's first run.

Found by the lab's `in-flight-while-auditing` (stop 79, lab runs #2 and #3: 7 false `missing`):
a probe writes its ledger entries through a producer of its own, and a frozen broker that led
the ledger's partition held the entry of a send still on its way for 30 s. The run, the
binding's first, read neither the record nor the entry, and had no earlier reading of any
epoch to see the failover by.

No broker is stopped here: the ledger partition's leader is moved by a reassignment and a
preferred leader election (the stack's own commands), which raises its epoch as a failover
does. Ground truth is what the test did and what the cluster says: the ledger's leader before
and after (metadata), the ledger's records (a full read: none for the row) and the topic's (a
full read: no record of the row). Real brokers of the 3-broker test stack, PostgreSQL and
Spark (the run in this process).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from auditor.lab.cluster import Cluster as LabCluster
from spark_jobs.kafka_offsets import admin_client, epochs_led_before, partition_offsets
from tests.support.reconcile_world import World, finding_set, reconcile_once

pytestmark = [pytest.mark.integration]

MIN_MS = 60_000


def _move_leader(cluster: LabCluster, topic: str, partition: int) -> tuple[int, int]:
    """The partition's leader moved to another of its replicas: (old, new), from the metadata."""
    placed = cluster.partition(topic, partition)
    new = next(r for r in placed.replicas if r != placed.leader)
    cluster.reassign(topic, partition, [new, *[r for r in placed.replicas if r != new]])
    assert cluster.elect(topic, partition, unclean=False) == "ok"
    assert cluster.wait_for_leader(topic, partition, other_than=placed.leader, timeout=60) == new
    return placed.leader, new


def _write(bootstrap: str, topic: str, partition: int, stamped_ms: int) -> int:
    """One record on the partition stamped `stamped_ms` (its creation time); its offset."""
    written: list[int] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    producer.produce(
        topic,
        b"{}",
        partition=partition,
        timestamp=stamped_ms,
        on_delivery=lambda err, msg: written.append(msg.offset()) if err is None else None,
    )
    assert producer.flush(30) == 0 and len(written) == 1
    return written[0]


def test_a_leader_is_dated_by_the_epoch_of_an_old_record_it_appended(
    make_topic: Any, kafka_bootstrap: str, kafka_brokers: int
) -> None:
    if kafka_brokers < 3:
        pytest.skip("needs replicas to move a leader to: the 3-broker test stack")
    topic = make_topic("epoch-dating", partitions=3, replication_factor=3)
    cluster = LabCluster(kafka_bootstrap)
    now = int(time.time() * 1000)
    since = now - 20 * MIN_MS
    # 0: an old record, then the leader moves, then a new record: not seen leading before `since`
    _write(kafka_bootstrap, topic, 0, now - 30 * MIN_MS)
    _move_leader(cluster, topic, 0)
    _write(kafka_bootstrap, topic, 0, now)
    # 1: the leader moves, then an old record (the new leader appends it) and a new one
    _move_leader(cluster, topic, 1)
    _write(kafka_bootstrap, topic, 1, now - 30 * MIN_MS)
    _write(kafka_bootstrap, topic, 1, now)
    # 2: the leader it was created with, never moved
    _write(kafka_bootstrap, topic, 2, now - 30 * MIN_MS)
    admin = admin_client(kafka_bootstrap)
    ends = partition_offsets(admin, topic, [0, 1, 2])
    assert ends[2].leader_epoch == 0 and ends[0].leader_epoch and ends[1].leader_epoch
    assert epochs_led_before(admin, kafka_bootstrap, None, topic, ends, since) == {1}


def test_a_first_run_holds_a_probed_row_while_the_ledger_failover_may_hold_its_entry(
    world: World, spark: Any, tmp_path: Path, kafka_brokers: int, make_topic: Any
) -> None:
    if kafka_brokers < 3:
        pytest.skip("needs replicas to move a leader to: the 3-broker test stack")
    cluster = LabCluster(world.bootstrap)
    # Earlier traffic on the ledger (a probe's entry for ticket 1, delivered), stamped well
    # before the run's dating bound, then the ledger's leader moves: its current leader appended
    # nothing that old.
    world.insert(1, age="1 hour")
    world.produce("t1", 1, seq=0, age_s=3600)
    world.ledger(0, "acked", 1, "t1")
    world.ledger(1, "failed", 4)  # ticket 4's send failed: its outcome is known
    world.flush_ledger(age_s=3600)
    old, new = _move_leader(cluster, world.producer_ledger, 0)
    # Ticket 2: a row past the grace, with no record and no ledger entry (the test sent neither)
    world.insert(2, 4, age="5 seconds")
    binding = world.binding(grace="1s", lookback="2h")
    ledger = [json.loads(r.value or b"") for r in cluster.read_topic(world.producer_ledger)]
    entries = {str(e[6]): e[1] for m in ledger for e in m.get("entries", [])}
    assert entries == {"1": "acked", "4": "failed"}, ledger
    assert [json.loads(r.value or b"") for r in cluster.read_topic(world.topic)] == [{"ticket_id": 1}]

    first = reconcile_once(spark, binding, tmp_path / "state")
    found = finding_set(first)
    # The old code: ("missing", "2", None, None, None). Ticket 4's failed send is not on its way:
    # its row is missing at once, beside the ledger's gap.
    assert {f for f in found if f[1] == "2"} == set(), found
    assert ("missing", "4", None, None, None) in found and any(f[:2] == ("gap", "4") for f in found), found
    assert first["counts"]["late"] == 1, first["counts"]
    assert any(w.startswith(f"the producer ledger {world.producer_ledger}:") for w in first["warnings"]), first[
        "warnings"
    ]
    assert old != new

    # The same table and ledger bound to a topic no probe writes (a plain producer's record
    # only): its rows have no entry to wait for, and the ledger's change holds none of them.
    plain_topic = make_topic("rec-plain", partitions=2)
    plain = Producer({"bootstrap.servers": world.bootstrap, "linger.ms": 0})
    plain.produce(plain_topic, json.dumps({"ticket_id": 1}).encode())
    assert plain.flush(30) == 0
    other = reconcile_once(
        spark,
        world.binding(name=f"b-{plain_topic}", topic=plain_topic, grace="1s", lookback="2h"),
        tmp_path / "plain-state",
    )
    assert ("missing", "2", None, None, None) in finding_set(other), finding_set(other)
    assert other["counts"]["late"] == 0, other["counts"]
