"""Canaries on two clusters share the default topic name: a clean minute on one never resolves
the other's loss alert. Here the two clusters are the stack's plaintext and SASL_SSL
listeners, each configured as a cluster and run with `audit canary --cluster NAME`."""

from __future__ import annotations

import io
import json
import uuid
from typing import Any

import pytest
from django.core.management import call_command

from auditor.alerts.models import Alert
from auditor.canary.models import CanaryPoint
from auditor.pipelines.models import Cluster
from tests.support.canary import Background, delete_first_records, sasl_cluster, start_early_in_a_minute
from tests.support.secured import Secured

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def run_on(cluster: Cluster, topic: str, *args: str) -> dict[str, Any]:
    out = io.StringIO()
    call_command("audit", "canary", "--cluster", cluster.name, "--topic", topic, "--json", *args, stdout=out)
    return json.loads(out.getvalue())


def test_a_clean_canary_on_another_cluster_leaves_the_loss_alert_open(
    make_topic, make_channel, kafka_admin, kafka_bootstrap: str, kafka_brokers: int, secured: Secured
) -> None:
    channel = make_channel(events={"canary_loss": 1})
    suffix = uuid.uuid4().hex[:6]
    plain = Cluster.objects.create(name=f"canary-plain-{suffix}", bootstrap_servers=kafka_bootstrap)
    sasl = sasl_cluster(f"canary-sasl-{suffix}")
    topic = make_topic("canary-clusters", partitions=max(3, kafka_brokers), replication_factor=min(3, kafka_brokers))

    # before the first canary's consumer starts (--consumer-delay), its first records vanish
    deleter = Background(lambda: delete_first_records(kafka_bootstrap, kafka_admin, topic))
    # the lossy run (7 s and its drain) ends in the minute its loss is counted in
    start_early_in_a_minute(25)
    deleter.start()
    lossy = run_on(plain, topic, "--duration", "7", "--rate", "50", "--sla", "4", "--consumer-delay", "3")
    deleted = deleter.join_checked()
    assert lossy["partitions"]["0"]["lost"] == deleted > 0

    [alert] = Alert.objects.filter(channel=channel, kind="canary:loss")
    assert alert.state == Alert.OPEN

    clean = run_on(sasl, topic, "--duration", "3", "--rate", "50", "--sla", "2")
    assert clean["partitions"]["0"]["received"] == clean["partitions"]["0"]["sent"] > 0
    assert clean["totals"]["lost"] == 0

    alert.refresh_from_db()
    assert alert.state == Alert.OPEN, "a clean minute on another cluster resolved the loss alert"
    assert not Alert.objects.filter(channel=channel, kind="canary:loss").exclude(pk=alert.pk).exists()
    assert alert.fingerprint == f"canary:loss:{plain.name}:{topic}/0"
    assert f"{topic}/0 of cluster {plain.name} in minute" in alert.summary
    points = CanaryPoint.objects.filter(topic=topic, session=clean["session"], partition=0)
    assert {(p.cluster, p.bootstrap_servers) for p in points} == {(sasl.name, secured.bootstrap)}
