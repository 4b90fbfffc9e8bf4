"""A consumer down longer than retention (seed 003): records deleted before they were read."""

from __future__ import annotations

import time

from confluent_kafka import Producer

from auditor.lab import truth
from auditor.lab.cluster import LabError, wait_until
from auditor.lab.compare import Outcome, Verdicts, merge
from auditor.lab.registry import scenario
from auditor.lab.workload import produce
from auditor.lab.world import STUCK_AGE_S, World
from auditor.probes import AuditedProducer

FIRST, LATER = list(range(1, 6)), list(range(6, 16))
FILLER = 0  # no row has id 0: a record that only makes the segment holding the others roll


@scenario(
    "consumer-down-past-retention",
    "the consumer stops; retention.ms=4s deletes ten records before it comes back: expired (AuditedProducer)",
)
def expired(world: World) -> Outcome:
    return _expired(world, probed=True)


@scenario(
    "consumer-down-past-retention-plain",
    "as consumer-down-past-retention with plain clients: no ledger says they were ever written: unknown",
)
def expired_plain(world: World) -> Outcome:
    return _expired(world, probed=False)


@scenario(
    "consumer-down-past-retention-seen",
    "as consumer-down-past-retention-plain, but a reconciliation run read the ten records before retention "
    "deleted them: expired, from the auditor's memory",
)
def expired_seen(world: World) -> Outcome:
    return _expired(world, probed=False, seen=True)


@scenario(
    "consumer-down-past-retention-seen-secured",
    "as consumer-down-past-retention-seen, with the auditor reading the cluster (the group's committed "
    "offsets too) through its SASL_SSL listener",
)
def expired_seen_secured(world: World) -> Outcome:
    return _expired(world, probed=False, seen=True, secured=True)


def _expired(world: World, probed: bool, seen: bool = False, secured: bool = False) -> Outcome:
    cluster = world.cluster
    # With a run to read the records first, retention is lowered to 4 s only after it (the
    # records would otherwise go before spark-submit has started: retention rolls and deletes
    # the active segment too once all of it is older than retention.ms).
    world.make_topic(
        replication=3, min_insync_replicas="2", retention_ms="3600000" if seen else "4000", segment_ms="1000"
    )
    world.make_table()
    world.make_binding(groups=[world.group], secured=secured)
    world.make_rule(older_than_s=1)
    world.insert(FIRST + LATER, age_s=STUCK_AGE_S)
    settings = {"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0}
    producer: AuditedProducer | Producer = (
        AuditedProducer(settings, delivery_reports="all") if probed else Producer(settings)
    )
    produce(cluster.bootstrap, world.topic, FIRST, producer=producer)
    world.consume("at-least-once", probed=probed, records=len(FIRST))
    # The consumer is down from here on.
    injected_at = time.monotonic()
    reports = produce(cluster.bootstrap, world.topic, LATER, producer=producer)
    last = max(d.offset for d in reports)
    found: Verdicts = {}
    if seen:
        # Retention is still an hour: a run now reads all of them (a plain read checks they are
        # there), and only then is it lowered to 4 s.
        there = truth.copies(cluster.read_topic(world.topic))
        if not {str(i) for i in LATER} <= set(there):
            raise LabError(f"the later records are not all readable before the run: {sorted(there)}")
        found = world.reconcile().verdicts  # nothing is wrong yet: any finding is a false alarm
        cluster.set_topic_config(world.topic, {"retention.ms": "4000"})
    time.sleep(1.5)  # past segment.ms: the next append rolls the segment that holds LATER
    produce(cluster.bootstrap, world.topic, [FILLER], producer=producer)
    if isinstance(producer, AuditedProducer):
        producer.close(30)

    def deleted() -> bool:
        low = cluster.watermarks(world.topic)[0][0]
        return low > last

    wait_until(deleted, 90, f"retention to delete {world.topic} up to offset {last}")
    # Expired where the producer's ledger or a run saw a record before retention deleted it and
    # the group had not reached it (its committed offset while it was down is at or before it).
    committed = cluster.committed(world.group, world.topic, partitions=1).get(0, 0)
    if any(d.offset < committed for d in reports):
        raise LabError(f"the group committed {committed}, past records it should never have read")
    # While the group is down its committed offset lies below the log start: the topic's
    # retention deleted records the group never committed, the lint's T005 to say.
    lint = world.lint()
    # Back to an hour: at 4 s retention goes on deleting (the filler too, the active segment
    # once all of it is older) while the diagnosis reads, which then rightly cannot tell what
    # it read from what went under it and says unknown (lab run #20).
    cluster.set_topic_config(world.topic, {"retention.ms": "3600000"})
    if not seen:
        # back: only the filler is left, unless retention deleted it too (then it reads and commits
        # nothing, and its committed offset stays below the log start: expected_group_risks)
        world.consume("at-least-once", probed=probed, records=1, idle_s=10)
    # else diagnosed while the group is still down: once a plain consumer has committed past the
    # deleted records, nothing tells whether it read them before they went.
    rows = world.rows()
    never = {str(i) for i in LATER if rows[i] == "NEW"}
    verdict = "stuck:expired" if probed or seen else "stuck:unknown"
    expected: dict[str, set[str]] = {key: {verdict} for key in never}
    expected |= world.expected_group_risks()
    expected["lint topic"] = {"lint:retention.ms"}
    answer = world.stuck()
    world.notes += [f"{key}: {reason}" for key, reason in sorted(answer.reasons.items())][:3]
    return Outcome(
        injected="consumer stopped; retention.ms=4000 deleted 10 unread records"
        + ("; a run read them before" if seen else "; consumer restarted"),
        expected=expected,
        got=merge(found, answer.verdicts, lint.verdicts),
        detect_s=answer.finished_monotonic - injected_at,
    )
