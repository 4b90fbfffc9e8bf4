"""Sends that never reach the log (seeds 001 and 003): every replica down, and fire-and-forget
(acks=0) sends to a leader that is killed; and the application's own re-send after an error."""

from __future__ import annotations

import time

from confluent_kafka import Producer

from auditor.lab import truth
from auditor.lab.cluster import wait_until
from auditor.lab.compare import Outcome, merge
from auditor.lab.registry import scenario
from auditor.lab.workload import Delivery, produce
from auditor.lab.world import STUCK_AGE_S, World
from auditor.probes import AuditedProducer

TICKETS = list(range(1, 31))
SHORT_TIMEOUT = {"message.timeout.ms": 5000, "request.timeout.ms": 2000, "linger.ms": 0}


def _absent(world: World, reports: list[Delivery]) -> set[str]:
    """Tickets the application sent that the topic does not hold (a plain full read)."""
    present = set(truth.copies(world.cluster.read_topic(world.topic)))
    return {d.key for d in reports} - present


@scenario(
    "replicas-down",
    "every replica of the partition killed -9 while the producer sends (message.timeout.ms=5s), then "
    "restarted: the sends failed: produce-failed (AuditedProducer)",
)
def replicas_down(world: World) -> Outcome:
    return _replicas_down(world, probed=True)


@scenario(
    "replicas-down-plain",
    "as replicas-down with a plain producer: the rows have no record: missing",
)
def replicas_down_plain(world: World) -> Outcome:
    return _replicas_down(world, probed=False)


def _replicas_down(world: World, probed: bool) -> Outcome:
    cluster = world.cluster
    world.make_topic(replication=1, min_insync_replicas="1")  # one replica: "all replicas" is one broker
    world.make_table()
    world.make_binding(groups=[world.group])
    world.make_rule(older_than_s=1)
    world.insert(TICKETS, age_s=STUCK_AGE_S)
    settings = {"bootstrap.servers": cluster.bootstrap, "acks": "all", **SHORT_TIMEOUT}
    producer: AuditedProducer | Producer = (
        AuditedProducer(settings, delivery_reports="all") if probed else Producer(settings)
    )
    reports = produce(cluster.bootstrap, world.topic, TICKETS[:10], producer=producer)
    only = cluster.partition(world.topic).leader
    cluster.broker("kill", only)
    injected_at = time.monotonic()
    try:
        produce(cluster.bootstrap, world.topic, TICKETS[10:20], producer=producer, flush_s=30, reports=reports)
    finally:
        cluster.broker("start", only)
    cluster.wait_for_leader(world.topic)
    produce(cluster.bootstrap, world.topic, TICKETS[20:], producer=producer, flush_s=60, reports=reports)
    if isinstance(producer, AuditedProducer):
        producer.close(60)
    failed = truth.failed(reports) & _absent(world, reports)
    world.notes.append(f"sends that failed and are absent: {sorted(failed, key=int)}")
    # The application processes what reached the topic; only the failed tickets stay NEW.
    world.consume("at-least-once", probed=probed, records=len(TICKETS) - len(failed), idle_s=15)
    # The rows have no record (missing); a probed producer's ledger also holds each failure
    # report, so the hole in its sequence is a failed send and the stuck item produce-failed.
    expected = {
        key: {"missing", "gap/send-failed", "stuck:produce-failed"} if probed else {"missing"} for key in failed
    }
    got: list[dict[str, set[str]]] = []
    if probed:
        expected |= world.expected_group_risks()
        stuck = world.stuck()
        world.notes += [f"{key}: {reason}" for key, reason in sorted(stuck.reasons.items())][:3]
        got.append(stuck.verdicts)
    answer = world.reconcile()
    return Outcome(
        injected=f"the only replica (broker {only}) killed -9 for 10 sends (message.timeout.ms=5000), restarted",
        expected=expected,
        got=merge(*got, answer.verdicts),
        detect_s=answer.finished_monotonic - injected_at,
    )


@scenario(
    "acks0-leader-killed",
    "acks=0 (fire-and-forget) while the leader is killed -9: sends the client called successful may never "
    "reach the log; the ledger says unconfirmed, the auditor says produce-failed (AuditedProducer)",
)
def acks0_leader_killed(world: World) -> Outcome:
    return _acks0(world, probed=True)


@scenario(
    "acks0-leader-killed-plain",
    "as acks0-leader-killed with a plain producer: the rows whose record never reached the log: missing",
)
def acks0_leader_killed_plain(world: World) -> Outcome:
    return _acks0(world, probed=False)


