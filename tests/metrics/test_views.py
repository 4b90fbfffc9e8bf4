"""/metrics/: who may scrape it, and the exact samples it derives from canary points and lint scans."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from auditor.api.tokens import create_token, revoke_token
from auditor.canary.models import CanaryPoint
from auditor.lint.models import LintResultRow, LintScan
from tests.support.metrics import URL, scrape

pytestmark = pytest.mark.django_db


def test_it_answers_401_to_anonymous_scrapers():
    response = Client().get(URL)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="auditor"'
    assert b"auditor_up" not in response.content


def test_it_answers_401_to_a_bad_or_revoked_token(role_users):
    token, raw = create_token(role_users["viewer"], "prometheus", "read")
    assert Client().get(URL, headers={"Authorization": "Bearer kda_nope"}).status_code == 401
    assert Client().get(URL, headers={"Authorization": f"Basic {raw}"}).status_code == 401
    revoke_token(token)
    assert Client().get(URL, headers={"Authorization": f"Bearer {raw}"}).status_code == 401


def test_it_does_not_redirect_anonymous_scrapers_to_the_login_page():
    response = Client().get(URL, follow=False)
    assert response.status_code == 401 and "Location" not in response


@pytest.mark.parametrize("auth", ["session", "token"])
def test_it_answers_403_to_users_without_a_role(client_as, bearer, auth):
    response = client_as("none").get(URL) if auth == "session" else Client().get(URL, headers=bearer("none"))
    assert response.status_code == 403


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
@pytest.mark.parametrize("scope", ["read", "write"])
def test_it_serves_a_token_of_every_role_and_scope(bearer, role, scope):
    lines = scrape(bearer(role, scope))
    assert "auditor_up 1" in lines
    assert 'auditor_collector_up{collector="canary"} 1' in lines
    assert 'auditor_collector_up{collector="lint"} 1' in lines


def test_it_serves_a_logged_in_viewer(client_as):
    response = client_as("viewer").get(URL)
    assert response.status_code == 200 and "auditor_up 1" in response.content.decode().splitlines()
    assert "no-cache" in response["Cache-Control"]


def test_it_allows_only_reads(bearer):
    assert Client().post(URL, headers=bearer("admin", "write")).status_code == 405


def _minute(minutes_ago: int) -> datetime:
    now = timezone.now().replace(second=0, microsecond=0)
    return now - timedelta(minutes=minutes_ago)


def _point(topic: str, minute: datetime, partition: int, session: str = "a" * 32, **counts: object) -> CanaryPoint:
    return CanaryPoint.objects.create(session=session, topic=topic, minute=minute, partition=partition, **counts)


def test_it_exposes_canary_sums_over_the_window_per_partition(bearer, settings):
    settings.AUDITOR_METRICS_CANARY_WINDOW_MINUTES = 10
    topic = f"canary-m-{uuid.uuid4().hex[:6]}"
    recent, older = _minute(2), _minute(5)
    _point(topic, older, 0, sent=600, received=597, lost=3, duplicated=1, out_of_order=2, p99_ms=12.5)
    _point(
        topic, recent, 0, sent=600, received=600, duplicated=4, p99_ms=40.0, produce_errors=1, unacked=5, truncated=2
    )
    _point(topic, recent, 0, session="b" * 32, sent=100, received=99, lost=1, p99_ms=7.25)  # a second canary
    _point(topic, recent, 1, sent=600, received=600)  # nothing received in time to measure: no p99
    _point(topic, _minute(30), 1, sent=600, lost=600, p99_ms=99999.0)  # outside the window

    lines = scrape(bearer("viewer"))
    mine = [line for line in lines if f'topic="{topic}"' in line]
    assert mine == [
        f'auditor_canary_sent_records{{topic="{topic}",partition="0"}} 1300',
        f'auditor_canary_sent_records{{topic="{topic}",partition="1"}} 600',
        f'auditor_canary_received_records{{topic="{topic}",partition="0"}} 1296',
        f'auditor_canary_received_records{{topic="{topic}",partition="1"}} 600',
        f'auditor_canary_lost_records{{topic="{topic}",partition="0"}} 4',
        f'auditor_canary_lost_records{{topic="{topic}",partition="1"}} 0',
        f'auditor_canary_duplicated_records{{topic="{topic}",partition="0"}} 5',
        f'auditor_canary_duplicated_records{{topic="{topic}",partition="1"}} 0',
        f'auditor_canary_out_of_order_records{{topic="{topic}",partition="0"}} 2',
        f'auditor_canary_out_of_order_records{{topic="{topic}",partition="1"}} 0',
        f'auditor_canary_produce_errors{{topic="{topic}",partition="0"}} 1',
        f'auditor_canary_produce_errors{{topic="{topic}",partition="1"}} 0',
        f'auditor_canary_unacked_records{{topic="{topic}",partition="0"}} 5',
        f'auditor_canary_unacked_records{{topic="{topic}",partition="1"}} 0',
        f'auditor_canary_truncated_records{{topic="{topic}",partition="0"}} 2',
        f'auditor_canary_truncated_records{{topic="{topic}",partition="1"}} 0',
        f'auditor_canary_latency_p99_seconds{{topic="{topic}",partition="0"}} 0.04',
        f'auditor_canary_last_minute_timestamp_seconds{{topic="{topic}"}} {recent.timestamp()!r}',
    ]
    assert "auditor_canary_window_seconds 600" in lines
    assert "# TYPE auditor_canary_lost_records gauge" in lines


def test_it_keeps_canaries_on_different_clusters_apart(bearer, settings):
    # Both canaries use one topic name; the one on cluster "east" stopped 6 minutes ago.
    settings.AUDITOR_METRICS_CANARY_WINDOW_MINUTES = 10
    topic = f"canary-c-{uuid.uuid4().hex[:6]}"
    stopped, recent = _minute(6), _minute(1)
    _point(topic, stopped, 0, cluster="east", sent=600, received=590, lost=10, p99_ms=20.0)
    _point(topic, recent, 0, sent=600, received=600, p99_ms=5.0)  # the default cluster, servers not recorded
    _point(topic, recent, 0, session="b" * 32, bootstrap_servers=settings.KAFKA_BOOTSTRAP_SERVERS, sent=60, received=60)
    _point(topic, recent, 0, session="c" * 32, bootstrap_servers="Other-1:9092, other-2:9092", sent=6, received=6)

    lines = scrape(bearer("viewer"))
    mine = [line for line in lines if f'topic="{topic}"' in line and ("_records{" in line or "timestamp" in line)]
    east, other = 'cluster="east",', 'cluster="servers=other-1:9092,other-2:9092",'
    assert [line for line in mine if "sent_records" in line or "lost_records" in line] == [
        f'auditor_canary_sent_records{{topic="{topic}",partition="0"}} 660',
        f'auditor_canary_sent_records{{{east}topic="{topic}",partition="0"}} 600',
        f'auditor_canary_sent_records{{{other}topic="{topic}",partition="0"}} 6',
        f'auditor_canary_lost_records{{topic="{topic}",partition="0"}} 0',
        f'auditor_canary_lost_records{{{east}topic="{topic}",partition="0"}} 10',
        f'auditor_canary_lost_records{{{other}topic="{topic}",partition="0"}} 0',
    ]
    assert [line for line in mine if "timestamp" in line] == [
        f'auditor_canary_last_minute_timestamp_seconds{{topic="{topic}"}} {recent.timestamp()!r}',
        f'auditor_canary_last_minute_timestamp_seconds{{{east}topic="{topic}"}} {stopped.timestamp()!r}',
        f'auditor_canary_last_minute_timestamp_seconds{{{other}topic="{topic}"}} {recent.timestamp()!r}',
    ]


def test_it_keeps_the_last_minute_of_a_canary_stopped_before_the_window(bearer, settings):
    # The canary stopped 20 minutes ago, longer than the 15-minute window: its last minute must
    # stay exposed (so CanaryStopped, time() - last minute > 180, keeps firing), while its
    # counts, which cover the window only, are absent.
    settings.AUDITOR_METRICS_CANARY_WINDOW_MINUTES = 15
    topic = f"canary-s-{uuid.uuid4().hex[:6]}"
    stopped = _minute(20)
    _point(topic, _minute(40), 0, sent=600, received=600)
    _point(topic, stopped, 0, sent=600, received=600)
    _point(topic, stopped, 1, cluster="east", sent=600, received=600)

    lines = scrape(bearer("viewer"))
    assert [line for line in lines if f'topic="{topic}"' in line] == [
        f'auditor_canary_last_minute_timestamp_seconds{{topic="{topic}"}} {stopped.timestamp()!r}',
        f'auditor_canary_last_minute_timestamp_seconds{{cluster="east",topic="{topic}"}} {stopped.timestamp()!r}',
    ]


def test_it_drops_the_last_minute_of_a_canary_stopped_longer_than_the_horizon_ago(bearer, settings):
    # A canary removed on purpose: past AUDITOR_CANARY_STOPPED_HORIZON_S (default 7 days) its
    # series leaves /metrics, so CanaryStopped resolves; one stopped within it stays.
    removed = f"canary-r-{uuid.uuid4().hex[:6]}"
    kept = f"canary-k-{uuid.uuid4().hex[:6]}"
    eight_days, six_days = _minute(8 * 24 * 60), _minute(6 * 24 * 60)
    _point(removed, eight_days, 0, sent=600, received=600)
    _point(removed, eight_days, 1, cluster="east", sent=600, received=600)
    _point(kept, six_days, 0, sent=600, received=600)
    lines = scrape(bearer("viewer"))
    assert [line for line in lines if removed in line] == []
    assert [line for line in lines if kept in line] == [
        f'auditor_canary_last_minute_timestamp_seconds{{topic="{kept}"}} {six_days.timestamp()!r}'
    ]

    settings.AUDITOR_CANARY_STOPPED_HORIZON_S = 3600
    stopped = _minute(20)
    _point(removed, stopped, 1, sent=600, received=600)
    lines = scrape(bearer("viewer"))
    assert [line for line in lines if kept in line] == []
    assert [line for line in lines if removed in line] == [
        f'auditor_canary_last_minute_timestamp_seconds{{topic="{removed}"}} {stopped.timestamp()!r}'
    ]


def test_it_escapes_a_hostile_topic_name(bearer):
    hostile = f'evil"}} auditor_up{{x="1"}} 0\n\\{uuid.uuid4().hex[:6]}'
    _point(hostile, _minute(1), 0, sent=10, received=9, lost=1)
    lines = scrape(bearer("viewer"))
    escaped = hostile.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    assert f'auditor_canary_lost_records{{topic="{escaped}",partition="0"}} 1' in lines
    assert [line for line in lines if line.startswith("auditor_up")] == ["auditor_up 1"]
    parsed = [
        sample
        for family in text_string_to_metric_families("\n".join(lines) + "\n")
        for sample in family.samples
        if sample.name == "auditor_canary_lost_records" and sample.labels["topic"] == hostile
    ]
    assert [(s.labels["partition"], s.value) for s in parsed] == [("0", 1.0)]


def _scan(
    finished_at: datetime, status: str = LintScan.OK, trigger: str = LintScan.SCHEDULE, **counts: int
) -> LintScan:
    return LintScan.objects.create(
        started_at=finished_at - timedelta(seconds=5),
        finished_at=finished_at,
        trigger=trigger,
        status=status,
        **{f"{severity}_count": counts.get(severity, 0) for severity in ("error", "warning", "info")},
    )


def _row(scan: LintScan, rule: str, severity: str, kind: str, subject: str, cluster: str = "local") -> None:
    LintResultRow.objects.create(
        scan=scan,
        rule=rule,
        title=f"title of {rule}",
        severity=severity,
        target_kind=kind,
        cluster=cluster,
        subject=subject,
        config_key="acks",
        value="1",
        expected="all",
        message="m",
        guarantee="at-least-once",
        source="explicit",
    )


def test_it_exposes_lint_results_per_target_of_the_latest_scan(bearer):
    older = _scan(datetime(2099, 1, 1, tzinfo=UTC), error=1)
    _row(older, "T001", "error", "topic", "topic old")
    latest = _scan(datetime(2099, 1, 2, tzinfo=UTC), error=2, warning=1, info=1)
    _row(latest, "T001", "error", "topic", "topic tickets")
    _row(latest, "T004", "error", "topic", "topic tickets")
    _row(latest, "T002", "warning", "topic", "topic tickets")
    _row(latest, "P001", "info", "producer", 'producer app@host "s1"', cluster="other")
    pasted = _scan(datetime(2099, 1, 3, tzinfo=UTC), trigger=LintScan.PASTE, error=1)  # not the live system
    _row(pasted, "P002", "error", "producer", "producer (pasted config)", cluster="")

    lines = scrape(bearer("viewer"))
    assert [line for line in lines if line.startswith("auditor_lint_")] == [
        "auditor_lint_last_scan_timestamp_seconds 4070995200.0",
        "auditor_lint_last_scan_success 1",
        'auditor_lint_last_scan_results{severity="error"} 2',
        'auditor_lint_last_scan_results{severity="warning"} 1',
        'auditor_lint_last_scan_results{severity="info"} 1',
        'auditor_lint_results{cluster="local",target_kind="topic",target="topic tickets",severity="error"} 2',
        'auditor_lint_results{cluster="local",target_kind="topic",target="topic tickets",severity="warning"} 1',
        'auditor_lint_results{cluster="other",target_kind="producer",target="producer app@host \\"s1\\"",severity="error"} 0',
        'auditor_lint_results{cluster="other",target_kind="producer",target="producer app@host \\"s1\\"",severity="warning"} 0',
    ]


def test_it_says_when_the_latest_scan_failed(bearer):
    _scan(datetime(2099, 2, 1, tzinfo=UTC), status=LintScan.FAILED)
    lines = scrape(bearer("viewer"))
    assert "auditor_lint_last_scan_success 0" in lines


def test_it_scrapes_in_a_fixed_number_of_queries(bearer, django_assert_max_num_queries):
    topic = f"canary-q-{uuid.uuid4().hex[:6]}"
    for partition in range(20):
        _point(topic, _minute(1), partition, sent=10, received=10, p99_ms=1.0)
    scan = _scan(datetime(2099, 3, 1, tzinfo=UTC), error=20)
    for i in range(20):
        _row(scan, "T001", "error", "topic", f"topic t{i}")
    headers = bearer("viewer")
    # token, last-used, role, 2 savepoints x 4 collectors, canary aggregate, canary newest minutes,
    # latest scan, lint aggregate,
    # reconcile (last success, current runs, findings), stuck (open items)
    with django_assert_max_num_queries(20):
        Client().get(URL, headers=headers)
