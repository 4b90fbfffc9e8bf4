"""Log compaction (cleanup.policy=compact): the log cleaner removes a record once a later record
has the same record key. What it removes was delivered; its absence is not a loss.

The cleaner works on closed segments only, so each scenario closes the segment holding the
records to be removed (segment.ms=1000, then one more record) and waits until a plain read of
the topic shows them gone (the broker's cleaner wakes every log.cleaner.backoff.ms: 15 s by default, 2 s in the
native stack).
"""

from __future__ import annotations

import json
import time

from confluent_kafka import Producer

from auditor.lab.cluster import LabError, Record, wait_until
from auditor.lab.compare import Outcome, merge
from auditor.lab.registry import scenario
from auditor.lab.truth import acked
from auditor.lab.workload import Delivery, produce
from auditor.lab.world import STUCK_AGE_S, World
from auditor.probes import AuditedProducer

FILLER = 0  # no row has id 0: a record that only closes the segment before it


def _make_compacted_topic(world: World) -> None:
    world.make_topic(
        replication=3,
        cleanup_policy="compact",
        segment_ms="1000",
        min_cleanable_dirty_ratio="0.01",
        min_insync_replicas="2",
    )


def _set_up(world: World, record_key: str = "key") -> None:
    """A compacted topic, the ticket table, a binding (keyed by `record_key`) and a stuck rule."""
    _make_compacted_topic(world)
    world.make_table()
    world.make_binding(groups=[world.group], record_key=record_key)
    world.make_rule(older_than_s=1)


def _audited_producer(world: World) -> AuditedProducer:
    return AuditedProducer(
        {"bootstrap.servers": world.cluster.bootstrap, "acks": "all", "linger.ms": 0}, delivery_reports="all"
    )


def _close_segment_and_compact(world: World, producer: object, removed: set[tuple[int, int]], key: str) -> None:
    """One more record closes the active segment (past segment.ms); then wait for the cleaner to
    remove the records at `removed` (partition, offset)."""
    time.sleep(1.5)
    produce(world.cluster.bootstrap, world.topic, [FILLER], producer=producer, key=lambda _t: key)

    def cleaned() -> bool:
        left = {(r.partition, r.offset) for r in world.cluster.read_topic(world.topic)}
        return not (left & removed)

    wait_until(cleaned, 120, f"the log cleaner to compact {world.topic}")


def _ticket(record: Record) -> int | None:
    return None if not record.value else int(json.loads(record.value)["ticket_id"])


def _orphans(world: World, final: list[Record], key_of: str) -> dict[str, set[str]]:
    """The truth about records whose item has no row (the segment-closing filler): orphans. A
    tombstone (no value) is the deletion of its key's item, no record of one."""
    rows = world.rows()
    keys = {r.key if key_of == "key" else str(_ticket(r)) for r in final if r.value is not None}
    return {k: {"orphan"} for k in keys if k is not None and (not k.isdigit() or int(k) not in rows)}


def _score(world: World, injected: str, expected: dict[str, set[str]], injected_at: float) -> Outcome:
    """The auditor's answers (a reconciliation run, a stuck diagnosis, the lint) against the truth."""
    run = world.reconcile()
    answer = world.stuck()
    lint = world.lint()
    warnings = run.detail.get("warnings")
    world.notes += [str(w) for w in warnings][:2] if isinstance(warnings, list) else []
    world.notes += [f"{key}: {reason}" for key, reason in sorted(answer.reasons.items())][:1]
    return Outcome(
        injected=injected,
        expected=expected,
        got=merge(run.verdicts, answer.verdicts, lint.verdicts),
        detect_s=answer.finished_monotonic - injected_at,
    )


@scenario(
    "compacted-resend",
    "compacted topic keyed by ticket id, AuditedProducer: the application sends tickets 1-10, then 1-5 again; "
    "the cleaner removes the first five records (superseded by the later ones); nothing was lost",
)
def compacted_resend(world: World) -> Outcome:
    cluster = world.cluster
    _set_up(world)
    first, again = list(range(1, 11)), list(range(1, 6))
    world.insert(first, age_s=STUCK_AGE_S)
    producer = _audited_producer(world)
    reports: list[Delivery] = produce(cluster.bootstrap, world.topic, first, producer=producer)
    time.sleep(1.5)  # the re-sends start a segment of their own
    reports += produce(cluster.bootstrap, world.topic, again, producer=producer)
    injected_at = time.monotonic()
    superseded = {(d.partition, d.offset) for d in reports[: len(again)]}
    _close_segment_and_compact(world, producer, superseded, "filler")
    producer.close(30)
    final = cluster.read_topic(world.topic)
    keys = sorted(int(r.key) for r in final if r.key and r.key != "filler")
    if keys != first:
        raise LabError(f"after compaction the topic should hold each ticket once, it holds {keys}")
    world.consume("at-least-once", probed=True, records=len(final))
    rows = world.rows()
    # The truth: every acked send's key is in the topic once, the consumer processed each ticket.
    expected: dict[str, set[str]] = {str(t): {"stuck:unknown"} for t in first if rows[t] == "NEW"}
    expected |= _orphans(world, final, "key") | world.expected_group_risks()
    world.notes.append(
        f"acked {len(acked(reports))} sends of {len(first)} tickets; compaction removed offsets "
        f"{sorted(o for _p, o in superseded)}"
    )
    # keyed by the item itself, compaction only removes superseded copies: no lint error
    return _score(
        world,
        "compacted topic: tickets 1-10 sent, 1-5 sent again, the cleaner removed the first 1-5",
        expected,
        injected_at,
    )


