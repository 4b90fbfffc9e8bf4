"""A probed at-least-once consumer that commits each record asynchronously, killed -9 with the
marks of several commits still in its process (lab `live-consumer-crash-loop-async`, stop 82: 5
false `unprocessed` of 6,333 tickets). An asynchronous commit does not wait for the marks the
probe handed its ledger producer before it, so the kill takes the marks of every commit since
the last one written, not only its last commit's.

Ground truth is the application's own account (the offsets the killed consumer processed, as it
printed them before the kill), the group's committed offset and the consumer ledger, read back
whole from the broker, and the topic as the test's producer wrote it."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from auditor.probes import ProcessedRanges, decode_ledger_record
from spark_jobs.commit_history import offsets_history
from tests.probes.kafka_helpers import read_topic
from tests.support.async_committer import run_and_kill
from tests.support.reconcile_world import World, audited_consumer, committed_offset, finding_set, reconcile_once
from tests.support.waiting import handed

pytestmark = pytest.mark.integration


def test_records_whose_marks_died_with_an_asynchronous_committer_are_not_unprocessed(
    spark: SparkSession, world: World, make_topic, kafka_admin: AdminClient, tmp_path: Path
) -> None:
    for ticket in range(1, 13):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=120)
    world.insert(*range(1, 13))
    skip = world.at("t3")[1]  # the poison record the application gives up on

    killed = run_and_kill(
        world.bootstrap, world.topic, world.group, world.consumer_ledger, make_topic("_audit.clients"), skip, 6, 6
    )

    # What the broker holds after the kill: the group committed past all twelve, its session's
    # asynchronous commits one by one, and the ledger holds no mark of the second batch.
    offsets = [world.at(f"t{t}")[1] for t in range(1, 13)]
    committed = committed_offset(world)
    assert committed == offsets[-1] + 1
    _, history = offsets_history(kafka_admin, world.bootstrap, {}, [world.group], world.topic)
    by_session = [c.offset for c in history[world.group][0] if c.session() == killed.session]
    assert len([o for o in by_session if o is not None and o > offsets[6]]) >= 2, by_session
    marked = {
        offset
        for message in read_topic(world.consumer_ledger, bootstrap=world.bootstrap)
        if isinstance(record := decode_ledger_record(message.value()), ProcessedRanges)
        for r in record.ranges
        if r.topic == world.topic
        for offset in range(r.first, r.last + 1)
    }
    assert marked == set(killed.processed_synced), "the second batch's marks were written: no kill took them"
    assert killed.processed_async == offsets[6:]

    result = reconcile_once(spark, world.binding(), tmp_path)

    # The truth: the group committed past everything and the application processed all but the
    # poison record; the ledger lost the marks of the second batch.
    processed = set(killed.processed_synced) | set(killed.processed_async)
    truth = {offset for offset in offsets if offset < committed and offset not in processed}
    assert truth == {skip}
    # None of what the killed session committed past is `unprocessed`: the second batch's marks
    # died with it, and the poison record is unjudged too. Its marks above it were all made
    # before the commit that passed it, and the session wrote no mark record after that commit
    # (plus its processing bound, 0 here): a worker pool leaves the same ledger when a worker
    # finished the record after the others were written and died with its mark (stop 86,
    # test_concurrent_marks.py). A miss, not an alarm; the record's row, still NEW, is what the
    # stuck diagnosis calls skipped.
    assert finding_set(result) == set(), finding_set(result)

    # The group goes on in another session, which marks past the killed one's records: those
    # records still wait (only the killed session's own later marks would settle them), and the
    # next run reports what the first did: nothing.
    for ticket in range(13, 16):
        world.produce(f"t{ticket}", ticket, partition=0, age_s=120)
    world.insert(*range(13, 16))
    successor = audited_consumer(world, make_topic("_audit.clients"))
    try:
        batch = handed(successor, 3)
        assert [m.offset() for m in batch] == [world.at(f"t{t}")[1] for t in range(13, 16)]
        for msg in batch:
            successor.mark_processed(msg)
        successor.commit(message=batch[-1], asynchronous=False)
        again = reconcile_once(spark, world.binding(), tmp_path)
    finally:
        successor.close()
    assert finding_set(again) == set(), finding_set(again)
