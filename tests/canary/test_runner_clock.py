"""The canary's SLA against a wall clock that steps (NTP, a resume from suspend), on the real broker."""

from __future__ import annotations

import time

import pytest

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
