"""The auditor's first look at a pipeline that has run for a while: retention already took the
oldest records and, from the ledgers, their entries and processed marks (seed 003's retention
applied to the probes' own topics)."""

from __future__ import annotations

import time

from auditor.lab import truth
from auditor.lab.cluster import LabError
from auditor.lab.compare import Outcome, merge
from auditor.lab.registry import scenario
from auditor.lab.workload import produce
from auditor.lab.world import STUCK_AGE_S, World
from auditor.probes import AuditedProducer
from auditor.stuck.verdict_outcomes import COMPLETENESS_SLACK_MS

OLD = list(range(1, 11))  # produced and processed before the auditor looked
GONE = 5  # the first five of them are deleted from the topic too
NEW_FIRST, NEW_LATER = list(range(11, 16)), list(range(16, 31))
CRASH_AT = 3  # the third record of NEW_LATER: committed, then the consumer is killed -9


@scenario(
    "ledgers-deleted-unread",
    "the auditor starts on a running probed pipeline after retention (delete_records) took the topic's five "
    "oldest records and every ledger entry and processed mark of the ten old ones; then an at-most-once "
    "consumer is killed -9 after a commit: unprocessed and skipped for that record only, never for a "
    "record whose mark is gone, and no never-sent for the deleted sequence numbers",
)
def ledgers_deleted_unread(world: World) -> Outcome:
    cluster = world.cluster
    world.make_topic(replication=3, min_insync_replicas="2")
    producer_ledger, consumer_ledger = world.make_ledgers()
    world.make_table()
    binding = world.make_binding(groups=[world.group])
    world.make_rule(older_than_s=1)
    # One producer session throughout, as a long-lived application's: the deleted sequence
    # numbers are the first ones of a session whose later ones stay.
    producer = AuditedProducer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0},
        delivery_reports="all",
        ledger_topic=producer_ledger,
    )
    try:
        world.insert(OLD, age_s=STUCK_AGE_S)
        old = truth.all_sent(produce(cluster.bootstrap, world.topic, OLD, producer=producer))
        world.consume("at-least-once", probed=True, records=len(OLD))
        # The fault: retention reached the old segments (one broker request per topic).
        offsets = {int(d.key): d.offset for d in old}
        cluster.delete_records(world.topic, {0: offsets[OLD[GONE]]})
        for ledger in (producer_ledger, consumer_ledger):
            cluster.delete_records(ledger, {p: high for p, (_, high) in cluster.watermarks(ledger).items()})
        marks = {t: cluster.watermarks(t) for t in (world.topic, producer_ledger, consumer_ledger)}
        if any(low != high for low, high in (*marks[producer_ledger].values(), *marks[consumer_ledger].values())):
            raise LabError(f"the ledgers still hold records after delete_records: {marks}")
        if marks[world.topic][0][0] != offsets[OLD[GONE]]:
            raise LabError(f"the topic's log start is not the sixth old record's offset: {marks[world.topic]}")
        # The pipeline goes on: new marks first, then, past the binding's grace, a crash.
        world.insert(NEW_FIRST + NEW_LATER)
        truth.all_sent(produce(cluster.bootstrap, world.topic, NEW_FIRST, producer=producer))
        world.consume("at-least-once", probed=True, records=len(NEW_FIRST))
        # Past the binding's grace, and past the clock margin after the consumer ledger's new
        # edge (its first record since the deletion): a record stamped within that margin of
        # the edge may have been marked before it, on a consumer clock behind the producer's,
        # and the diagnosis rightly calls it unknown rather than skipped.
        time.sleep(max(binding.grace_seconds, COMPLETENESS_SLACK_MS / 1000) + 1.0)
        truth.all_sent(produce(cluster.bootstrap, world.topic, NEW_LATER, producer=producer))
    finally:
        producer.close(30)
    crashed = world.consume("at-most-once", crash_at=CRASH_AT, probed=True)
    injected_at = time.monotonic()
    # Back: goes on after the committed offset, once the group's session of the killed member
    # (6 s) has ended.
    world.consume("at-most-once", probed=True, idle_s=30, records=len(NEW_LATER) - CRASH_AT)
    # Ground truth: the table, the application's own log of what it processed, the group's
    # commit and a plain read of the topic.
    rows, processed = world.rows(), world.processed()
    committed = cluster.committed(world.group, world.topic).get(0, -1)
    position = {r.key: r.offset for r in cluster.read_topic(world.topic)}
    expected = truth.probed_consumer_side(NEW_FIRST + NEW_LATER, rows, processed, committed, position)
    if not any("unprocessed" in v for v in expected.values()):
        raise LabError(f"the fault did not happen: no record skipped (consumer exit {crashed}, committed {committed})")
    if any(rows[t] == "NEW" for t in OLD) or any(not processed.get(t) for t in OLD):
        raise LabError("an old ticket was not processed before the deletion")
    expected |= world.expected_group_risks()
    world.notes.append(
        f"consumer exit {crashed}; committed {committed}; log starts {marks}; truth {sorted(expected.items())[:4]}"
    )
    found = world.reconcile()
    stuck = world.stuck()
    warnings = found.detail.get("warnings")
    world.notes += [str(w) for w in warnings][:3] if isinstance(warnings, list) else []
    expected, unjudged = truth.died_with_its_marks(expected)
    return Outcome(
        injected=f"delete_records: topic offsets < {offsets[OLD[GONE]]}, both ledgers entirely (the old tickets' "
        f"entries and marks); at-most-once consumer killed -9 after committing record {CRASH_AT} of the later ones",
        expected=expected,
        optional=unjudged,
        got=merge(found.verdicts, stuck.verdicts),
        detect_s=max(found.finished_monotonic, stuck.finished_monotonic) - injected_at,
    )