@scenario(
    "compacted-shared-key-plain",
    "compacted topic whose record key is the customer (three customers), binding key json:$.ticket_id, plain "
    "clients: the cleaner keeps each customer's last ticket only; the six others were delivered, then compacted "
    "away before the consumer or the auditor read them: not never-produced, not missing",
)
def compacted_shared_key(world: World) -> Outcome:
    return _shared_key(world, seen_first=False)


@scenario(
    "compacted-shared-key-seen",
    "as compacted-shared-key-plain with AuditedConsumer and a reconciliation run between the first six tickets and "
    "the rest: the key index saw the records the cleaner removes later (and the run's last one): not broker-lost, "
    "not waiting at or skipped past an offset that holds nothing any more",
)
def compacted_shared_key_seen(world: World) -> Outcome:
    return _shared_key(world, seen_first=True)


def _shared_key(world: World, seen_first: bool) -> Outcome:
    """seen_first: a run reads the first six records before compaction, and the consumer is
    probed (a probed group that committed past a position the index still names would be
    called skipped)."""
    cluster = world.cluster
    _set_up(world, record_key="json:$.ticket_id")
    first, later = list(range(1, 7)), list(range(7, 10))
    world.insert(first + later, age_s=STUCK_AGE_S)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})

    def customer(ticket: int) -> str:
        return f"customer-{ticket % 3}"

    reports = produce(cluster.bootstrap, world.topic, first, producer=producer, key=customer)
    if seen_first:
        # the auditor's schedule: a run reads tickets 1-6 (its last record, ticket 6, is removed later)
        # (the later tickets' rows are missing then: their records are not written yet)
        seen = world.reconcile()
        wrong = {k: v for k, v in seen.verdicts.items() if k in {str(t) for t in first}}
        if wrong:
            raise LabError(f"the run before compaction should find nothing about tickets {first}, it found {wrong}")
    time.sleep(1.5)  # the later tickets in a segment of their own
    reports += produce(cluster.bootstrap, world.topic, later, producer=producer, key=customer)
    injected_at = time.monotonic()
    superseded = {(d.partition, d.offset) for d in reports if int(d.key) in first}
    _close_segment_and_compact(world, producer, superseded, "filler")
    final = cluster.read_topic(world.topic)
    gone = acked(reports) - {str(_ticket(r)) for r in final}
    if gone != {str(t) for t in first}:
        raise LabError(f"compaction should have removed tickets {first} (acked), a read shows {sorted(gone)} gone")
    world.consume("at-least-once", probed=seen_first, records=len(final))
    rows = world.rows()
    # The truth: each NEW row's record was acked (delivery report) and is gone from the topic
    # (a plain read), removed by the cleaner: it was produced (not never-produced, not
    # missing) and the broker did not lose it (not broker-lost). Whether the consumer could
    # have read it first cannot be seen from a plain consumer: unknown.
    expected: dict[str, set[str]] = {}
    for t in first + later:
        if rows[t] == "NEW":
            if str(t) not in gone:
                raise LabError(f"ticket {t} is in the topic and was not processed")
            expected[str(t)] = {"stuck:unknown"}
    expected |= _orphans(world, final, "json") | world.expected_group_risks()
    world.notes.append(f"acked {len(acked(reports))}, compacted away before the consumer ran: {sorted(gone, key=int)}")
    # the topic's setting that let the cleaner remove delivered items: the lint's T006
    expected["lint topic"] = {"lint:cleanup.policy"}
    return _score(
        world,
        "compacted topic keyed by customer: 9 tickets sent, the cleaner kept each customer's last"
        + (" (a run read the first six before)" if seen_first else ""),
        expected,
        injected_at,
    )


