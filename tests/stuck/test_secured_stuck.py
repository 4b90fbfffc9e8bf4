"""Stuck diagnosis of a pipeline on the stack's SASL_SSL listener with a TLS-only source, secrets
as ${ENV} references: the Python and Spark engines give the verdicts the clients' ground truth
calls for; a cluster that refuses the auditor fails the run with the reason and stores no item."""

from __future__ import annotations

from typing import Any

import pytest

from auditor.demo.options import DeliveryMode
from auditor.lab.world import SECURED_BOOTSTRAP, SECURED_CONFIG
from auditor.stuck.models import DiagnosisRun, StuckItem
from auditor.stuck.service import run_diagnosis
from tests.support.secured import Secured
from tests.support.stuck import StuckSetup, diagnose_both, verdicts_of

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def secure(setup: StuckSetup, secured: Secured) -> StuckSetup:
    """Point the rule's cluster at the SASL_SSL listener and its source at the TLS-only role."""
    binding = setup.rule.binding
    binding.cluster.bootstrap_servers = SECURED_BOOTSTRAP
    binding.cluster.config = dict(SECURED_CONFIG)
    binding.cluster.save()
    binding.source.url = secured.source_url
    binding.source.save()
    return setup


def test_it_diagnoses_a_secured_pipeline_with_both_engines(make_stuck: Any, secured: Secured, spark: Any) -> None:
    setup = secure(make_stuck(partitions=1), secured)
    ids = setup.pipeline.produce(8)
    setup.pipeline.consumer(DeliveryMode.AT_LEAST_ONCE).run(max_records=3, timeout_s=60)
    # Ground truth from the clients: the group committed 3, the other 5 tickets wait.
    assert setup.pipeline.committed_offsets() == {0: 3}
    assert {t for t, s in setup.pipeline.statuses().items() if s == "NEW"} == set(ids[3:])

    result = diagnose_both(setup, spark)  # the same verdicts from Python and Spark, or it fails

    assert verdicts_of(result) == dict.fromkeys(ids[3:], "waiting")
    assert secured.password not in repr([i.as_dict() for i in result.items]) + repr(result.notes)

    run = run_diagnosis(setup.rule, DiagnosisRun.CLI, options=setup.options("python"))
    assert run.status == DiagnosisRun.OK, run.error
    assert set(StuckItem.objects.filter(rule=setup.rule).values_list("key", flat=True)) == set(ids[3:])


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        ({"sasl.password": "wrong-password-42"}, "authentication failed"),
        ({"ssl.ca.location": "<untrusted>"}, "certificate not trusted"),
        ({"sasl.mechanisms": "PLAIN"}, "SASL mechanism not enabled"),
    ],
)
@pytest.mark.parametrize("engine", ["python", "spark"])
def test_it_fails_the_diagnosis_of_a_cluster_that_refuses_the_auditor_and_stores_no_item(
    make_stuck: Any, secured: Secured, untrusted_ca: str, config: dict[str, str], reason: str, engine: str
) -> None:
    setup = secure(make_stuck(partitions=1), secured)
    setup.pipeline.produce(3)  # three NEW tickets nobody processed: stuck, were the cluster readable
    cluster = setup.rule.binding.cluster
    cluster.config |= {k: untrusted_ca if v == "<untrusted>" else v for k, v in config.items()}
    cluster.save()

    run = run_diagnosis(setup.rule, DiagnosisRun.CLI, options=setup.options(engine))

    assert run.status == DiagnosisRun.FAILED
    assert f"cluster {cluster.name}" in run.error and reason in run.error, run.error
    assert "wrong-password-42" not in run.error and secured.password not in run.error
    assert not StuckItem.objects.filter(rule=setup.rule).exists()


def test_it_names_the_source_whose_certificate_is_not_trusted(
    make_stuck: Any, secured: Secured, untrusted_ca: str
) -> None:
    setup = secure(make_stuck(partitions=1), secured)
    setup.pipeline.produce(2)
    source = setup.rule.binding.source
    source.url = source.url.replace("${KAFKA_CA_LOCATION}", untrusted_ca)
    source.save()

    run = run_diagnosis(setup.rule, DiagnosisRun.CLI, options=setup.options("python"))

    assert run.status == DiagnosisRun.FAILED
    assert f"source {source.name}" in run.error and "certificate not trusted" in run.error, run.error
    assert not StuckItem.objects.filter(rule=setup.rule).exists()


