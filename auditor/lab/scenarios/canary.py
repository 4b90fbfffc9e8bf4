"""The canary under a broker kill: how long until its per-partition figures show it.

Xinfra Monitor counts a record lost once it is 20 s late (its default SLA); the auditor's canary
does the same, and stores figures per partition and minute with the partition's leader. The
scenario runs `audit canary` as its own process, kills a leader with -9, and measures the time
until a stored minute shows the kill (a loss, a produce error, or a record at least 5 s late).

Under a paused (SIGSTOP, not killed) leader the connections to it stay open and answer nothing:
librdkafka waits out socket.timeout.ms (60 s) on them, the producer's ProduceRequest (its
request.timeout.ms is only the broker's ack timeout) as well as the consumer's FetchRequest
(fetch.wait.max.ms + socket.timeout.ms). `canary-leader-pause` runs the canary in this process,
keeps the leader frozen past the failover and the new leader's first acks by more than the SLA,
and checks the canary's counts against the producer's own delivery reports and a full read of the
topic: no acked record the topic holds counted lost, every record read, the stall in the latency.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from unittest import mock

from confluent_kafka import KafkaError, Message, Producer
from django.conf import settings

from auditor.canary import runner as canary_runner
from auditor.canary.models import CanaryPoint
from auditor.canary.runner import CanaryOptions, CanaryService
from auditor.lab.cluster import LabError, wait_until
from auditor.lab.compare import Outcome
from auditor.lab.registry import scenario
from auditor.lab.world import World

if TYPE_CHECKING:
    from confluent_kafka.cimpl import DeliveryCallback  # only in the type stubs

SLA_S = 20
LATE_MS = 5000.0  # a kill stalls a partition for the broker session timeout (9 s); a loaded machine may add 1 or 2 s
WARM_UP_S = 15
WATCH_S = 150


def _affected(topic: str, since: float) -> list[CanaryPoint]:
    from datetime import UTC, datetime

    start = datetime.fromtimestamp(since - since % 60, UTC)
    return [
        p
        for p in CanaryPoint.objects.filter(topic=topic, minute__gte=start)
        if p.lost or p.truncated or p.produce_errors or (p.max_ms or 0) >= LATE_MS
    ]


@scenario(
    "canary-broker-kill",
    f"the canary runs (SLA {SLA_S}s); a leader is killed -9: seconds until its stored figures show it",
)
def canary_broker_kill(world: World) -> Outcome:
    cluster = world.cluster
    topic = world.topic
    world.topic_made = True  # the canary creates it; the world deletes it
    canary = subprocess.Popen(
        [
            sys.executable, "manage.py", "audit", "canary", "--topic", topic, "--rate", "5",
            "--sla", f"{SLA_S}s", "--duration", f"{WARM_UP_S + WATCH_S + 30}s",
        ],
        cwd=str(settings.BASE_DIR),
        env=os.environ.copy(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        time.sleep(WARM_UP_S)
        victim = cluster.partition(topic, 0).leader
        cluster.broker("kill", victim)
        killed_at = time.time()
        seen_at = None
        while time.time() - killed_at < WATCH_S:
            points = _affected(topic, killed_at)
            if points:
                seen_at = time.time()
                world.notes.append(
                    "first figures: "
                    + "; ".join(
                        f"p{p.partition} minute {p.minute:%H:%M} lost {p.lost} errors {p.produce_errors} "
                        f"max {p.max_ms or 0:.0f} ms"
                        for p in points[:3]
                    )
                )
                break
            time.sleep(1)
        cluster.broker("start", victim)
    finally:
        canary.send_signal(signal.SIGTERM)
        try:
            canary.wait(60)
        except subprocess.TimeoutExpired:
            canary.kill()
    who = f"broker {victim}"
    return Outcome(
        injected=f"canary at 5 records/s per partition; leader {victim} of partition 0 killed -9",
        expected={who: {"canary:shows-kill"}},
        got={who: {"canary:shows-kill"}} if seen_at else {},
        detect_s=None if seen_at is None else seen_at - killed_at,
    )


# --- a paused (not killed) leader ------------------------------------------------------------

PAUSE_RATE = 5.0
PAUSE_WARM_UP_S = 8
# Once the new leader acked a record, the leader stays frozen this long: the SLA plus a margin,
# so a consumer still waiting on the frozen connection would have counted those records lost.
PAUSE_HOLD_S = SLA_S + 10
PAUSE_MAX_S = 150  # the controller fences a frozen broker after its session timeout (9 s)
AFTER_RESUME_S = SLA_S + 10
# The canary re-checks leadership every 60 s (CanaryOptions.manage_interval_s): within that, the
# resumed broker, leading nothing, gets its preferred partition back by an election.
GIVEN_BACK_S = 75


@dataclass
class _Delivery:
    partition: int
    value: bytes
    produced_at: float  # monotonic, when produce() was called
    reported_at: float  # monotonic, when the delivery report came
    offset: int  # -1: the send failed


class _ReportsLog:
    """The canary producer's delivery reports, as librdkafka hands them over (ground truth from
    the client: no canary code decides what is in here)."""

    def __init__(self) -> None:
        self.deliveries: list[_Delivery] = []

    def producer_class(self) -> type[Producer]:
        deliveries = self.deliveries

        class ReportingProducer(Producer):
            def produce(
                self,
                topic: str,
                value: str | bytes | None = None,
                key: str | bytes | None = None,
                partition: int = -1,
                callback: DeliveryCallback | None = None,
                on_delivery: DeliveryCallback | None = None,
                timestamp: int = 0,
                headers: Any = None,
            ) -> None:
                produced_at = time.monotonic()
                report = on_delivery or callback
                sent = value.encode() if isinstance(value, str) else value or b""

                def delivered(err: KafkaError | None, msg: Message) -> None:
                    offset = msg.offset() if err is None else None
                    deliveries.append(
                        _Delivery(msg.partition() or 0, sent, produced_at, time.monotonic(),
                                  -1 if offset is None else offset)
                    )  # fmt: skip
                    if report is not None:
                        report(err, msg)

                super().produce(
                    topic, value, key, partition=partition, on_delivery=delivered, timestamp=timestamp, headers=headers
                )

        return ReportingProducer

    def acked(self) -> list[_Delivery]:
        return [d for d in list(self.deliveries) if d.offset >= 0]


def _latency_covers(max_ms: float | None, stall_ms: float) -> bool:
    # The consumer may read a record a moment before its delivery report comes back: a second's slack.
    return max_ms is not None and max_ms >= stall_ms - 1000


@scenario(
    "canary-leader-pause",
    f"the canary runs (SLA {SLA_S}s); a leader is paused (SIGSTOP) past the failover: no acked record the topic "
    "holds counted lost, and the stall in its latency",
)
def canary_leader_pause(world: World) -> Outcome:
    cluster = world.cluster
    topic = world.topic
    world.topic_made = True  # the canary creates it; the world deletes it
    reports = _ReportsLog()
    service = CanaryService(
        CanaryOptions(
            bootstrap_servers=cluster.bootstrap, topic=topic, rate=PAUSE_RATE, sla_s=SLA_S, store_points=False
        )
    )
    answer: dict[str, Any] = {}

    def run_canary() -> None:
        try:
            answer["result"] = service.run()
        except Exception as exc:  # noqa: BLE001  (raised again in the scenario's thread)
            answer["error"] = exc

    with mock.patch.object(canary_runner, "Producer", reports.producer_class()):
        thread = threading.Thread(target=run_canary, name="lab-canary", daemon=True)
        thread.start()
        try:
            wait_until(lambda: len(reports.acked()) >= PAUSE_RATE * 3 or not thread.is_alive(), 60, "canary acks")
            time.sleep(PAUSE_WARM_UP_S)
            victim = cluster.partition(topic, 0).leader
            cluster.broker("pause", victim)
            paused_at = time.monotonic()
            try:
                successor = cluster.wait_for_leader(topic, 0, other_than=victim, timeout=90)
                moved_at = time.monotonic()

                def acked_by_successor() -> bool:
                    return any(d.partition == 0 and d.reported_at > moved_at for d in reports.acked())

                wait_until(acked_by_successor, PAUSE_MAX_S - (moved_at - paused_at), "an ack from the new leader")
                first_ack_at = min(
                    d.reported_at for d in reports.acked() if d.partition == 0 and d.reported_at > moved_at
                )
                time.sleep(max(0.0, min(PAUSE_HOLD_S, PAUSE_MAX_S - (time.monotonic() - paused_at))))
            finally:
                cluster.broker("resume", victim)
            resumed_at = time.monotonic()
            time.sleep(AFTER_RESUME_S)
            try:
                wait_until(lambda: cluster.partition(topic, 0).leader == victim, GIVEN_BACK_S, "leadership given back")
                given_back = True
            except LabError:
                given_back = False
        finally:
            service.stop()
            thread.join(120)
    if "error" in answer:
        raise answer["error"]
    if "result" not in answer:
        raise LabError("the canary did not finish within 120 s of being stopped")
    report = answer["result"].report

    # The truth: what the producer's delivery reports say was acked, and what a plain read of the
    # whole topic holds afterwards (by partition, offset and value).
    held = {(r.partition, r.offset): r.value for r in cluster.read_topic(topic)}
    acked = reports.acked()
    absent = [d for d in acked if held.get((d.partition, d.offset)) != d.value]
    expected: dict[str, set[str]] = {}
    got: dict[str, set[str]] = {}
    for partition, counts in report["partitions"].items():
        p = int(partition)
        truly_lost = sum(1 for d in absent if d.partition == p)
        for i in range(truly_lost):
            expected[f"{p}: loss {i + 1}"] = {"canary:lost"}
        for i in range(int(counts["lost"] or 0)):
            got.setdefault(f"{p}: loss {i + 1}", set()).add("canary:lost")
        # every record the partition holds (only this session's: the topic is new) read, in time
        held_here = sum(1 for position in held if position[0] == p)
        expected[f"{p}: reads"] = {"canary:read-every-record"}
        if counts["received"] == held_here:
            got[f"{p}: reads"] = {"canary:read-every-record"}
    # The stall the producer saw on partition 0 (produce to ack) is in the latency the canary reports.
    stall_ms = max((d.reported_at - d.produced_at) * 1000 for d in acked if d.partition == 0)
    expected["0: latency"] = {"canary:latency-shows-stall"}
    max_ms = report["partitions"]["0"]["max_ms"]
    if _latency_covers(max_ms, stall_ms):
        got["0: latency"] = {"canary:latency-shows-stall"}
    # The canary, still running, gave the resumed broker its preferred partition back.
    expected[f"broker {victim}"] = {"canary:leadership-given-back"}
    if given_back:
        got[f"broker {victim}"] = {"canary:leadership-given-back"}
    p0 = report["partitions"]["0"]
    world.notes.append(
        f"broker {victim} paused {resumed_at - paused_at:.1f} s; leader {successor} after "
        f"{moved_at - paused_at:.1f} s, its first ack {first_ack_at - paused_at:.1f} s into the pause; "
        f"acked {len(acked)} (partition 0: {sum(1 for d in acked if d.partition == 0)}), failed "
        f"{len(reports.deliveries) - len(acked)}, topic holds {len(held)}, acked and absent {len(absent)}; "
        f"canary: sent {report['totals']['sent']} received {report['totals']['received']} "
        f"lost {report['totals']['lost']} late {report['totals']['late']} pending {report['totals']['pending']}; "
        f"partition 0: lost {p0['lost']} late {p0['late']} max {max_ms} ms, producer's stall {stall_ms:.0f} ms; "
        f"partition 0 led by broker {victim} again: {given_back}"
    )
    return Outcome(
        injected=f"canary at {PAUSE_RATE:g} records/s per partition; leader {victim} of partition 0 paused "
        f"{resumed_at - paused_at:.0f} s (SIGSTOP), then resumed",
        expected=expected,
        got=got,
    )


# --- an unclean election under the canary's idempotent producer --------------------------------

UNCLEAN_RATE = 5.0
UNCLEAN_WARM_UP_S = 12
ACKED_BY_LEADER_ALONE_S = 5  # the follower out of the ISR: records acked by the leader alone
# After the election: the SLA and more, so losses are counted and at least one minute closes
# (minutes close on the wall clock's minute); the old leader comes back half way.
AFTER_ELECTION_S = 75
OLD_LEADER_BACK_AFTER_S = 30


def _session_records(records: list[Any], session: str) -> dict[int, set[int]]:
    """Per partition, the sequences of this session the topic holds (a plain read, decoded here)."""
    from auditor.canary.payload import decode_record

    held: dict[int, set[int]] = {}
    for record in records:
        decoded = decode_record(record.value)
        if decoded is not None and decoded.session == session:
            held.setdefault(record.partition, set()).add(decoded.seq)
    return held


@scenario(
    "canary-unclean-election",
    f"the canary runs (SLA {SLA_S}s, idempotent producer) on an RF=2 topic; a follower falls out of the ISR, "
    "its leader is killed -9 and the follower is elected uncleanly: the canary survives (a new producer "
    "when the old one turns fatal), keeps storing minutes, exits cleanly, counts no false loss, and counts "
    "the records it had read that the election cut from the log as truncated",
)
def canary_unclean_election(world: World) -> Outcome:
    import json
    import tempfile
    from datetime import UTC, datetime

    cluster = world.cluster
    topic = world.topic
    # RF=2 and min.insync.replicas=1: once its follower is out, the leader alone acks acks=all.
    world.make_topic(partitions=3, replication=2, min_insync_replicas="1", unclean_leader_election_enable="true")
    with (
        tempfile.NamedTemporaryFile("w+", suffix=".log", prefix="lab-canary-", delete=False) as err,
        tempfile.NamedTemporaryFile("w+", suffix=".json", prefix="lab-canary-") as out,
    ):
        canary = subprocess.Popen(
            [
                sys.executable, "manage.py", "audit", "canary", "--topic", topic, "--rate", f"{UNCLEAN_RATE:g}",
                "--sla", f"{SLA_S}s", "--duration", "600s", "--json",
            ],
            cwd=str(settings.BASE_DIR),
            env=os.environ.copy(),
            stdout=out,
            stderr=err,
        )  # fmt: skip
        died_at: float | None = None
        start = cluster.partition(topic, 0)
        leader, follower = start.leader, next(r for r in start.replicas if r != start.leader)
        try:
            time.sleep(UNCLEAN_WARM_UP_S)
            cluster.broker("stop", follower)
            wait_until(lambda: cluster.partition(topic, 0).isr == (leader,), 60, f"{follower} out of the ISR")
            time.sleep(ACKED_BY_LEADER_ALONE_S)
            cluster.broker("kill", leader)
            cluster.broker("start", follower)
            how = "automatic unclean election (topic config)"
            try:
                cluster.wait_for_leader(topic, 0, other_than=leader, timeout=30)
            except LabError:
                how = f"unclean election through the admin API ({cluster.elect(topic, 0, unclean=True)})"
                cluster.wait_for_leader(topic, 0, other_than=leader, timeout=30)
            elected_at = time.time()
            leader_back = False
            while time.time() - elected_at < AFTER_ELECTION_S:
                if died_at is None and canary.poll() is not None:
                    died_at = time.time()
                if not leader_back and time.time() - elected_at >= OLD_LEADER_BACK_AFTER_S:
                    cluster.broker("start", leader)
                    leader_back = True
                time.sleep(1)
            if not leader_back:
                cluster.broker("start", leader)
            alive = canary.poll() is None
        finally:
            if canary.poll() is None:
                canary.send_signal(signal.SIGTERM)
            try:
                code = canary.wait(60)
            except subprocess.TimeoutExpired:
                canary.kill()
                code = canary.wait(10)
        err.seek(0)
        log_text = err.read()
        out.seek(0)
        out_text = out.read().strip()
    summary = json.loads(out_text.splitlines()[-1]) if out_text else {}
    fatal_lines = [line for line in log_text.splitlines() if "fatal" in line.lower()]
    tracebacks = log_text.count("Traceback (most recent call last)")

    # The canary's stored minutes, and a plain read of the whole topic (only the canary writes it).
    points = list(CanaryPoint.objects.filter(topic=topic))
    sessions = {p.session for p in points}
    session = summary.get("session") or (next(iter(sessions)) if len(sessions) == 1 else "")
    held = _session_records(cluster.read_topic(topic), session)
    election_minute = datetime.fromtimestamp(elected_at - elected_at % 60, UTC)
    after = [p for p in points if p.minute > election_minute]

    expected: dict[str, set[str]] = {"canary": {"canary:alive", "canary:stores-minutes", "canary:clean-exit"}}
    got: dict[str, set[str]] = {"canary": set()}
    if alive and died_at is None:
        got["canary"].add("canary:alive")
    if after:
        got["canary"].add("canary:stores-minutes")
    if code == 0 and tracebacks == 0:
        got["canary"].add("canary:clean-exit")
    # No false loss: a record the canary calls lost is one the topic does not hold (a late one
    # was read after being called lost: held, so a false loss), and the topic's records were read.
    for partition in sorted({p.partition for p in points}):
        mine = [p for p in points if p.partition == partition]
        sent, lost, late = sum(p.sent for p in mine), sum(p.lost for p in mine), sum(p.late for p in mine)
        received = sum(p.received for p in mine)
        held_here = len(held.get(partition, set()))
        expected[f"{partition}: losses"] = {"canary:no-false-loss"}
        if late == 0 and lost <= max(0, sent - held_here):
            got[f"{partition}: losses"] = {"canary:no-false-loss"}
        expected[f"{partition}: reads"] = {"canary:read-every-record"}
        if received + late >= held_here:
            got[f"{partition}: reads"] = {"canary:read-every-record"}
        # Read, and no longer in the topic: cut from the log by the election. Each such record
        # must be counted truncated (a miss if not), and no other (a false alarm).
        gone = max(0, received + late - held_here)
        truncated = sum(p.truncated for p in mine)
        if gone or truncated:
            expected[f"{partition}: truncated"] = {f"canary:truncated {i + 1}" for i in range(gone)}
            got[f"{partition}: truncated"] = {f"canary:truncated {i + 1}" for i in range(truncated)}
    totals = {
        name: sum(getattr(p, name) for p in points)
        for name in ("sent", "received", "lost", "late", "duplicated", "produce_errors", "unacked", "truncated")
    }
    world.notes.append(
        f"p0 leader {leader}, follower {follower}; {how}; canary (its log: {err.name}) "
        + (f"died {died_at - elected_at:.0f} s after the election (exit {code})" if died_at else f"exit {code}")
        + f"; {tracebacks} traceback(s); fatal log lines {len(fatal_lines)}"
        + (f" (first: {fatal_lines[0][-160:]})" if fatal_lines else "")
        + f"; producers replaced {summary.get('producers_replaced', 'n/a')}; sessions {len(sessions)}; "
        f"minutes stored {len({p.minute for p in points})} ({len({p.minute for p in after})} after the election); "
        f"stored totals {totals}; topic holds {sum(len(s) for s in held.values())} of its records"
    )
    return Outcome(
        injected=f"canary at {UNCLEAN_RATE:g} records/s per partition, RF=2; follower {follower} of partition 0 "
        f"stopped, leader {leader} killed -9 {ACKED_BY_LEADER_ALONE_S} s after it left the ISR, {follower} elected "
        f"uncleanly, {leader} back {OLD_LEADER_BACK_AFTER_S} s later",
        expected=expected,
        got=got,
        detect_s=None,
    )
