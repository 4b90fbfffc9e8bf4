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

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message
from pyspark.sql import SparkSession

from auditor.probes.consumer import AuditedConsumer
from tests.support.reconcile_world import World, committed_offset, finding_set, reconcile_once
from tests.support.waiting import handed

pytestmark = pytest.mark.integration

BOUND_MS = 8_000  # the session's processing bound the binding carries (its max.poll.interval.ms)


class Pool:
    """The application: a poll loop handing records to three workers, which mark each record as
    they finish it; the worker given `held` waits until it is released (or gives up on it)."""

    def __init__(self, world: World, clients: str, held: int) -> None:
        config: dict[str, Any] = {
            "bootstrap.servers": world.bootstrap,
            "group.id": world.group,
            "auto.offset.reset": "earliest",
            "auto.commit.interval.ms": 200,  # enable.auto.commit left at its default (true)
        }
        self.consumer = AuditedConsumer(config, ledger_topic=world.consumer_ledger, clients_topic=clients)
        self.consumer.subscribe([world.topic])
        self.held = held
        self.release = threading.Event()
        self.give_up = False
        self.finished: list[int] = []
        self.workers = ThreadPoolExecutor(3)
        self.world = world

    def work(self, msg: Message) -> None:
        if msg.offset() == self.held:
            self.release.wait(120)
            if self.give_up:
                return
        self.consumer.mark_processed(msg)
        self.finished.append(msg.offset())

    def hand(self, count: int) -> list[Message]:
        batch = handed(self.consumer, count)
        for msg in batch:
            self.workers.submit(self.work, msg)
        return batch

    def settle(self, done: int, past: int, timeout: float = 30) -> int:
        """Polls (the auto-commit and the offset store ride on polls) until `done` records are
        finished, their marks flushed and the broker holds a commit past `past`; that commit."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.consumer.poll(0.2) is None  # nothing more to hand
            if len(self.finished) >= done and (held := committed_offset(self.world)) > past:
                self.consumer.flush_ledger()
                return held
        raise AssertionError(f"not settled within {timeout}s: finished {self.finished}")

    def close(self) -> None:
        self.give_up = True
        self.release.set()
        self.workers.shutdown()
        self.consumer.close()


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
    pool = Pool(world, make_topic("_audit.clients"), slow)
    try:
        assert [m.offset() for m in pool.hand(6)] == offsets
        committed = pool.settle(5, offsets[-1])
        assert committed == offsets[-1] + 1
        in_flight = reconcile_once(spark, binding, tmp_path)
        assert slow not in pool.finished and len(pool.finished) == 5  # t3 in a worker's hands, the rest marked
        assert not [f for f in finding_set(in_flight) if f[0] == "unprocessed"], finding_set(in_flight)

        pool.release.set()  # t3's worker finishes
        pool.settle(6, offsets[-1])
        time.sleep(BOUND_MS / 1000)  # the bound passes: the next run judges the span
        after = reconcile_once(spark, binding, tmp_path)
    finally:
        pool.close()

    assert sorted(pool.finished) == offsets  # every record processed
    assert not [f for f in finding_set(after) if f[0] == "unprocessed"], finding_set(after)


def test_a_record_the_pool_gave_up_on_is_reported_once_the_bound_has_passed(
    spark: SparkSession, world: World, make_topic, tmp_path: Path
) -> None:
    offsets = _world(world)
    poison = offsets[2]  # t3: its worker gives up on it
    binding = world.binding(processing_bound_ms=BOUND_MS)
    pool = Pool(world, make_topic("_audit.clients"), poison)
    try:
        assert [m.offset() for m in pool.hand(6)] == offsets
        committed = pool.settle(5, offsets[-1])
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
