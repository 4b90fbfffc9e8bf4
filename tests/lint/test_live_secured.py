"""Live lint scans of a SASL_SSL cluster (secrets as ${ENV}): brokers, bound topics and the
clients its probes reported are linted over the secured listener; a cluster that refuses the
auditor fails the scan with the reason and stores no result."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from auditor.lab.world import SECURED_BOOTSTRAP, SECURED_CONFIG
from auditor.lint.models import LintScan
from auditor.lint.service import scan_all
from auditor.pipelines.models import Binding, Cluster, SourceDatabase
from tests.support.secured import Secured

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


@pytest.fixture
def secured_cluster(make_topic: Callable[..., str]) -> tuple[Cluster, str]:
    cluster = Cluster.objects.create(
        name=f"lint-sec-{uuid.uuid4().hex[:6]}",
        bootstrap_servers=SECURED_BOOTSTRAP,
        config=dict(SECURED_CONFIG),
    )
    topic = make_topic("lint-sec", config={"unclean.leader.election.enable": "true"})
    source = SourceDatabase.objects.create(name=cluster.name, url="postgresql://app@127.0.0.1/app")
    Binding.objects.create(
        name=cluster.name, cluster=cluster, topic=topic, source=source, table="public.t", key_column="id"
    )
    return cluster, topic


def test_it_lints_a_secured_cluster(secured_cluster: tuple[Cluster, str], kafka_brokers: int) -> None:
    cluster, topic = secured_cluster

    scan = scan_all(LintScan.MANUAL, clusters=[cluster])

    assert scan.status == "ok", scan.error
    rules = set(scan.results.filter(subject=f"topic {topic}").values_list("rule", flat=True))
    assert "T004" in rules  # unclean.leader.election.enable=true, read over SASL_SSL
    assert f"{kafka_brokers} brokers, 1 topics" in scan.summary, scan.summary  # read over SASL_SSL


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"sasl.password": "wrong-password-42"}, "authentication failed"),
        ({"ssl.ca.location": "<untrusted>"}, "certificate not trusted"),
        ({"sasl.mechanisms": "SCRAM-SHA-256"}, "SASL mechanism not enabled"),
    ],
)
def test_it_fails_the_scan_of_a_cluster_that_refuses_the_auditor(
    secured_cluster: tuple[Cluster, str], untrusted_ca: str, secured: Secured, change: dict[str, str], reason: str
) -> None:
    cluster, _ = secured_cluster
    cluster.config |= {k: untrusted_ca if v == "<untrusted>" else v for k, v in change.items()}
    cluster.save()

    scan = scan_all(LintScan.MANUAL, clusters=[cluster])

    assert scan.status == "failed"
    assert scan.error.startswith(f"cluster {cluster.name}: {reason}"), scan.error
    assert scan.results.count() == 0
    assert "wrong-password-42" not in scan.error and secured.password not in scan.error
