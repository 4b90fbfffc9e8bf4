"""A transactional producer killed mid-transaction (seed 003, KIP-98): the open transaction holds
read_committed readers at the last stable offset until the coordinator aborts it."""

from __future__ import annotations

import time

from auditor.lab.cluster import LabError, wait_until
from auditor.lab.compare import Outcome
from auditor.lab.registry import scenario
from auditor.lab.world import World

TICKETS, COMMITTED = 20, 10
TIMEOUT_MS = 10000


@scenario(
    "txn-producer-killed",
    "a transactional producer killed -9 with a transaction open: read_committed readers wait at the LSO, "
    "the coordinator aborts it after transaction.timeout.ms=10s: aborted",
)
def txn_producer_killed(world: World) -> Outcome:
    cluster = world.cluster
    world.make_topic(replication=3, min_insync_replicas="2")
    world.make_table()
    world.make_binding(guarantee="exactly-once")
    world.insert(list(range(1, TICKETS + 1)))
    world.run_worker(
        "transact",
        "--bootstrap", cluster.bootstrap, "--topic", world.topic, "--transactional-id", f"{world.name}-tx",
        "--tickets", str(TICKETS), "--commit", str(COMMITTED), "--transaction-timeout-ms", str(TIMEOUT_MS),
    )  # fmt: skip
    injected_at = time.monotonic()
    everything = {r.key for r in cluster.read_topic(world.topic)}
    try:  # while the transaction hangs, a read_committed read stops at its first record
        held = len(cluster.read_topic(world.topic, isolation="read_committed", timeout=8))
    except LabError as exc:
        held = -1
        world.notes.append(f"read_committed while open: {exc}")
    world.notes.append(f"while open: read_committed got {held}, read_uncommitted {len(everything)} records")

    def aborted() -> bool:
        # 10 records, a commit marker, 10 records of the open transaction, then its abort marker.
        return cluster.watermarks(world.topic)[0][1] >= TICKETS + 2

    wait_until(aborted, TIMEOUT_MS / 1000 + 60, "the coordinator to abort the open transaction")
    committed = {r.key for r in cluster.read_topic(world.topic, isolation="read_committed")}
    gone = {str(i) for i in range(1, TICKETS + 1)} - committed
    # Ground truth from the two plain reads: a row whose key no read_committed reader gets has
    # no delivered record (missing); its record exists only in the aborted transaction (aborted).
    expected = {key: {"missing", "aborted"} if key in everything else {"missing"} for key in gone}
    answer = world.reconcile()
    return Outcome(
        injected=f"transactional producer killed -9 with {TICKETS - COMMITTED} records in an open transaction "
        f"(transaction.timeout.ms={TIMEOUT_MS})",
        expected=expected,
        got=answer.verdicts,
        detect_s=answer.finished_monotonic - injected_at,
    )
