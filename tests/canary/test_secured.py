"""`audit canary --cluster NAME` on a SASL_SSL cluster declared with ${ENV} secrets: records go
round over the secured listener; a cluster that refuses the canary stops it before anything
is produced or stored, with the reason."""

from __future__ import annotations

import io
import json
import uuid

import pytest
from django.core.management import CommandError, call_command

from auditor.canary.models import CanaryPoint
from auditor.pipelines.models import Cluster
from tests.support.canary import sasl_cluster
from tests.support.secured import Secured

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


@pytest.fixture
def secured_cluster() -> Cluster:
    return sasl_cluster(f"canary-sec-{uuid.uuid4().hex[:6]}")


def test_it_runs_over_the_secured_listener_of_a_configured_cluster(
    secured_cluster: Cluster, canary_topic: str, secured: Secured
) -> None:
    out = io.StringIO()
    call_command(
        "audit", "canary", "--cluster", secured_cluster.name, "--topic", canary_topic,
        "--duration", "4", "--rate", "20", "--sla", "3", "--json", stdout=out,
    )  # fmt: skip
    result = json.loads(out.getvalue())

    totals = result["totals"]
    assert totals["sent"] > 0 and totals["received"] == totals["sent"]
    assert (totals["lost"], totals["duplicated"]) == (0, 0)
    assert result["bootstrap_servers"] == secured.bootstrap
    assert secured.password not in out.getvalue()
    points = CanaryPoint.objects.filter(topic=canary_topic, session=result["session"])
    assert sum(p.received for p in points) == totals["received"]


def test_it_does_not_start_when_the_cluster_refuses_it(
    secured_cluster: Cluster, canary_topic: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "wrong-password-42")
    with pytest.raises(CommandError) as raised:
        call_command("audit", "canary", "--cluster", secured_cluster.name, "--topic", canary_topic, "--duration", "2")
    assert raised.value.returncode == 2
    error = capsys.readouterr().err
    assert f"cluster {secured_cluster.name}: authentication failed" in error, error
    assert "wrong-password-42" not in error
    assert not CanaryPoint.objects.filter(topic=canary_topic).exists()