def _acks0(world: World, probed: bool) -> Outcome:
    cluster = world.cluster
    world.make_topic(replication=3, min_insync_replicas="2")
    world.make_table()
    world.make_binding(groups=[world.group])
    world.make_rule(older_than_s=1)
    tickets = list(range(1, 201))
    world.insert(tickets, age_s=STUCK_AGE_S)
    settings = {"bootstrap.servers": cluster.bootstrap, "acks": "0", "linger.ms": 0, "message.timeout.ms": 10000}
    producer: AuditedProducer | Producer = (
        AuditedProducer(settings, delivery_reports="all") if probed else Producer(settings)
    )
    reports: list[Delivery] = []
    leader = cluster.partition(world.topic).leader
    injected_at = 0.0
    for ticket in tickets:
        produce(cluster.bootstrap, world.topic, [ticket], producer=producer, flush_s=0, reports=reports)
        if ticket == 100:
            cluster.broker("kill", leader)
            injected_at = time.monotonic()
        time.sleep(0.005)
    producer.flush(30)
    if isinstance(producer, AuditedProducer):
        producer.close(60)
    cluster.broker("start", leader)
    dropped = _absent(world, reports)
    world.notes.append(
        f"{len(reports)} delivery reports, {len(truth.failed(reports))} with an error; absent: "
        f"{sorted(dropped, key=int)[:20]}"
    )
    world.consume("at-least-once", probed=probed, records=len(tickets) - len(dropped), idle_s=15)
    rows = world.rows()
    lost = {key for key in dropped if rows.get(int(key)) == "NEW"}
    # The setting that lets a send vanish with no error: acks=0 (the lint's job to say so).
    lint_truth = {"lint producer": {"lint:acks"}}
    expected = {key: {"missing"} for key in lost}
    got: list[dict[str, set[str]]] = []
    if probed:
        # The producer's own report of each lost send: an error (send-failed), or success with
        # no offset, which is all acks=0 ever gets. The broker never answers such a send, so for
        # a message timeout after it (SEND_OUTCOME_MS) it may still be written: not judged yet.
        # Nor is its row: reconciliation leaves a row whose send is not judged yet to a later
        # run (stop 78: a record still on its way is not missing), so `missing` waits too.
        report = {d.key: d for d in reports}
        for key in lost:
            if report[key].error is not None:
                expected[key] |= {"gap/send-failed", "stuck:produce-failed"}
            else:
                expected[key] = {"stuck:unknown"}
        expected |= world.expected_group_risks()
        stuck = world.stuck()
        world.notes += [f"{key}: {reason}" for key, reason in sorted(stuck.reasons.items())][:3]
        got.append(stuck.verdicts)
    answer = world.reconcile()
    lint = world.lint(producer=settings)
    return Outcome(
        injected=f"acks=0, leader {leader} killed -9 after 100 of 200 sends",
        expected=merge(expected, lint_truth),
        got=merge(*got, answer.verdicts, lint.verdicts),
        detect_s=(answer.finished_monotonic - injected_at) if lost else None,
    )


@scenario(
    "app-resend",
    "a follower paused past message.timeout.ms: the sends fail (possibly persisted) and the application "
    "sends them again; both copies land: duplicate by app-resend (AuditedProducer)",
)
def app_resend(world: World) -> Outcome:
    return _app_resend(world, probed=True)


@scenario(
    "app-resend-plain",
    "as app-resend with a plain producer: the copies are there, their cause unknown without audit headers",
)
def app_resend_plain(world: World) -> Outcome:
    return _app_resend(world, probed=False)


