"""The canary as the service `make run` starts: stopped with SIGTERM, it ends cleanly.

Not marked django_db: the canary process commits its points to the test database, and
this test reads and removes them outside a test transaction (as the live fixtures do).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from auditor.canary.models import CanaryPoint
from tests.support.paths import ROOT
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def committed_db(django_db_setup, django_db_blocker, canary_topic) -> Iterator[None]:
    with django_db_blocker.unblock():
        yield
        CanaryPoint.objects.filter(topic=canary_topic).delete()


def test_it_stops_cleanly_on_sigterm(live_env, committed_db, canary_topic, kafka_bootstrap):
    proc = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "audit",
            "canary",
            "--topic",
            canary_topic,
            "--rate",
            "50",
            "--sla",
            "2",
            "--bootstrap-servers",
            kafka_bootstrap,
            "--json",
        ],
        cwd=ROOT,
        env=live_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    reader = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"t-{uuid.uuid4().hex}", "log_level": 0})
    try:

        def producing() -> bool:
            assert proc.poll() is None, "the canary exited early"
            try:
                return reader.get_watermark_offsets(TopicPartition(canary_topic, 0), timeout=2)[1] > 20
            except Exception:  # noqa: BLE001 - the canary has not created the topic yet
                return False

        wait_until(producing, 30, "the canary to produce")
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=20)
    finally:
        reader.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr.decode()
    result = json.loads(stdout)
    totals = result["totals"]
    assert (totals["lost"], totals["duplicated"], totals["out_of_order"]) == (0, 0, 0)
    assert totals["sent"] > 0
    assert totals["received"] + totals["pending"] == totals["sent"]
    assert "received SIGTERM" in stderr.decode()
    # The last (partial) minute is stored and committed before the process exits.
    points = CanaryPoint.objects.filter(topic=canary_topic, session=result["session"])
    assert points.filter(partial=True).exists()
    assert sum(p.sent for p in points) == totals["sent"]
