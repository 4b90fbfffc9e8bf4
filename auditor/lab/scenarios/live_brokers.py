"""The live family's broker faults: the cluster failing under the pipeline while tickets keep
coming and the auditor looks, where the deterministic scenarios (replication.py, availability.py)
stop the applications first. A partition's leader killed -9 and restarted; frozen (SIGSTOP) past
the controller's session timeout, fenced, and resumed as a zombie that finds it lost its
leaderships; and the loss acks=1 allows: the leader alone acks records while its followers are
frozen (still in sync: with two of the three KRaft voters frozen nothing can shrink the ISR), is
killed -9, and a follower is elected cleanly without them (Jepsen's Kafka analysis and Kafka's
own replication tests inject the same fault: the leader's log ahead of every in-sync replica when
it dies). The pipeline, the truth and the scoring are live.py's: what a full read of the topic
no longer holds of the producer's acked records, and whose rows stay NEW, is broker-lost
(probed) or unknown (plain); anything else but nothing is an alarm."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from auditor.lab.cluster import Cluster, LabError
from auditor.lab.compare import Outcome
from auditor.lab.registry import scenario
from auditor.lab.scenarios.live import (
    GRACE_S,
    PARTITIONS,
    SAFE_PRODUCER,
    Live,
    check_running,
    ledger_topics,
    run_live,
    wait_in_sync,
)
from auditor.lab.world import World
from spark_jobs import failover_hold
from spark_jobs.send_outcome import SEND_OUTCOME_MS
from spark_jobs.watermark_hold import CLOCK_MARGIN_MS, DEFAULT_REPLICA_LAG_MAX_MS, hold_ms

FAULTS = 3  # each scenario's rounds
# broker.session.timeout.ms (Kafka's default, the stack keeps it): a broker frozen this long is
# fenced by the controller, which elects new leaders for its partitions
SESSION_TIMEOUT_S = 9.0
# acks=1 without idempotence: a send retried across a failover may be written twice (a probed
# producer's copies carry one session and sequence: producer-retry)
ACKS1_PRODUCER = {**SAFE_PRODUCER, "acks": "1", "enable.idempotence": False}
# An acks=1 ack of a record the topic no longer holds is judged only once no follower still in
# sync can hold the high watermark below it (replication.py's _wait_out_held_acks): until then
# the auditor rightly says unknown. A probe ledgers its acks when it resolves them, at the latest
# when it closes, and the reader takes the ack to have come as late as that: the last look waits
# that long after the producer closed.
ACKS1_HOLD_S = (hold_ms(DEFAULT_REPLICA_LAG_MAX_MS) + CLOCK_MARGIN_MS) / 1000 + 1.0
# A row without a record created around a leader change is judged only once the send outcome
# bound has passed beyond its grace (spark_jobs.failover_hold): a plain pipeline's lost rows,
# with no ack or sighting to prove the loss, are `missing` only then. The bound is librdkafka's
# defaults' (the lab's producers retry for less), the grace live.py's.
FAILOVER_HOLD_S = (failover_hold.hold_ms(SEND_OUTCOME_MS) + failover_hold.CLOCK_MARGIN_MS) / 1000 + GRACE_S + 1.0
# What a round does to a partition's replicas (cluster, partition, leader, followers, rng);
# returns how it went, for the notes.
Fault = Callable[[Cluster, int, int, list[int], random.Random], str]


@scenario(
    "live-leader-kills",
    f"as live-traffic while a random partition's leader is killed -9 {FAULTS} times and started again once "
    "the new leader serves it (acks=all, idempotence): the producer retries across each failover, the "
    "auditor looks while the broker is down: nothing to report",
)
def live_leader_kills(world: World) -> Outcome:
    return run_live(world, probed=True, disrupt=_leader_kills)


@scenario(
    "live-leader-pauses",
    f"as live-traffic while a random partition's leader is frozen (SIGSTOP) past the controller's session "
    f"timeout {FAULTS} times, fenced and replaced, then resumed (SIGCONT): a zombie broker that finds it "
    "lost its leaderships; the auditor looks while it is frozen: nothing to report",
)
def live_leader_pauses(world: World) -> Outcome:
    return run_live(world, probed=True, disrupt=_leader_pauses)


@scenario(
    "live-acks1-failovers",
    f"as live-traffic with an acks=1 producer (no idempotence) while, {FAULTS} times, a random partition's "
    "followers are frozen (SIGSTOP, still in sync), its leader acks records alone, is killed -9, and a "
    "follower is elected cleanly without them: the acked records it lost are broker-lost, their copies "
    "written twice by retries producer-retry duplicates, nothing else",
)
def live_acks1_failovers(world: World) -> Outcome:
    return run_live(
        world,
        probed=True,
        disrupt=_acks1_failovers,
        producer_config=ACKS1_PRODUCER,
        last_look_after_s=ACKS1_HOLD_S,
        loses_acked=True,
    )


@scenario(
    "live-acks1-failovers-plain",
    "as live-acks1-failovers with a plain producer and consumer: the rows of the lost records are missing "
    "once the send outcome bound has passed beyond their grace (nothing proves them lost before: a failover "
    "may still be holding their sends), and their stuck verdict unknown (no ledger holds the acks), never "
    "never-produced",
)
def live_acks1_failovers_plain(world: World) -> Outcome:
    return run_live(
        world,
        probed=False,
        disrupt=_acks1_failovers,
        producer_config=ACKS1_PRODUCER,
        last_look_after_s=FAILOVER_HOLD_S,
        loses_acked=True,
    )


def _leader_kills(live: Live) -> tuple[str, list[str]]:
    def kill(cluster: Cluster, partition: int, leader: int, followers: list[int], rng: random.Random) -> str:
        cluster.broker("kill", leader)
        return "killed -9"

    return _rounds(live, kill, "the leader of a random partition killed -9")


def _leader_pauses(live: Live) -> tuple[str, list[str]]:
    def pause(cluster: Cluster, partition: int, leader: int, followers: list[int], rng: random.Random) -> str:
        frozen_s = SESSION_TIMEOUT_S + rng.uniform(2.0, 6.0)
        frozen_at = time.monotonic()
        cluster.broker("pause", leader)
        try:
            # No metadata read while it is frozen: a client may send it to the frozen broker and
            # wait out its timeout (lab run #16). Past the session timeout the controller has
            # fenced it and another replica leads (_rounds checks once it is resumed).
            time.sleep(frozen_s)
            live.look()  # while the zombie is frozen: reads that reach it must say unknown, not missing
        finally:
            cluster.broker("resume", leader)
        frozen_s = time.monotonic() - frozen_at
        return f"frozen ~{frozen_s:.0f} s"

    return _rounds(live, pause, "the leader of a random partition frozen past the session timeout", restart=False)


def _acks1_failovers(live: Live) -> tuple[str, list[str]]:
    def failover(cluster: Cluster, partition: int, leader: int, followers: list[int], rng: random.Random) -> str:
        alone_s = rng.uniform(1.0, 2.5)
        for follower in followers:
            cluster.broker("pause", follower)
        try:
            # The followers' last fetch requests may still wait at the leader (replica.fetch.wait.max.ms,
            # 500 ms); once they expired, the leader alone holds and acks what it appends.
            time.sleep(1.0 + alone_s)
            cluster.broker("kill", leader)
        finally:
            for follower in followers:
                cluster.broker("resume", follower)
        return f"followers {followers} frozen, the leader alone for ~{alone_s:.1f} s, then killed -9"

    return _rounds(live, failover, "a random partition's followers frozen and its leader killed -9")


def _rounds(live: Live, fault: Fault, what: str, restart: bool = True) -> tuple[str, list[str]]:
    """FAULTS times, a few seconds apart: `fault` on a random partition's leader (and followers),
    then the new leader awaited, the auditor looking, the broker started again when `restart`,
    and every replica back in sync before the next round."""
    world, cluster = live.world, live.world.cluster
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    world.notes.append(f"faults seeded {seed}")  # kept when a round fails
    done = []
    for round_no in range(1, FAULTS + 1):
        time.sleep(rng.uniform(3.0, 6.0))
        check_running(live, f"before fault {round_no}")
        partition = rng.randrange(PARTITIONS)
        view = cluster.partition(world.topic, partition)
        if len(view.isr) < len(view.replicas):
            raise LabError(f"{world.topic}/{partition} is under-replicated before fault {round_no}: {view}")
        followers = [r for r in view.replicas if r != view.leader]
        started = time.monotonic()
        how = fault(cluster, partition, view.leader, followers, rng)
        new = cluster.wait_for_leader(world.topic, partition, other_than=view.leader, timeout=90)
        failed_over_s = time.monotonic() - started
        if restart:
            try:
                live.look()  # while the old leader is down
            finally:
                cluster.broker("start", view.leader)
        wait_in_sync(cluster, [world.topic, "__consumer_offsets", *ledger_topics(world)], timeout=180)
        done.append(f"{world.topic}/{partition}: broker {view.leader} {how}, {new} led it {failed_over_s:.1f} s later")
    return f"{what} {FAULTS} times, the auditor looking meanwhile", ["; ".join(done)]
