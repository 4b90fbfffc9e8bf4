"""The canary's SLA against a wall clock that steps (NTP, a resume from suspend), on the real broker."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from auditor.canary import runner
from auditor.canary.models import CanaryPoint
from auditor.canary.runner import CanaryOptions, CanaryService

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def test_it_loses_nothing_when_the_wall_clock_steps_past_the_sla_while_records_wait_to_be_read(
    canary_topic, kafka_bootstrap
):
    # The consumer starts 4 s in (real time), well within the 10 s SLA; 2 s in, the wall clock
    # steps 30 s forward, while every record sent so far is acked and waits to be read.
    started = time.time()
    steps: list[float] = []

    def stepping_wall_clock() -> float:
        now = time.time()
        if now - started < 2.0:
            return now
        if not steps:
            steps.append(now)
        return now + 30.0

    options = CanaryOptions(
        bootstrap_servers=kafka_bootstrap,
        topic=canary_topic,
        rate=20.0,
        sla_s=10.0,
        duration_s=6.0,
        consumer_delay_s=4.0,
    )
    service = CanaryService(options, clock=stepping_wall_clock)
    report = service.run().as_dict()

    assert steps, "the wall clock never stepped during the run"
    totals = report["totals"]
    # What the broker holds was all read: nothing acked went missing.
    assert totals["sent"] > 0
    assert totals["received"] == totals["sent"], totals
    assert (totals["lost"], totals["late"], totals["pending"]) == (0, 0, 0), totals
    points = CanaryPoint.objects.filter(topic=canary_topic, session=report["session"])
    assert points.exists()
    assert sum(p.lost for p in points) == 0
    assert sum(p.received for p in points) == totals["received"]


def _stepping_back(by_s: float, at_s: float) -> tuple[Callable[[], float], list[float]]:
    """A wall clock that steps `by_s` seconds back `at_s` seconds after it is made."""
    started = time.time()
    steps: list[float] = []

    def clock() -> float:
        now = time.time()
        if now - started < at_s:
            return now
        if not steps:
            steps.append(now)
        return now - by_s

    return clock, steps


def _run(kafka_bootstrap: str, topic: str, clock: Callable[[], float], duration_s: float) -> dict[str, Any]:
    options = CanaryOptions(
        bootstrap_servers=kafka_bootstrap,
        topic=topic,
        rate=20.0,
        sla_s=10.0,
        duration_s=duration_s,
        consumer_delay_s=0.5,
    )
    return CanaryService(options, clock=clock).run().as_dict()


def test_minutes_keep_closing_when_the_wall_clock_steps_back(
    canary_topic, kafka_bootstrap, monkeypatch: pytest.MonkeyPatch
):
    """Minutes of 4 s; 2 s in, the wall clock steps back 5 minutes. Before stop 70 the canary
    held its minute open until the clock came back to it (5 minutes and more): nothing stored,
    no loss alerted. Now a minute lasts at most its length on the monotonic clock: the 12 s run
    stores its first minute, then minutes labelled by the clock as it now reads."""
    monkeypatch.setattr(runner, "MINUTE", 4.0)
    clock, steps = _stepping_back(300.0, 2.0)
    first_label = datetime.fromtimestamp(math.floor(time.time() / 4.0) * 4.0, UTC)
    report = _run(kafka_bootstrap, canary_topic, clock, 12.0)

    assert steps, "the wall clock never stepped during the run"
    totals = report["totals"]
    assert totals["sent"] > 0 and totals["received"] == totals["sent"] and totals["lost"] == 0, totals
    points = CanaryPoint.objects.filter(topic=canary_topic, session=report["session"])
    minutes = sorted({p.minute for p in points})
    closed = sorted({p.minute for p in points if not p.partial})
    # the first minute, closed on time, and at least one closed after the step, labelled before it
    assert minutes[-1] in (first_label, first_label + timedelta(seconds=4)), minutes
    assert len(closed) >= 2 and min(closed) < first_label - timedelta(seconds=200), closed
    assert sum(p.sent for p in points) == totals["sent"]
    assert sum(p.received for p in points) == totals["received"]


def test_a_minute_labelled_twice_after_the_clock_steps_back_holds_both_windows(
    canary_topic, kafka_bootstrap, monkeypatch: pytest.MonkeyPatch
):
    """Minutes of 4 s; 5 s in, the wall clock steps back 6 s: the next minutes are labelled by
    minutes already stored. They are summed into the stored rows (one row per session, topic,
    minute and partition): nothing sent or received is dropped, and the canary does not fail
    on the stored row."""
    monkeypatch.setattr(runner, "MINUTE", 4.0)
    clock, steps = _stepping_back(6.0, 5.0)
    report = _run(kafka_bootstrap, canary_topic, clock, 14.0)

    assert steps, "the wall clock never stepped during the run"
    totals = report["totals"]
    assert totals["sent"] > 0 and totals["received"] == totals["sent"] and totals["lost"] == 0, totals
    points = list(CanaryPoint.objects.filter(topic=canary_topic, session=report["session"]))
    assert sum(p.sent for p in points) == totals["sent"]
    assert sum(p.received for p in points) == totals["received"]
    assert len({(p.minute, p.partition) for p in points}) == len(points)