def test_a_source_url_that_cannot_carry_its_password_fails_the_diagnosis_without_showing_it(
    make_stuck: Any, monkeypatch: Any, client_as: Any
) -> None:
    """A resolved ${ENV} password with a stray % makes the URL unparsable, and libpq quotes the
    password in its error: the run fails naming the source, the password masked everywhere
    the run's error goes (the run record, the page, the API)."""
    setup = make_stuck(partitions=1)
    setup.pipeline.produce(2)
    monkeypatch.setenv("STUCK_TEST_PCT_PASSWORD", "50%off-and-secret")
    source = setup.rule.binding.source
    source.url = "postgresql://app:${STUCK_TEST_PCT_PASSWORD}@127.0.0.1:1/db"
    source.save()

    run = run_diagnosis(setup.rule, DiagnosisRun.CLI, options=setup.options("python"))

    assert run.status == DiagnosisRun.FAILED
    assert f"source {source.name}" in run.error and "its URL is not valid" in run.error, run.error
    page = client_as("viewer").get("/stuck/").content.decode()
    api = client_as("viewer").get("/api/stuck/runs/").content.decode()
    assert "its URL is not valid" in page and "its URL is not valid" in api
    assert not any("50%off" in text or "and-secret" in text for text in (run.error, page, api))
    assert not StuckItem.objects.filter(rule=setup.rule).exists()


FAKE_LOCATE_JOB = """
import json, os, stat, sys
request = sys.argv[sys.argv.index("--request") + 1]
mode = oct(stat.S_IMODE(os.stat(request).st_mode))
password = json.load(open(request))["kafka_config"]["sasl.password"]
sys.stderr.write(f"request mode {mode}\\n")
sys.stderr.write(f"SaslAuthenticationException: login with password {password} was refused\\n")
sys.exit(1)
"""


def test_it_hands_the_spark_locate_job_its_secrets_privately_and_scrubs_its_errors(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in for spark_jobs/stuck_locate.py: the request file is the owner's alone, its
    command line holds paths only, and a failure quoting the password comes back masked."""
    from auditor.stuck import locate
    from auditor.stuck.kafka_view import ReadPlan

    script = tmp_path / "fake_locate.py"
    script.write_text(FAKE_LOCATE_JOB)
    monkeypatch.setattr(locate, "SPARK_JOB", script)
    secret = "locate-s3cret-pw"
    request = locate.LocateRequest(
        {"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SASL_SSL", "sasl.password": secret},
        ReadPlan("t"),
        "key",
        ["k1"],
        [],
    )

    with pytest.raises(locate.LocateError) as raised:
        locate.locate_with_spark_subprocess(request, timeout_s=60)

    message = str(raised.value)
    assert "request mode 0o600" in message
    assert secret not in message and "password ****" in message
    assert "authentication failed" in message


def test_it_says_unknown_not_failed_when_a_secured_cluster_is_merely_unreachable(
    make_stuck: Any, secured: Secured
) -> None:
    setup = secure(make_stuck(partitions=1), secured)
    ids = setup.pipeline.produce(2)
    cluster = setup.rule.binding.cluster
    cluster.bootstrap_servers = "127.0.0.1:1"  # nothing listens: waiting may cure it
    cluster.save()

    run = run_diagnosis(setup.rule, DiagnosisRun.CLI, options=setup.options("python", timeout_s=2))

    assert run.status == DiagnosisRun.OK, run.error
    items = StuckItem.objects.filter(rule=setup.rule)
    assert {i.key: i.verdict for i in items} == dict.fromkeys(ids, "unknown")


@pytest.mark.parametrize("engine", ["python", "spark"])
def test_it_reads_a_cluster_whose_certificate_the_user_chose_not_to_verify_with_every_client(
    make_stuck: Any, secured: Secured, engine: str
) -> None:
    """enable.ssl.certificate.verification=false and no CA (a self-signed broker): every one of
    the Python engine's clients (the admin, the record reader, the range reader) must keep the
    setting that the pre-check connected with. The Java client has no such setting: the Spark
    engine refuses the cluster, naming it, and stores nothing."""
    setup = secure(make_stuck(partitions=1), secured)
    ids = setup.pipeline.produce(6)
    setup.pipeline.consumer(DeliveryMode.AT_LEAST_ONCE).run(max_records=2, timeout_s=60)
    # Ground truth from the clients: the group committed 2, the other 4 tickets wait.
    assert setup.pipeline.committed_offsets() == {0: 2}
    assert {t for t, s in setup.pipeline.statuses().items() if s == "NEW"} == set(ids[2:])
    cluster = setup.rule.binding.cluster
    cluster.config = {k: v for k, v in cluster.config.items() if k != "ssl.ca.location"} | {
        "enable.ssl.certificate.verification": "false"
    }
    cluster.save()

    run = run_diagnosis(setup.rule, DiagnosisRun.CLI, options=setup.options(engine))

    items = StuckItem.objects.filter(rule=setup.rule)
    if engine == "spark":
        assert run.status == DiagnosisRun.FAILED
        assert f"cluster {cluster.name}" in run.error, run.error
        assert "enable.ssl.certificate.verification=false has no Java client equivalent" in run.error
        assert not items.exists()
    else:
        assert run.status == DiagnosisRun.OK, run.error
        assert {i.key: i.verdict for i in items} == dict.fromkeys(ids[2:], "waiting")
