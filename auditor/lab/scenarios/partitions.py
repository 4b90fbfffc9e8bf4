"""A partition added while the consumer is away, and a consumer that starts at the end of the
partitions it has no committed offset on (auto.offset.reset=latest): the records produced
there before it came back are never read. Nothing is lost in Kafka and no offset was
committed past them: the items wait for a consumer that will never come, and only the group's
missing commit on an assigned partition tells it."""

from __future__ import annotations

import time

from auditor.lab.cluster import LabError, wait_until
from auditor.lab.compare import Outcome
from auditor.lab.registry import scenario
from auditor.lab.workload import produce
from auditor.lab.world import STUCK_AGE_S, World

FIRST, LATER = list(range(1, 7)), list(range(7, 31))
PARTITIONS, ADDED = 2, 3


@scenario(
    "partition-added-latest",
    "a partition is added while the consumer is down; it comes back with auto.offset.reset=latest and "
    "never reads what was produced there meanwhile: waiting, and the active group's no-committed-offset risk",
)
def partition_added_latest(world: World) -> Outcome:
    cluster = world.cluster
    world.make_topic(partitions=PARTITIONS, replication=3, min_insync_replicas="2")
    world.make_table()
    world.make_binding(groups=[world.group])
    world.make_rule(older_than_s=1)
    world.insert(FIRST + LATER, age_s=STUCK_AGE_S)
    first = produce(cluster.bootstrap, world.topic, FIRST, {"acks": "all"})
    world.consume("at-least-once", records=len(FIRST))  # reads and commits what there is, then stops

    # While it is away the topic is scaled out and more tickets are produced (keys spread over
    # the new partition too).
    cluster.add_partitions(world.topic, ADDED)
    injected_at = time.monotonic()
    later = produce(cluster.bootstrap, world.topic, LATER, {"acks": "all", "topic.metadata.refresh.interval.ms": 1000})
    failed = [d for d in first + later if d.error]
    if failed:
        raise LabError(f"the workload's sends failed: {[d.error for d in failed][:3]}")
    # The application comes back, starting at the end where it has no committed offset, and stays up.
    world.start_consumer("at-least-once", auto_offset_reset="latest")
    committed_before = cluster.committed(world.group, world.topic, partitions=ADDED)
    readable = {int(d.key) for d in later if d.partition in committed_before}
    wait_until(lambda: readable <= set(world.processed()), 120, "the consumer to read the partitions it committed on")
    time.sleep(3)  # a few auto-commit rounds: nothing more is coming where it started at the end

    # Ground truth from the producer's delivery reports, the group's committed offsets and the
    # table: tickets whose record sits where the group has committed nothing, never processed.
    committed = cluster.committed(world.group, world.topic, partitions=ADDED)
    rows, processed = world.rows(), world.processed()
    unread = {
        d.key
        for d in later
        if d.partition not in committed and rows[int(d.key)] == "NEW" and not processed.get(int(d.key))
    }
    if not unread:
        raise LabError(f"the fault did not happen: no ticket went to a partition without a commit ({committed})")
    marks = cluster.watermarks(world.topic)
    bare = sorted(p for p, (low, high) in marks.items() if p not in committed and high > low)
    world.notes.append(f"committed {committed}; partitions with records and no commit {bare}; unread {sorted(unread)}")
    expected = {key: {"stuck:waiting"} for key in unread}
    expected[f"risk {world.group}"] = {"risk:no-committed-offset"}
    answer = world.stuck()
    world.notes += [f"{key}: {reason}" for key, reason in sorted(answer.reasons.items())][:2]
    return Outcome(
        injected=f"partition {ADDED - 1} added to {world.topic} while its consumer was down; the consumer came back "
        "with auto.offset.reset=latest",
        expected=expected,
        got=answer.verdicts,
        detect_s=answer.finished_monotonic - injected_at,
    )
