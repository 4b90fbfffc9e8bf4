"""A transactional producer killed mid-transaction (seed 003, KIP-98): the open transaction holds
read_committed readers at the last stable offset until the coordinator aborts it."""

from __future__ import annotations

import time

from auditor.lab.cluster import LabError, wait_until
from auditor.lab.compare import Outcome, merge
from auditor.lab.registry import scenario
from auditor.lab.workload import produce
from auditor.lab.world import STUCK_AGE_S, Verdicts, World
from auditor.probes import AuditedProducer
from auditor.stuck.risks import OPEN_TRANSACTION_WARN_MS

TICKETS, COMMITTED = 20, 10
# Long enough for the stuck diagnosis to call the open transaction a risk (it warns once a
# transaction has held the last stable offset for OPEN_TRANSACTION_WARN_MS), short enough for
# the coordinator to abort it within the scenario.
TIMEOUT_MS = OPEN_TRANSACTION_WARN_MS + 30_000


@scenario(
    "txn-producer-killed",
    "a transactional producer killed -9 with a transaction open: while it hangs, read_committed readers "
    "wait at the LSO (stuck waiting, an open-transaction risk); the coordinator aborts it after "
    "transaction.timeout.ms: aborted",
)
def txn_producer_killed(world: World) -> Outcome:
    return _txn_killed(world, probed=False)


@scenario(
    "txn-producer-killed-probed",
    "as txn-producer-killed with an AuditedProducer (transactional) and an AuditedConsumer",
)
def txn_producer_killed_probed(world: World) -> Outcome:
    return _txn_killed(world, probed=True)


def _txn_killed(world: World, probed: bool) -> Outcome:
    cluster = world.cluster
    world.make_topic(replication=3, min_insync_replicas="2")
    world.make_table()
    world.make_binding(groups=[world.group], guarantee="exactly-once")
    world.make_rule(older_than_s=1)
    tickets = list(range(1, TICKETS + 1))
    world.insert(tickets, age_s=STUCK_AGE_S)
    # The application: a read_committed consumer (librdkafka's default isolation) that stays up.
    world.start_consumer("at-least-once", probed=probed)
    world.run_worker(
        "transact",
        "--bootstrap", cluster.bootstrap, "--topic", world.topic, "--transactional-id", f"{world.name}-tx",
        "--tickets", str(TICKETS), "--commit", str(COMMITTED), "--transaction-timeout-ms", str(TIMEOUT_MS),
        *(["--probed"] if probed else []),
    )  # fmt: skip
    injected_at = time.monotonic()
    everything = {r.key for r in cluster.read_topic(world.topic) if r.key is not None}
    wait_until(lambda: len(world.processed()) >= COMMITTED, 120, "the consumer to process the committed transaction")

    # --- while the transaction is open ------------------------------------------------------
    time.sleep(max(0.0, OPEN_TRANSACTION_WARN_MS / 1000 + 2 - (time.monotonic() - injected_at)))
    try:  # a plain read_committed read stops at the open transaction's first record
        visible = {r.key for r in cluster.read_topic(world.topic, isolation="read_committed", timeout=8) if r.key}
    except LabError as exc:
        raise LabError(f"read_committed while the transaction is open: {exc}") from exc
    still_open = cluster.watermarks(world.topic)[0][1] < TICKETS + 2  # no abort marker yet
    rows = world.rows()
    held = {key for key in everything - visible if rows.get(int(key)) == "NEW"}
    world.notes.append(
        f"while open ({time.monotonic() - injected_at:.0f}s): read_committed got {len(visible)}, "
        f"read_uncommitted {len(everything)} records; transaction still open: {still_open}"
    )
    if not still_open:
        raise LabError("the coordinator ended the transaction before the diagnosis while open")
    # Truth: rows whose only record sits past the LSO wait; the partition's readers are held.
    while_open: Verdicts = {key: {"stuck:waiting"} for key in held}
    if held:
        while_open[f"risk {world.topic}/0"] = {"risk:open-transaction"}
    first = world.stuck()
    world.notes += [f"while open: {key}: {reason}" for key, reason in sorted(first.reasons.items())][:2]

    # --- after the coordinator's abort ------------------------------------------------------
    def aborted() -> bool:
        # 10 records, a commit marker, 10 records of the open transaction, then its abort marker.
        return cluster.watermarks(world.topic)[0][1] >= TICKETS + 2

    wait_until(aborted, TIMEOUT_MS / 1000 + 60, "the coordinator to abort the open transaction")
    committed = {r.key for r in cluster.read_topic(world.topic, isolation="read_committed")}
    gone = {str(i) for i in tickets} - committed
    rows = world.rows()
    # Ground truth from the two plain reads: a row whose key no read_committed reader gets has
    # no delivered record (missing); its record exists only in the aborted transaction (aborted).
    after = {key: {"missing", "aborted"} if key in everything else {"missing"} for key in gone}
    after_stuck = {key: {"stuck:aborted"} for key in gone if key in everything and rows.get(int(key)) == "NEW"}
    second = world.stuck()
    answer = world.reconcile(judged=True)
    return Outcome(
        injected=f"transactional producer killed -9 with {TICKETS - COMMITTED} records in an open transaction "
        f"(transaction.timeout.ms={TIMEOUT_MS})",
        expected=merge(while_open, after_stuck, after),
        got=merge(first.verdicts, second.verdicts, answer.verdicts),
        detect_s=first.finished_monotonic - injected_at,
    )


