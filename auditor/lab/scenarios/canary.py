"""The canary under a broker kill: how long until its per-partition figures show it.

Xinfra Monitor counts a record lost once it is 20 s late (its default SLA); the auditor's canary
does the same, and stores figures per partition and minute with the partition's leader. The
scenario runs `audit canary` as its own process, kills a leader with -9, and measures the time
until a stored minute shows the kill (a loss, a produce error, or a record at least 5 s late).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from django.conf import settings

from auditor.canary.models import CanaryPoint
from auditor.lab.compare import Outcome
from auditor.lab.registry import scenario
from auditor.lab.world import World

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
        if p.lost or p.produce_errors or (p.max_ms or 0) >= LATE_MS
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
