"""A probed consumer that processes records concurrently (a worker pool behind its polling
thread) marks them in the order they finish, not in offset order, while its commits (here the
client's auto-commit of what it was handed, librdkafka's default) pass records still being
processed. A run that reads a later mark of the session above a record still in a worker's
hands must not call that record `unprocessed`: until stop 86 the settling rule (a record below a
later mark of its session and unmarked was not processed by it) did, at once. Now a span a
session committed within its processing bound (spark_jobs.processing_bound) waits whole; once
the bound has passed the rule judges it, so a record the pool gave up on is still reported.

Ground truth is the application's own account (which records its workers finished, which one was
still in a worker's hands when the run read), the group's committed offset read back from the
broker, and the topic as the test wrote it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.support.reconcile_world import World, committed_offset, finding_set, reconcile_once
from tests.support.worker_pool import WorkerPool

pytestmark = pytest.mark.integration

BOUND_MS = 8_000  # the session's processing bound the binding carries (its max.poll.interval.ms)


def _pool(world: World, clients: str, held: int) -> WorkerPool:
    return WorkerPool(world.bootstrap, world.group, world.topic, world.consumer_ledger, clients, held)


def _world(world: World) -> list[int]:
    for ticket in range(1, 7):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=120)
    world.insert(*range(1, 7))
    return [world.at(f"t{t}")[1] for t in range(1, 7)]


def test_a_record_still_in_a_workers_hands_below_later_marks_is_not_unprocessed(
    spark: SparkSession, world: World, make_topic, tmp_path: Path
) -> None:
    offsets = _world(world)
    slow = offsets[2]  # t3: its worker is still busy when the run reads
    binding = world.binding(processing_bound_ms=BOUND_MS)
    pool = _pool(world, make_topic("_audit.clients"), slow)
    try:
        assert [m.offset() for m in pool.hand(6)] == offsets
        committed = pool.settle(5, lambda: committed_offset(world), offsets[-1])
        assert committed == offsets[-1] + 1
        in_flight = reconcile_once(spark, binding, tmp_path)
        assert slow not in pool.finished and len(pool.finished) == 5  # t3 in a worker's hands, the rest marked
        assert not [f for f in finding_set(in_flight) if f[0] == "unprocessed"], finding_set(in_flight)
        # the run says so, and from when a run judges them (the lab waits for it)
        assert in_flight["window"]["processing_until"] is not None
        assert any("within their processing bound" in w for w in in_flight["warnings"]), in_flight["warnings"]

        pool.release.set()  # t3's worker finishes
        pool.settle(6, lambda: committed_offset(world), offsets[-1])
        time.sleep(BOUND_MS / 1000)  # the bound passes: the next run judges the span
        after = reconcile_once(spark, binding, tmp_path)
    finally:
        pool.close()

    assert sorted(pool.finished) == offsets  # every record processed
    assert not [f for f in finding_set(after) if f[0] == "unprocessed"], finding_set(after)
    assert after["window"]["processing_until"] is None


def test_a_record_the_pool_gave_up_on_is_reported_once_the_bound_has_passed(
    spark: SparkSession, world: World, make_topic, tmp_path: Path
) -> None:
    offsets = _world(world)
    poison = offsets[2]  # t3: its worker gives up on it
    binding = world.binding(processing_bound_ms=BOUND_MS)
    pool = _pool(world, make_topic("_audit.clients"), poison)
    try:
        assert [m.offset() for m in pool.hand(6)] == offsets
        committed = pool.settle(5, lambda: committed_offset(world), offsets[-1])
        pool.give_up = True
        pool.release.set()
        first = reconcile_once(spark, binding, tmp_path)  # within the bound: waits
        assert not [f for f in finding_set(first) if f[0] == "unprocessed"], finding_set(first)
        time.sleep(BOUND_MS / 1000)
        second = reconcile_once(spark, binding, tmp_path)
    finally:
        pool.close()

    truth = {offset for offset in offsets if offset < committed and offset not in pool.finished}
    assert truth == {poison}
    assert finding_set(second) == {("unprocessed", "3", None, 0, poison)}
