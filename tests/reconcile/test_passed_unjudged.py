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

import spark_jobs.reconcile_extract as extract
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


def test_a_session_that_closed_after_the_run_read_its_commits_is_judged_by_the_next_run(
    spark: SparkSession, world: World, make_topic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run reads the groups' commit history before the consumer ledger's end (the settle
    wait lies between). A session that commits and closes in between: this run reads its
    `closed` session-end and not its last commit; the next run reads the commit and not the
    close. That run takes the session as closed (state.json `sessions_closed`): what the commit
    passed unmarked is `unprocessed`, not left waiting for marks that will never come."""
    for ticket in range(1, 7):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=120)
    world.insert(*range(1, 7))
    offsets = [world.at(f"t{t}")[1] for t in range(1, 7)]
    poison = offsets[5]  # t6

    consumer = audited_consumer(world, make_topic("_audit.clients"))
    batch = handed(consumer, 6)
    assert [m.offset() for m in batch] == offsets
    processed = [m.offset() for m in batch[:5]]
    for msg in batch[:5]:
        consumer.mark_processed(msg)
    consumer.commit(message=batch[4], asynchronous=False)  # past t5

    read_history = extract.plain_commits

    def then_commit_and_close(*args, **kwargs):  # type: ignore[no-untyped-def]
        spans = read_history(*args, **kwargs)
        consumer.commit(message=batch[5], asynchronous=False)  # past t6, which it gave up on
        consumer.close()  # writes its `closed` session-end once its marks are written
        return spans

    monkeypatch.setattr(extract, "plain_commits", then_commit_and_close)
    first = reconcile_once(spark, world.binding(), tmp_path)
    monkeypatch.undo()
    assert not [f for f in finding_set(first) if f[0] == "unprocessed"], finding_set(first)

    committed = committed_offset(world)
    second = reconcile_once(spark, world.binding(), tmp_path)

    truth = {offset for offset in offsets if offset < committed and offset not in processed}
    assert truth == {poison}
    assert finding_set(second) == {("unprocessed", "6", None, 0, poison)}
