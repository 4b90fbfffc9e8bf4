"""A probed consumer that processes records concurrently (a worker pool behind its polling
thread) marks them in the order they finish, not in offset order, while its commits (here the
client's auto-commit of what it was handed, librdkafka's default) pass records still being
processed. A run that reads a later mark of the session above a record still in a worker's
hands must not call that record `unprocessed`: until stop 86 the settling rule (a record below a
later mark of its session and unmarked was not processed by it) did, at once. Now a span a
session committed within its processing bound (spark_jobs.processing_bound) waits whole until
the ledger holds a mark record of the session made after the bound had passed since the commit
(a record it processed within the bound was marked before that); then the rule judges it, so a
record the pool gave up on is still reported once the pool goes on.

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


def _pool(world: World, clients: str, held: int, **options: float) -> WorkerPool:
    return WorkerPool(world.bootstrap, world.group, world.topic, world.consumer_ledger, clients, held, **options)


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
        # the bound has passed, but the pool has marked nothing since: an idle session (or one
        # that died) says nothing of a record it may have processed with its mark lost
        idle = reconcile_once(spark, binding, tmp_path)
        assert not [f for f in finding_set(idle) if f[0] == "unprocessed"], finding_set(idle)
        # the application goes on: two more tickets, processed and marked
        for ticket in (7, 8):
            world.produce(f"t{ticket}", ticket, partition=0, age_s=120)
        world.insert(7, 8)
        assert len(pool.hand(2)) == 2
        committed = pool.settle(7, lambda: committed_offset(world), offsets[-1] + 2)
        second = reconcile_once(spark, binding, tmp_path)
    finally:
        pool.close()

    truth = {offset for offset in range(committed) if offset not in pool.finished}
    assert truth == {poison}
    assert finding_set(second) == {("unprocessed", "3", None, 0, poison)}


def test_a_record_whose_mark_died_with_the_pool_below_a_later_mark_is_not_unprocessed(
    spark: SparkSession, world: World, make_topic, tmp_path: Path
) -> None:
    """A pool killed -9 takes with it the marks it had not written, and those need not be of its
    highest offsets: a worker that finished a lower record after the others were marked and
    written. The probe's ledger flush is held off here (an hour), so the last mark never reaches
    the ledger, as when the process dies before its next flush. The marks written settle
    nothing: none was made after the bound had passed since the commit. (Stop 86's first form of
    the rule, a later mark once the bound had passed, called the record `unprocessed`.)"""
    offsets = _world(world)
    late = offsets[2]  # t3: finished last; its mark is never written
    binding = world.binding(processing_bound_ms=BOUND_MS)
    pool = _pool(world, make_topic("_audit.clients"), late, ledger_flush_interval_s=3600.0)
    try:
        assert [m.offset() for m in pool.hand(6)] == offsets
        committed = pool.settle(5, lambda: committed_offset(world), offsets[-1])  # the others' marks written
        pool.release.set()
        deadline = time.monotonic() + 10
        while late not in pool.finished and time.monotonic() < deadline:
            time.sleep(0.05)
        assert late in pool.finished  # the application's account: processed, marked into the probe's buffer
        first = reconcile_once(spark, binding, tmp_path)
        time.sleep(BOUND_MS / 1000)  # the bound passes; the session writes nothing more
        second = reconcile_once(spark, binding, tmp_path)
    finally:
        pool.close()

    assert committed == offsets[-1] + 1 and sorted(pool.finished) == offsets  # nothing skipped
    for result in (first, second):
        assert not [f for f in finding_set(result) if f[0] == "unprocessed"], finding_set(result)
