"""What a probed consumer session committed past above its last mark a run read waits; it is not
dropped. A run cannot tell a session that died with the marks of the records it committed past
(an asynchronous or at-most-once committer killed -9) from one that is still processing them, so
it leaves them unjudged (reconcile_inputs.died_passed). Until stop 85 it dropped them from the
candidates for good: a live consumer that commits past a record it never processes, read by a
run before it marks anything above it, was never reported (a miss). Now they wait for a later
mark of that session (the ledger writes a session's marks in order: unmarked below a later mark
is not processed) or its close.

Ground truth is the application's own account (the records it processed and the one it gave up
on), the group's committed offset read back from the broker, and the topic as the test wrote it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.support.reconcile_world import World, audited_consumer, committed_offset, finding_set, reconcile_once
from tests.support.waiting import handed

pytestmark = pytest.mark.integration


def test_a_record_a_live_session_committed_past_unprocessed_is_reported_once_it_marks_past_it(
    spark: SparkSession, world: World, make_topic, tmp_path: Path
) -> None:
    for ticket in range(1, 10):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=120)
    world.insert(*range(1, 10))
    offsets = [world.at(f"t{t}")[1] for t in range(1, 10)]
    poison = offsets[5]  # t6: the application gives up on it and commits past it

    consumer = audited_consumer(world, make_topic("_audit.clients"))
    processed: list[int] = []
    try:
        batch = handed(consumer, 6)
        assert [m.offset() for m in batch] == offsets[:6]
        for msg in batch:
            if msg.offset() != poison:
                consumer.mark_processed(msg)
                processed.append(msg.offset())
        consumer.commit(message=batch[-1], asynchronous=False)  # waits for the marks handed before it

        # The first run reads the commit past t6 and no mark of the session above t5: the session
        # may have died with t6's mark, or be processing it. Neither `unprocessed` nor dropped.
        assert committed_offset(world) == poison + 1
        first = reconcile_once(spark, world.binding(), tmp_path)
        assert not [f for f in finding_set(first) if f[0] == "unprocessed"], finding_set(first)

        # The same session goes on: processes, marks and commits the next three records.
        batch = handed(consumer, 3)
        assert [m.offset() for m in batch] == offsets[6:]
        for msg in batch:
            consumer.mark_processed(msg)
            processed.append(msg.offset())
        consumer.commit(message=batch[-1], asynchronous=False)

        committed = committed_offset(world)
        second = reconcile_once(spark, world.binding(), tmp_path)
    finally:
        consumer.close()

    truth = {offset for offset in offsets if offset < committed and offset not in processed}
    assert truth == {poison}
    assert finding_set(second) == {("unprocessed", "6", None, 0, poison)}
