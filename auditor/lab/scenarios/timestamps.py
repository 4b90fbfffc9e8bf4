"""Record timestamps that do not follow the log: a replay (a mirror catching up, a job
re-sending old events with their original times) writes records stamped an hour ago into a
topic that live producers write too, and retention then deletes live records no group read.

Every bound the auditor draws from "the oldest record still in the log" assumes timestamps
grow with offsets (CreateTime within a small slack). Here the oldest remaining record is a
replayed one, stamped long before the deleted live records were written: taken at its word,
the topic "still holds everything since an hour ago", and the rows of the deleted records
read as never produced."""

from __future__ import annotations

import time

from confluent_kafka import Producer

from auditor.lab import truth
from auditor.lab.cluster import LabError
from auditor.lab.compare import Outcome, merge
from auditor.lab.registry import scenario
from auditor.lab.workload import produce
from auditor.lab.world import STUCK_AGE_S, World
from auditor.probes import AuditedProducer

FIRST, LATER = list(range(1, 6)), list(range(6, 16))
REPLAYED = list(range(1001, 1006))  # events of another system, not rows of the table
FILLER = 0  # no row has id 0
REPLAY_AGE_S = 3600


@scenario(
    "replayed-timestamps-past-retention",
    "a run reads the first records; ten live records follow, then replayed ones stamped an hour ago; "
    "retention (delete_records) takes the live ten unread: not missing, not never-produced (plain clients: "
    "unknown)",
)
def replayed_past_retention(world: World) -> Outcome:
    return _replayed(world, probed=False)


@scenario(
    "replayed-timestamps-past-retention-probed",
    "as replayed-timestamps-past-retention, the live records sent by an AuditedProducer and read by an "
    "AuditedConsumer: its ledger says they were acked, not where, so never broker-lost (unknown)",
)
def replayed_past_retention_probed(world: World) -> Outcome:
    return _replayed(world, probed=True)


@scenario(
    "replayed-timestamps-in-added-partition",
    "as replayed-timestamps-past-retention, but the live, replayed and filler records go to a partition "
    "added after the first run read the topic: every record there was written after that read",
)
def replayed_in_added_partition(world: World) -> Outcome:
    return _replayed(world, probed=False, added=True)


def _replayed(world: World, probed: bool, added: bool = False) -> Outcome:
    """added: the topic gets a second partition after the first run, and everything after it
    goes there (`into`); else everything goes to its one partition."""
    cluster = world.cluster
    world.make_topic(replication=3, min_insync_replicas="2")
    world.make_table()
    binding = world.make_binding(groups=[world.group])
    world.make_rule(older_than_s=1)
    settings = {"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0}
    world.insert(FIRST, age_s=STUCK_AGE_S)
    live: AuditedProducer | Producer = (
        AuditedProducer(settings, delivery_reports="all") if probed else Producer(settings)
    )
    truth.all_sent(produce(cluster.bootstrap, world.topic, FIRST, producer=live))
    world.consume("at-least-once", probed=probed, records=len(FIRST))
    first = world.reconcile()  # everything is fine so far: any finding is a false alarm
    # The consumer is down from here on. Rows created after the first run, past the binding's grace.
    into = 0
    if added:
        cluster.add_partitions(world.topic, 2)  # an operator scales the topic out
        into = 1
        # A producer knows the partitions its topic had when it last asked (librdkafka asks
        # every 5 minutes): one made now sends to the new one.
        live.flush(30)
        live = Producer(settings)
    world.insert(LATER)
    time.sleep(binding.grace_seconds + 1.0)
    later = truth.all_sent(produce(cluster.bootstrap, world.topic, LATER, producer=live, partition=into))
    # The replay: records with the times of the events they carry, an hour old.
    replayer = Producer(settings)
    stamped = int(time.time() * 1000) - REPLAY_AGE_S * 1000
    replayed: list[tuple[int, int]] = []

    def delivered(err: object, msg: object) -> None:
        if err is None:
            replayed.append((msg.offset(), msg.timestamp()[1]))  # type: ignore[attr-defined]

    for i, event in enumerate(REPLAYED):
        replayer.produce(
            world.topic,
            key=str(event),
            value=f"event {event}",
            partition=into,
            timestamp=stamped + i,
            on_delivery=delivered,
        )
    if replayer.flush(30) or len(replayed) != len(REPLAYED):
        raise LabError(f"the replayed records were not all written: {replayed}")
    truth.all_sent(produce(cluster.bootstrap, world.topic, [FILLER], producer=live, partition=into))
    if isinstance(live, AuditedProducer):
        live.close(30)  # its ledger entries flushed
    injected_at = time.monotonic()
    # Retention reaches the segment of the live ten: the log starts at the first replayed record.
    start = min(offset for offset, _ in replayed)
    cluster.delete_records(world.topic, {into: start})
    low = cluster.watermarks(world.topic)[into][0]
    if low != start or any(d.offset >= start or d.partition != into for d in later):
        raise LabError(
            f"partition {into}'s log starts at {low}, not at the first replayed record {start}, or live records "
            f"are elsewhere: {[(d.partition, d.offset) for d in later]}"
        )
    remaining = cluster.read_topic(world.topic)
    first_left = next(r for r in remaining if r.partition == into)
    world.notes.append(
        f"live records at {into}@{[d.offset for d in later]}, deleted; log start {low}: {first_left.key}"
    )
    # Truth: the delivery reports say the ten were written; the read says they are gone; the
    # group never read them (its commit is below them). Plain clients leave nothing saying
    # they were written, and no run saw them: unknown, never missing or never-produced. A
    # probed producer's ledger says they were acked, but (contract v2: acked sequence ranges)
    # not at which offsets: below the log start (deleted) or past it and gone (lost by the
    # broker), only timestamps could tell, and the oldest record's is an hour before its
    # write: unknown too, never broker-lost. The records left whose key is no row (the
    # replayed events, the filler) are orphans.
    committed = cluster.committed(world.group, world.topic, partitions=into + 1).get(into, 0)
    if committed > min(d.offset for d in later):
        raise LabError(f"the group committed {committed}, past records it never read")
    rows = world.rows()
    expected: dict[str, set[str]] = {str(t): {"stuck:unknown"} for t in LATER if rows[t] == "NEW"}
    expected |= {key: {"orphan"} for key in truth.copies(remaining) if int(key) not in rows}
    expected |= world.expected_group_risks()
    second = world.reconcile()
    stuck = world.stuck()
    warnings = second.detail.get("warnings")
    world.notes += [str(w) for w in warnings][:2] if isinstance(warnings, list) else []
    world.notes += [f"{key}: {reason}" for key, reason in sorted(stuck.reasons.items())][:1]
    return Outcome(
        injected=f"{'AuditedProducer' if probed else 'plain producer'}; "
        f"{'partition 1 added after the first run; ' if added else ''}10 live records, then {len(REPLAYED)} "
        f"replayed ones stamped {REPLAY_AGE_S} s ago{' (all in partition 1)' if added else ''}; "
        "delete_records took the live ten unread",
        expected=expected,
        got=merge(first.verdicts, second.verdicts, stuck.verdicts),
        detect_s=max(second.finished_monotonic, stuck.finished_monotonic) - injected_at,
    )