BEHIND = 20  # records a non-transactional producer writes behind the open transaction
# The open transaction must outlast the reconciliation run made while it holds the partition.
HELD_TIMEOUT_MS = 90_000


@scenario(
    "open-transaction-while-auditing",
    "a transactional producer killed -9 with a transaction open (one record); an AuditedProducer "
    f"(not transactional) then writes {BEHIND} acked records behind it, and a reconciliation runs while the "
    "transaction holds the last stable offset: none of them is missing or gap/broker-lost; after the "
    "coordinator's abort the open transaction's ticket is missing and aborted",
)
def open_transaction_while_auditing(world: World) -> Outcome:
    cluster = world.cluster
    world.make_topic(replication=3, min_insync_replicas="2")
    world.make_table()
    world.make_binding()
    tickets = list(range(1, BEHIND + 2))  # ticket 1: the open transaction's record
    world.insert(tickets, age_s=STUCK_AGE_S)
    world.run_worker(
        "transact",
        "--bootstrap", cluster.bootstrap, "--topic", world.topic, "--transactional-id", f"{world.name}-tx",
        "--tickets", "1", "--commit", "0", "--transaction-timeout-ms", str(HELD_TIMEOUT_MS),
    )  # fmt: skip
    injected_at = time.monotonic()
    probe = AuditedProducer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0}, delivery_reports="all"
    )
    reports = produce(cluster.bootstrap, world.topic, tickets[1:], producer=probe)
    probe.close(60)
    acked = {d.key for d in reports if d.error is None}
    if acked != {str(t) for t in tickets[1:]}:
        raise LabError(f"the probed producer's sends were not all acked: {sorted(set(map(str, tickets[1:])) - acked)}")
    everything = {r.key for r in cluster.read_topic(world.topic) if r.key is not None}
    visible = {r.key for r in cluster.read_topic(world.topic, isolation="read_committed", timeout=8) if r.key}
    world.notes.append(f"while open: read_uncommitted got {len(everything)} records, read_committed {len(visible)}")
    if visible or everything != {str(t) for t in tickets}:
        raise LabError(f"the open transaction did not hold the partition: visible {sorted(visible)}")

    while_open = world.reconcile()  # every acked record is in the log: nothing to report

    if cluster.watermarks(world.topic)[0][1] > len(tickets):  # an abort marker: it ended too soon
        raise LabError("the coordinator ended the transaction before the reconciliation while open ended")
    wait_until(
        lambda: cluster.watermarks(world.topic)[0][1] > len(tickets),
        HELD_TIMEOUT_MS / 1000 + 60,
        "the coordinator to abort the open transaction",
    )
    committed = {r.key for r in cluster.read_topic(world.topic, isolation="read_committed") if r.key}
    # Ground truth from the two plain reads: the open transaction's record was aborted, so its
    # row has no delivered record (missing) and its only record is aborted.
    expected = {key: {"missing", "aborted"} for key in everything - committed}
    after = world.reconcile(judged=True)
    return Outcome(
        injected=f"transactional producer killed -9 with a transaction open, {BEHIND} acked records written "
        f"behind it (transaction.timeout.ms={HELD_TIMEOUT_MS})",
        expected=expected,
        got=merge(while_open.verdicts, after.verdicts),
        detect_s=after.finished_monotonic - injected_at,
    )
