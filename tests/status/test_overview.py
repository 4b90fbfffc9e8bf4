"""The overview's verdicts (kept / broken / unknown) and their reasons, the page and GET /api/overview/.

The expected verdicts follow from the rows each test stores (runs, findings,
acknowledgements), never from the module under test.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from auditor.accounts.acknowledgements import acknowledge
from auditor.alerts.models import Alert, Channel
from auditor.canary.models import CanaryPoint
from auditor.lint.models import LintResultRow, LintScan
from auditor.pipelines.models import Binding, Cluster, SourceDatabase, StuckRule
from auditor.reconcile.models import FINDING_ACK_KIND, Finding, ReconcileRun
from auditor.status.overview import build_overview
from auditor.stuck.models import StuckItem

pytestmark = pytest.mark.django_db


@pytest.fixture
def binding() -> Binding:
    cluster = Cluster.objects.create(name="ov", bootstrap_servers="127.0.0.1:9")
    source = SourceDatabase.objects.create(name="ov", url="postgresql://app@127.0.0.1/app")
    return Binding.objects.create(
        name="ov",
        cluster=cluster,
        topic="tickets",
        source=source,
        table="public.t",
        key_column="id",
        schedule_seconds=300,
        guarantee="at-least-once",
    )


def run_with(
    binding: Binding,
    counts: dict[str, int],
    *,
    age: timedelta = timedelta(minutes=1),
    status: str = "ok",
    error: str = "",
) -> ReconcileRun:
    finished = timezone.now() - age
    run = ReconcileRun.objects.create(
        binding=binding, trigger="schedule", status=status, counts=counts, finished_at=finished, error=error
    )
    ReconcileRun.objects.filter(pk=run.pk).update(created_at=finished)
    return run


def add_findings(run: ReconcileRun, kind: str, keys: list[str]) -> list[Finding]:
    ts = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    return [Finding.objects.create(run=run, binding=run.binding, kind=kind, key=k, timestamp=ts) for k in keys]


def only(views):
    [view] = views
    return view


def test_it_says_unknown_before_any_reconciliation(binding: Binding) -> None:
    view = only(build_overview())
    assert view.verdict == "unknown"
    assert view.reasons == ["no reconciliation has run yet"]


def test_it_calls_unacknowledged_missing_items_broken_with_count_and_time(binding: Binding) -> None:
    run = run_with(binding, {"missing": 2, "orphan": 5})
    found = add_findings(run, "missing", ["A", "B"])
    add_findings(run, "orphan", ["x1", "x2", "x3", "x4", "x5"])
    view = only(build_overview())
    assert view.verdict == "broken", view.reasons
    assert view.unacknowledged == {"missing": 2}  # orphans break no promise
    assert view.reasons[0] == f"2 missing since {found[0].timestamp:%Y-%m-%d %H:%M} UTC"


def test_it_turns_kept_when_every_breaking_finding_is_acknowledged(binding: Binding, role_users) -> None:
    run = run_with(binding, {"missing": 2})
    found = add_findings(run, "missing", ["A", "B"])
    acknowledge(role_users["operator"], FINDING_ACK_KIND, found[0].acknowledgement_key, action="ack", reason="known")
    assert only(build_overview()).unacknowledged == {"missing": 1}
    acknowledge(role_users["operator"], FINDING_ACK_KIND, found[1].acknowledgement_key, action="mute", reason="x")
    view = only(build_overview())
    assert view.verdict == "kept"
    assert view.reasons == ["2 findings acknowledged"]


def test_it_says_unknown_when_the_last_run_failed(binding: Binding) -> None:
    run_with(binding, {}, age=timedelta(minutes=3))
    run_with(binding, {}, status="failed", error="password authentication failed")
    view = only(build_overview())
    assert view.verdict == "unknown"
    assert view.reasons == ["the last run failed: password authentication failed"]


def test_it_says_unknown_when_the_last_run_is_older_than_three_schedules(binding: Binding) -> None:
    run = run_with(binding, {"missing": 1}, age=timedelta(minutes=16))
    add_findings(run, "missing", ["A"])
    view = only(build_overview())
    assert view.verdict == "unknown"
    assert view.reasons[0].startswith("the last successful run is 16 min old, more than 3 schedules")
    assert view.reasons[1] == "the last successful run reported 1 missing, not acknowledged"


def test_it_is_kept_within_three_schedules_without_findings(binding: Binding) -> None:
    run_with(binding, {}, age=timedelta(minutes=14))
    view = only(build_overview())
    assert (view.verdict, view.reasons) == ("kept", ["no findings that break it"])


def test_it_names_the_lint_setting_that_explains_the_findings(binding: Binding) -> None:
    run = run_with(binding, {"missing": 1})
    add_findings(run, "missing", ["A"])
    now = timezone.now()
    scan = LintScan.objects.create(started_at=now, finished_at=now, trigger="manual")
    LintResultRow.objects.create(
        scan=scan,
        rule="P001",
        title="acks",
        severity="error",
        target_kind="producer",
        cluster="ov",
        subject="producer app",
        config_key="acks",
        value="1",
        expected="all",
        message="m",
        guarantee="at-least-once",
        source="explicit",
    )
    view = only(build_overview())
    assert view.reasons[-1] == "producer acks=1 (P001)"
    assert view.as_dict()["lint_errors"] == 1


def test_it_counts_stuck_items_and_open_alerts(binding: Binding) -> None:
    rule = StuckRule.objects.create(name="ov", binding=binding, status_column="s", stuck_values=["NEW"], age_column="c")
    now = timezone.now()
    for key, verdict in [("1", "skipped"), ("2", "skipped"), ("3", "waiting")]:
        StuckItem.objects.create(
            rule=rule,
            key=key,
            status="NEW",
            age_seconds=1,
            verdict=verdict,
            first_seen=now,
            last_seen=now,
            verdict_since=now,
        )
    StuckItem.objects.create(
        rule=rule,
        key="4",
        status="NEW",
        age_seconds=1,
        verdict="skipped",
        first_seen=now,
        last_seen=now,
        verdict_since=now,
        resolved_at=now,
    )
    channel = Channel.objects.create(name="c", url="https://h.example.com/x", secret="${S}")
    Alert.objects.create(
        channel=channel, fingerprint="f", kind="missing", binding=binding, summary="s", first_seen=now, last_seen=now
    )
    view = only(build_overview())
    assert view.stuck == {"skipped": 2, "waiting": 1}
    assert view.alerts_open == 1


def test_the_api_gives_the_issue_shape_to_a_viewer_token(binding: Binding, client_as, bearer) -> None:
    run = run_with(binding, {"missing": 1})
    add_findings(run, "missing", ["A"])
    from django.test import Client

    response = Client().get("/api/overview/", headers=bearer("viewer"))
    assert response.status_code == 200
    [pipeline] = response.json()["pipelines"]
    assert {
        "binding",
        "guarantee",
        "verdict",
        "reasons",
        "counts",
        "stuck",
        "lint_errors",
        "alerts_open",
        "last_run_at",
    } <= set(pipeline)
    assert (pipeline["binding"], pipeline["guarantee"], pipeline["verdict"]) == ("ov", "at-least-once", "broken")
    assert pipeline["counts"] == {"missing": 1}
    assert Client().get("/api/overview/").status_code == 401
    spec = client_as("viewer").get("/api/openapi.json").json()
    assert "/api/overview/" in spec["paths"]


def test_the_page_shows_a_row_per_pipeline_and_its_reason(binding: Binding, client_as) -> None:
    run = run_with(binding, {"missing": 1})
    add_findings(run, "missing", ["<A>"])
    html = client_as("viewer").get("/").content.decode()
    assert 'data-binding="ov" data-verdict="broken"' in html
    assert "1 missing since" in html
    part = client_as("viewer").get("/?part=pipelines").content.decode()
    assert "<html" not in part and 'data-verdict="broken"' in part


def test_it_shows_the_canary_of_a_cluster_declared_by_an_env_reference(binding: Binding, settings, monkeypatch) -> None:
    # As demo/auditor.yaml declares it: the file holds ${KAFKA_BOOTSTRAP_SERVERS}, the
    # canary runs against the same servers from the settings.
    monkeypatch.setenv("OV_BOOTSTRAP", "127.0.0.1:9092")
    settings.KAFKA_BOOTSTRAP_SERVERS = "127.0.0.1:9092"
    Cluster.objects.filter(pk=binding.cluster_id).update(bootstrap_servers="${OV_BOOTSTRAP}")
    minute = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=2)
    CanaryPoint.objects.create(
        session="s",
        bootstrap_servers="127.0.0.1:9092",
        topic="_audit.canary",
        partition=0,
        leader=1,
        minute=minute,
        sent=600,
        received=597,
        lost=3,
        p50_ms=5,
        p99_ms=40,
    )
    view = only(build_overview())
    assert view.canary is not None
    assert (view.canary["sent"], view.canary["lost"]) == (600, 3)


def test_it_shows_no_canary_for_a_cluster_whose_env_reference_is_unset(binding: Binding, settings) -> None:
    settings.KAFKA_BOOTSTRAP_SERVERS = "127.0.0.1:9092"
    Cluster.objects.filter(pk=binding.cluster_id).update(bootstrap_servers="${OV_NOT_SET_ANYWHERE}")
    minute = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=2)
    CanaryPoint.objects.create(
        session="s",
        bootstrap_servers="127.0.0.1:9092",
        topic="_audit.canary",
        partition=0,
        leader=1,
        minute=minute,
        sent=600,
        received=600,
        lost=0,
        p50_ms=5,
        p99_ms=40,
    )
    assert only(build_overview()).canary is None


def canary_minute(**fields: object) -> CanaryPoint:
    minute = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=2)
    defaults: dict[str, object] = {"session": "s", "topic": "_audit.canary", "partition": 0, "minute": minute}
    return CanaryPoint.objects.create(**{**defaults, **fields})


def test_it_shows_each_cluster_only_its_own_canary(binding: Binding, settings) -> None:
    settings.KAFKA_BOOTSTRAP_SERVERS = "127.0.0.1:9"  # the default cluster is the binding's
    other = Cluster.objects.create(name="ov-other", bootstrap_servers="127.0.0.1:19")
    other_binding = Binding.objects.create(
        name="ov-2", cluster=other, topic="t", source=binding.source, table="public.t", key_column="id"
    )
    canary_minute(session="a", bootstrap_servers="127.0.0.1:9", sent=100, received=100, p99_ms=10)
    canary_minute(session="b", cluster="ov-other", bootstrap_servers="127.0.0.1:19", sent=50, lost=5, p99_ms=90)
    canary_minute(session="c", cluster="nowhere", bootstrap_servers="127.0.0.1:9", sent=7, lost=7)
    canary_minute(session="old", sent=1000, lost=1000)  # stored before the cluster was recorded

    views = {view.binding.pk: view for view in build_overview()}
    mine, theirs = views[binding.pk].canary, views[other_binding.pk].canary
    assert mine is not None and theirs is not None
    assert (mine["sent"], mine["lost"], mine["p99_ms"]) == (100, 0, 10)
    assert (theirs["sent"], theirs["lost"], theirs["p99_ms"]) == (50, 5, 90)


def test_it_counts_truncated_canary_records_as_lost_as_the_report_does(
    binding: Binding, settings, client_as, bearer
) -> None:
    # Read, then cut from the log: gone as much as a record never read (the report's loss
    # ratio, the canary's loss alert and the CanaryLoss rule count them).
    from django.test import Client

    settings.KAFKA_BOOTSTRAP_SERVERS = "127.0.0.1:9"
    canary_minute(bootstrap_servers="127.0.0.1:9", sent=1000, received=995, lost=0, truncated=5, p99_ms=10)

    [pipeline] = Client().get("/api/overview/", headers=bearer("viewer")).json()["pipelines"]
    assert pipeline["canary"]["loss_pct"] == 0.5
    assert (pipeline["canary"]["lost"], pipeline["canary"]["truncated"]) == (0, 5)
    html = client_as("viewer").get("/?part=pipelines").content.decode()
    assert '<span class="bad-text">0.5 % lost</span>' in html
    assert "5 truncated" in html
