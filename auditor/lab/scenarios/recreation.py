"""An operator deletes a topic and creates it again under its name, while its pipeline runs:
the broker lost nothing, and the new topic's records take the old one's offsets again."""

from __future__ import annotations

import time

from confluent_kafka import KafkaException

from auditor.lab import truth
from auditor.lab.cluster import LabError, wait_until
from auditor.lab.compare import Outcome, merge
from auditor.lab.registry import scenario
from auditor.lab.workload import produce
from auditor.lab.world import STUCK_AGE_S, World
from auditor.pipelines.models import Binding
from auditor.probes import AuditedProducer
from auditor.stuck.verdict_outcomes import COMPLETENESS_SLACK_MS

OLD = list(range(1, 11))  # produced into the first topic
OLD_CONSUMED = 7  # the consumer processes the first seven; three are still unread when it goes
NEW_FIRST, NEW_LATER = list(range(11, 16)), list(range(16, 31))
CRASH_AT = 3  # the third record of NEW_LATER: committed, then the consumer is killed -9


@scenario(
    "topic-recreated",
    "a reconciliation run sees a probed pipeline's topic; then the topic is deleted with three records unread "
    "and created again, and the pipeline goes on into the new one, whose records take offsets its consumer had "
    "marked processed; an at-most-once consumer is killed -9 after a commit: unprocessed and skipped for that "
    "record only, and no broker-lost, missing, reprocessed or processed-not-updated for what the old topic held",
)
def topic_recreated(world: World) -> Outcome:
    cluster = world.cluster
    world.make_topic(replication=3, min_insync_replicas="2")
    producer_ledger, binding = probed_pipeline(world, OLD, OLD_CONSUMED)
    world.reconcile()  # the auditor sees the first topic (and its id)

    # The fault: the topic is deleted and created again, as kafka-topics.sh --delete / --create do.
    cluster.delete_topic(world.topic)
    wait_until(lambda: world.topic not in cluster.admin.list_topics(timeout=10).topics, 60, "the topic to go")

    def created() -> bool:
        try:
            cluster.create_topic(world.topic, 1, 3, {"min.insync.replicas": "2"})
            return True
        except KafkaException:  # the deletion still under way on a broker
            return False

    wait_until(created, 60, "the topic to be created again", interval=1.0)
    injected_at = time.monotonic()
    crashed = go_on_at_reused_offsets(world, producer_ledger, binding.grace_seconds, NEW_FIRST, NEW_LATER, CRASH_AT)
    rows, processed, committed, position = consumer_truth(world, OLD, OLD_CONSUMED)
    expected: dict[str, set[str]] = {}
    for ticket in OLD[OLD_CONSUMED:]:
        # deleted unread with the topic: nobody can tell now whether it was consumed
        expected[str(ticket)] = {"stuck:unknown"}
    expected |= truth.probed_consumer_side(NEW_FIRST + NEW_LATER, rows, processed, committed, position)
    if not any("unprocessed" in v for v in expected.values()):
        raise LabError(f"the fault did not happen: no record skipped (consumer exit {crashed}, committed {committed})")
    if min(position[str(t)] for t in NEW_FIRST) != 0:
        raise LabError(f"the new topic's records do not start at offset 0: {position}")
    expected |= world.expected_group_risks()
    world.notes.append(f"consumer exit {crashed}; committed {committed}; truth {sorted(expected.items())[:5]}")
    found = world.reconcile()
    stuck = world.stuck()
    warnings = found.detail.get("warnings")
    world.notes += [str(w) for w in warnings][:3] if isinstance(warnings, list) else []
    expected, unjudged = truth.died_with_its_marks(expected)
    return Outcome(
        injected=f"topic deleted and created again with tickets {OLD[OLD_CONSUMED:]} unread; at-most-once consumer "
        f"killed -9 after committing record {CRASH_AT} of the later ones",
        expected=expected,
        optional=unjudged,
        got=merge(found.verdicts, stuck.verdicts),
        detect_s=max(found.finished_monotonic, stuck.finished_monotonic) - injected_at,
    )


def produce_probed(world: World, ledger: str, tickets: list[int]) -> None:
    """A probed producer session of its own per batch (a session that spanned the deletion
    would see its sends to the deleted topic fail: that is not this scenario's fault)."""
    producer = AuditedProducer(
        {"bootstrap.servers": world.cluster.bootstrap, "acks": "all", "linger.ms": 0},
        delivery_reports="all",
        ledger_topic=ledger,
    )
    try:
        truth.all_sent(produce(world.cluster.bootstrap, world.topic, tickets, producer=producer))
    finally:
        producer.close(30)


def probed_pipeline(world: World, old: list[int], consumed: int) -> tuple[str, Binding]:
    """On the world's topic: ledgers, table, a binding naming the group, a stuck rule; `old`
    produced by a probed producer and the first `consumed` of them processed by a probed
    consumer. The producer ledger and the binding."""
    producer_ledger, _ = world.make_ledgers()
    world.make_table()
    binding = world.make_binding(groups=[world.group])
    world.make_rule(older_than_s=1)
    world.insert(old, age_s=STUCK_AGE_S)
    produce_probed(world, producer_ledger, old)
    world.consume("at-least-once", probed=True, records=consumed)
    return producer_ledger, binding


def go_on_at_reused_offsets(
    world: World, ledger: str, grace_s: float, first: list[int], later: list[int], crash_at: int
) -> int:
    """The pipeline goes on where new records took the old ones' offsets: `first` produced and
    processed (new marks at the old marks' offsets), then, once the first new record is old
    enough that nothing written after it can be taken for an old one (the reconciliation's
    grace and the diagnosis's clock slack), `later`, whose at-most-once consumer is killed -9
    after committing its `crash_at`-th record; the consumer's exit status."""
    world.insert(first + later)
    produce_probed(world, ledger, first)
    world.consume("at-least-once", probed=True, records=len(first))
    time.sleep(max(grace_s, COMPLETENESS_SLACK_MS / 1000) + 2.0)
    produce_probed(world, ledger, later)
    crashed = world.consume("at-most-once", crash_at=crash_at, probed=True)
    world.consume("at-most-once", probed=True, idle_s=30, records=len(later) - crash_at)
    return crashed


def consumer_truth(
    world: World, old: list[int], old_consumed: int
) -> tuple[dict[int, str], dict[int, int], int, dict[str | None, int]]:
    """Ground truth, without the auditor: the table, the application's own log of what it
    processed, the group's commit and a plain read of the topic (key → offset); a LabError
    unless the old tickets are gone from the topic and exactly the first `old_consumed` of
    them were processed."""
    rows, processed = world.rows(), world.processed()
    committed = world.cluster.committed(world.group, world.topic).get(0, -1)
    position = {r.key: r.offset for r in world.cluster.read_topic(world.topic)}
    if any(str(t) in position for t in old):
        raise LabError("an old ticket's record is still in the topic")
    if sorted(t for t in old if processed.get(t)) != old[:old_consumed]:
        raise LabError(f"the old tickets processed are not the first {old_consumed}: {sorted(processed)}")
    return rows, processed, committed, position