def _app_resend(world: World, probed: bool) -> Outcome:
    cluster = world.cluster
    world.make_topic(replication=3, min_insync_replicas="2")
    world.make_table()
    world.make_binding()
    tickets = list(range(1, 21))
    world.insert(tickets)
    settings = {
        "bootstrap.servers": cluster.bootstrap,
        "acks": "all",
        "enable.idempotence": False,
        "retries": 0,
        "request.timeout.ms": 1500,
        "message.timeout.ms": 2500,
        "linger.ms": 0,
    }
    producer: AuditedProducer | Producer = (
        AuditedProducer(settings, delivery_reports="all") if probed else Producer(settings)
    )
    reports = produce(cluster.bootstrap, world.topic, tickets[:10], producer=producer)
    layout = cluster.partition(world.topic)
    follower = next(r for r in layout.replicas if r != layout.leader)
    cluster.broker("pause", follower)
    injected_at = time.monotonic()
    try:
        produce(cluster.bootstrap, world.topic, tickets[10:], producer=producer, flush_s=0, reports=reports)
        producer.poll(5)
    finally:
        cluster.broker("resume", follower)
    producer.flush(30)
    resent = sorted(truth.failed(reports), key=int)
    produce(cluster.bootstrap, world.topic, [int(k) for k in resent], producer=producer, flush_s=30, reports=reports)
    if isinstance(producer, AuditedProducer):
        producer.close(60)
    sends: dict[str, int] = {}
    for d in reports:
        sends[d.key] = sends.get(d.key, 0) + 1
    now = truth.copies(cluster.read_topic(world.topic))
    expected: dict[str, set[str]] = {}
    for ticket in tickets:
        key = str(ticket)
        if now[key] == 0:
            expected[key] = {"missing"}
        elif now[key] > 1:
            # One copy per produce() call: the application sent it again. More copies than calls:
            # the client retried as well, which the records' sequence numbers show.
            if not probed:  # without audit headers two copies are just two copies
                expected[key] = {"duplicate/unknown"}
            else:
                expected[key] = {"duplicate/app-resend" if now[key] == sends[key] else "duplicate/producer-retry"}
    world.notes.append(f"re-sent by the application: {resent}")
    answer = world.reconcile()
    return Outcome(
        injected=f"follower {follower} SIGSTOPped 5s (message.timeout.ms=2500, retries=0), the app re-sends failures",
        expected=expected,
        got=answer.verdicts,
        detect_s=(answer.finished_monotonic - injected_at) if expected else None,
    )


@scenario(
    "in-flight-while-auditing",
    "acks=all sends held back while a run reads the topic (min.insync.replicas=3, a follower paused out of "
    "the ISR: the producer retries NOT_ENOUGH_REPLICAS), then the follower resumed and every send "
    "delivered: records in flight are not yet unconfirmed, nothing to report (AuditedProducer)",
)
def in_flight_while_auditing(world: World) -> Outcome:
    cluster = world.cluster
    world.make_topic(replication=3, min_insync_replicas="3")
    world.make_table()
    # The rows are past the grace when the run reads: a row whose probed send is not judged
    # yet is not missing (lab run #17, stop 78; it was grace_s=600 before, which kept them
    # pending and hid that)
    world.make_binding(grace_s=1)
    tickets = list(range(1, 11))
    world.insert(tickets)
    settings = {
        "bootstrap.servers": cluster.bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "message.timeout.ms": 180_000,
        "linger.ms": 0,
    }
    producer = AuditedProducer(settings, delivery_reports="all")
    reports = produce(cluster.bootstrap, world.topic, tickets[:3], producer=producer)
    layout = cluster.partition(world.topic)
    follower = next(r for r in layout.replicas if r != layout.leader)
    cluster.broker("pause", follower)
    injected_at = time.monotonic()
    try:
        # The leader drops the frozen follower from the ISR after replica.lag.time.max.ms; from
        # then on the topic refuses acks=all writes (2 < min.insync.replicas) and the ledger,
        # at min.insync.replicas=2, still takes them.
        wait_until(lambda: follower not in cluster.partition(world.topic).isr, 90, f"broker {follower} out of the ISR")
        produce(cluster.bootstrap, world.topic, tickets[3:], producer=producer, flush_s=0, reports=reports)
        producer.poll(4)  # the probe's ledger flushes: the sends are ledgered, unresolved
        held = set(truth.copies(cluster.read_topic(world.topic)))
        world.notes.append(f"in the topic while the run read it: {sorted(held, key=int)}")
        during = world.reconcile()
    finally:
        cluster.broker("resume", follower)
    producer.flush(180)
    producer.close(60)
    after = world.reconcile()
    now = truth.copies(cluster.read_topic(world.topic))
    failed = truth.failed(reports)
    expected: dict[str, set[str]] = {}
    for ticket in tickets:
        key = str(ticket)
        if key in failed:  # a send the producer gave up on: its own report says so
            expected[key] = {"gap/send-failed"}
        elif now.get(key, 0) > 1:
            expected[key] = {"duplicate/producer-retry"}
    world.notes.append(f"delivery reports: {len(reports)}, failed: {sorted(failed, key=int)}")
    return Outcome(
        injected=f"follower {follower} SIGSTOPped past replica.lag.time.max.ms under min.insync.replicas=3; "
        "a run while 7 sends were held back",
        expected=expected,
        got=merge(during.verdicts, after.verdicts),
        detect_s=(after.finished_monotonic - injected_at) if expected else None,
    )
