"""A broker loses a partition's log while a probed consumer is behind it: new records take
the lost records' offsets, where the consumer ledger holds the marks of the lost ones."""

from __future__ import annotations

import time

from auditor.lab import truth
from auditor.lab.cluster import LabError
from auditor.lab.compare import Outcome, merge
from auditor.lab.registry import scenario
from auditor.lab.scenarios.recreation import consumer_truth, go_on_at_reused_offsets, probed_pipeline
from auditor.lab.world import World

OLD = list(range(1, 13))  # acked, then lost with the disk
OLD_CONSUMED = 10  # processed before the loss: marks at offsets 0-9
NEW_FIRST, NEW_LATER = list(range(13, 18)), list(range(18, 33))
CRASH_AT = 3  # the third record of NEW_LATER (offset 7, where an old mark is): committed, then killed -9


@scenario(
    "disk-lost-consumed",
    "RF=1: a probed pipeline's consumer has processed ten of twelve acked records when the broker holding the "
    "partition loses its log folder; new records take offsets 0, 1, ... again, where the consumer ledger holds "
    "the lost records' marks; an at-most-once consumer is killed -9 after committing a record at such an offset: "
    "unprocessed and skipped for it, broker-lost for the lost records, and no reprocessed or "
    "processed-not-updated from the lost records' marks",
)
def disk_lost_consumed(world: World) -> Outcome:
    cluster = world.cluster
    world.make_topic(replication=1, min_insync_replicas="1")
    broker = cluster.partition(world.topic).leader
    producer_ledger, binding = probed_pipeline(world, OLD, OLD_CONSUMED)
    seen_before = cluster.read_topic(world.topic)
    world.reconcile()  # the auditor sees the old records

    # The fault: the broker holding the partition's only replica loses its log folder (a disk
    # replaced); the partition starts over empty at offset 0 under the same topic id.
    cluster.lose_disk(broker, world.topic, 0)
    injected_at = time.monotonic()
    # The pipeline goes on. Its consumer's committed offset lies past the new log end, so it
    # starts again at the log start (auto.offset.reset=earliest) and processes the first new
    # records; later ones once the first is old enough that nothing after it can be taken for
    # a lost record's, give or take the reconciliation's grace and the diagnosis's clock slack.
    crashed = go_on_at_reused_offsets(world, producer_ledger, binding.grace_seconds, NEW_FIRST, NEW_LATER, CRASH_AT)

    # Ground truth: the probed producer's delivery reports (all acked), reads of the topic
    # before and after the fault, the table, the application's own log of what it processed
    # and the group's commit.
    final = cluster.read_topic(world.topic)
    rows, processed, committed, position = consumer_truth(world, OLD, OLD_CONSUMED)
    expected = truth.producer_side(OLD, final, seen_before=seen_before, probed_acked=[str(t) for t in OLD])
    for ticket in OLD[OLD_CONSUMED:]:  # acked at an offset another record holds now, never processed
        expected[str(ticket)].add("stuck:broker-lost")
    consumer_side = truth.probed_consumer_side(NEW_FIRST + NEW_LATER, rows, processed, committed, position)
    skipped = [key for key, v in consumer_side.items() if "unprocessed" in v]
    if not skipped:
        raise LabError(f"the fault did not happen: no record skipped (consumer exit {crashed}, committed {committed})")
    if any(position[key] >= OLD_CONSUMED for key in skipped):
        raise LabError(f"the skipped record is not at an offset the lost records' marks cover: {skipped}, {position}")
    expected |= consumer_side | world.expected_group_risks()
    world.notes.append(f"consumer exit {crashed}; committed {committed}; skipped {skipped}")
    found = world.reconcile()
    stuck = world.stuck()
    warnings = found.detail.get("warnings")
    world.notes += [str(w) for w in warnings][:3] if isinstance(warnings, list) else []
    expected, unjudged = truth.died_with_its_marks(expected)
    return Outcome(
        injected=f"RF=1: broker {broker} lost the partition's log with tickets {OLD[OLD_CONSUMED:]} unread; new "
        f"records at the lost offsets; at-most-once consumer killed -9 after committing record {CRASH_AT} of the "
        "later ones",
        expected=expected,
        optional=unjudged,
        got=merge(found.verdicts, stuck.verdicts),
        detect_s=max(found.finished_monotonic, stuck.finished_monotonic) - injected_at,
    )