@scenario(
    "compacted-tombstones",
    "compacted topic keyed by ticket id, AuditedProducer: tickets 1-10 sent and read by a reconciliation run; the "
    "application then deletes tickets 3 and 4 and ticket 11 (created and deleted between two runs) and writes their "
    "tombstones; the cleaner removes their records. A tombstone is a deletion: no duplicate, no orphan",
)
def compacted_tombstones(world: World) -> Outcome:
    cluster = world.cluster
    _set_up(world)
    first, deleted, between = list(range(1, 11)), [3, 4], 11
    world.insert(first, age_s=STUCK_AGE_S)
    producer = _audited_producer(world)
    reports: list[Delivery] = produce(cluster.bootstrap, world.topic, first, producer=producer)
    # the auditor's schedule: a run reads tickets 1-10, each has its row
    seen = world.reconcile()
    wrong = {k: v for k, v in seen.verdicts.items() if k in {str(t) for t in first}}
    if wrong:
        raise LabError(f"the run before the deletions should find nothing about tickets {first}, it found {wrong}")
    world.insert([between], age_s=STUCK_AGE_S)
    reports += produce(cluster.bootstrap, world.topic, [between], producer=producer)
    time.sleep(1.5)  # the tombstones in a segment of their own
    world.delete([*deleted, between])
    tombstones = produce(cluster.bootstrap, world.topic, [*deleted, between], producer=producer, tombstones=True)
    injected_at = time.monotonic()
    removed = {(d.partition, d.offset) for d in reports if int(d.key) in {*deleted, between}}
    _close_segment_and_compact(world, producer, removed, "filler")
    producer.close(30)
    final = cluster.read_topic(world.topic)
    left = {r.key for r in final if r.value is None}
    if left != {str(t) for t in (*deleted, between)} or any(d.error for d in tombstones):
        raise LabError(f"the topic should hold the tombstones of {[*deleted, between]}, it holds tombstones {left}")
    world.consume("at-least-once", probed=True, records=len(final))
    rows = world.rows()
    # The truth: every row left was acked (delivery reports) and is in the topic once (a plain
    # read); the deleted tickets have no row and a tombstone, their records were delivered.
    expected: dict[str, set[str]] = {}
    for t, status in rows.items():
        if status == "NEW":
            raise LabError(f"ticket {t} is in the topic and was not processed")
    expected |= _orphans(world, final, "key") | world.expected_group_risks()
    world.notes.append(
        f"acked {len(acked(reports))} sends of {len(first) + 1} tickets, tombstones for {[*deleted, between]}; "
        f"compaction removed offsets {sorted(o for _p, o in removed)}"
    )
    return _score(
        world,
        "compacted topic: tickets 3, 4 and 11 deleted (rows and tombstones), the cleaner removed their records",
        expected,
        injected_at,
    )


@scenario(
    "compacted-tombstones-unread",
    "compacted topic keyed by ticket id, delete.retention.ms=0, plain producer: tickets 1-6 sent; the application "
    "deletes tickets 2 and 3 with tombstones (soft deletes: ticket 2's row marked DELETED, ticket 3's left NEW), and "
    "the cleaner removes their records and tombstones before the auditor's first run: produced, so neither missing "
    "nor never-produced",
)
def compacted_tombstones_unread(world: World) -> Outcome:
    cluster = world.cluster
    world.make_topic(
        replication=3,
        cleanup_policy="compact",
        segment_ms="1000",
        min_cleanable_dirty_ratio="0.01",
        min_insync_replicas="2",
        delete_retention_ms="0",
    )
    world.make_table()
    world.make_binding(groups=[world.group], record_key="key")
    world.make_rule(older_than_s=1)
    tickets, deleted = list(range(1, 7)), [2, 3]
    world.insert(tickets, age_s=STUCK_AGE_S)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})
    reports: list[Delivery] = produce(cluster.bootstrap, world.topic, tickets, producer=producer)
    time.sleep(1.5)  # the tombstones in a segment of their own
    world.set_status([2], "DELETED")
    tombstones = produce(cluster.bootstrap, world.topic, deleted, producer=producer, tombstones=True)
    injected_at = time.monotonic()

    def cleaned() -> bool:
        # a tombstone of no item (ticket 0) closes the segment and dirties the log again: the
        # cleaner removes the records on one pass, the tombstones (delete.retention.ms=0) on a later one
        time.sleep(1.1)
        produce(cluster.bootstrap, world.topic, [FILLER], producer=producer, tombstones=True)
        return not any(r.key in {str(t) for t in deleted} for r in cluster.read_topic(world.topic))

    wait_until(cleaned, 180, f"the log cleaner to remove the records and tombstones of {deleted} from {world.topic}")
    producer.flush(30)
    final = cluster.read_topic(world.topic)
    if acked(reports) != {str(t) for t in tickets} or acked(tombstones) != {str(t) for t in deleted}:
        raise LabError(
            f"every record and tombstone should be acked: records {sorted(acked(reports))}, "
            f"tombstones {sorted(acked(tombstones))}"
        )
    world.consume("at-least-once", probed=True, records=len(final))
    rows = world.rows()
    # The truth: every ticket was acked (delivery reports); a plain read holds no trace of 2 and
    # 3 any more. Ticket 3's row is NEW: produced and deleted, never consumed. No one can tell
    # that from the topic now, so the auditor must not say missing or never-produced: unknown.
    expected: dict[str, set[str]] = {}
    for t, status in rows.items():
        if status == "NEW" and t != 3:
            raise LabError(f"ticket {t} is in the topic and was not processed")
    if rows.get(3) == "NEW":
        expected["3"] = {"stuck:unknown"}
    expected |= _orphans(world, final, "key") | world.expected_group_risks()
    world.notes.append(
        f"acked {len(acked(reports))} sends and {len(acked(tombstones))} tombstones; the cleaner removed the records "
        f"and tombstones of {deleted} before any run"
    )
    return _score(
        world,
        "compacted topic: tickets 2 and 3 deleted with tombstones (rows kept), both removed by the cleaner unread",
        expected,
        injected_at,
    )
