"""Every page, websocket and API endpoint, for every role, including denial.

The expected role of each URL is written down here, in literal tables, and never read
from the views: a view that loses its role check, or a new URL nobody classified, fails
this module. The roles (auditor/accounts/roles.py): viewer reads, operator triggers runs
and acknowledges, admin configures; a logged-in user without a role sees no app page.

Outcomes checked for each URL and method:
- pages: anonymous -> redirect to the login page; no role -> 403; a role below the
  table's -> 403; the table's role and above -> the table's status (the page, or the
  redirect after a POST action);
- API (and /metrics/): no token -> 401; a token or session without a role -> 403; a
  read-scope token on a write endpoint -> 403 even for admins; a role below the table's
  -> 403; the table's role and above -> the table's status;
- the websocket (test_access_matrix_ws): anonymous and no-role connections are refused,
  every role is accepted.

Skipped URL patterns (``SKIPPED``): Django's admin (its own is_staff check, tested by
Django), login and logout (public by design: they are how one gets a session), and the
static files (served by WhiteNoise before any view, no pattern of ours). The API routes
are walked from the OpenAPI registry instead of the pages table.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from pytest_django import DjangoDbBlocker

from auditor.accounts.acknowledgements import acknowledge
from auditor.accounts.roles import ADMIN, OPERATOR, ROLES, VIEWER, grant_role
from auditor.alerts.models import Alert, Channel
from auditor.alerts.problems import PROBLEM_ACK_KIND
from auditor.api.dispatch import discover
from auditor.api.models import ApiToken
from auditor.api.registry import registry
from auditor.api.tokens import create_token
from auditor.pipelines.models import Binding, Cluster, SourceDatabase, StuckRule
from auditor.reconcile.models import Finding, ReconcileRun
from auditor.reports.models import Report, ReportSchedule
from auditor.stuck.evidence import Diagnosis, StuckRow
from auditor.stuck.models import StuckItem
from auditor.stuck.service import DiagnosisResult, ItemVerdict, record_diagnosis, start_run
from tests.support.access import ANONYMOUS, NO_ROLE, RANK, WHO
from tests.support.fixtures.accounts import ROLE_NAMES

pytestmark = pytest.mark.django_db


# Route prefixes (as the resolver spells them) that this module does not walk, and why.
SKIPPED = {
    "login/": "public: the login form itself",
    "logout/": "public: logging out needs no role (tested in test_roles.py)",
    "admin/": "Django's admin: its own is_staff/permission checks",
}


@dataclass(frozen=True)
class Access:
    """Who may use one method of one URL, and what they get when they may."""

    role: str
    status: int
    data: dict[str, Any] | None = None  # the POST body of an allowed request


# The pages: route -> method -> access. A GET reads; a POST acts.
PAGES: dict[str, dict[str, Access]] = {
    "": {"GET": Access(VIEWER, 200)},  # the overview
    "status/": {"GET": Access(VIEWER, 200)},
    "status/api/": {"GET": Access(VIEWER, 200)},
    "pipelines/": {"GET": Access(VIEWER, 200)},
    "lab/": {"GET": Access(VIEWER, 200)},
    "canary/": {"GET": Access(VIEWER, 200)},
    "canary/api/points/": {"GET": Access(VIEWER, 200)},
    "reconcile/": {"GET": Access(VIEWER, 200)},
    "reconcile/runs/": {"GET": Access(VIEWER, 200)},
    "reconcile/runs/run/": {"POST": Access(OPERATOR, 302, {"binding": "matrix"})},
    "reconcile/findings/": {"GET": Access(VIEWER, 200)},
    "reconcile/findings/<int:finding_id>/": {"GET": Access(VIEWER, 200)},
    "reconcile/findings/<int:finding_id>/acknowledge/": {
        "POST": Access(OPERATOR, 302, {"action": "ack", "reason": "looking into it"})
    },
    "reconcile/findings/<int:finding_id>/withdraw/": {"POST": Access(OPERATOR, 302)},
    "reconcile/findings/acknowledge/": {
        "POST": Access(OPERATOR, 302, {"scope": "matching", "action": "ack", "reason": "all of them"})
    },
    "reconcile/keys/<slug:binding>/<path:key>/": {"GET": Access(VIEWER, 200)},
    "stuck/": {"GET": Access(VIEWER, 200)},
    "stuck/api/items/": {"GET": Access(VIEWER, 200)},
    "stuck/diagnose/": {"POST": Access(OPERATOR, 302, {"rule": "matrix"})},
    "stuck/items/<int:item_id>/acknowledge/": {
        "POST": Access(OPERATOR, 302, {"action": "mute", "reason": "known, fixing", "mute_hours": "2"})
    },
    "stuck/items/<int:item_id>/withdraw/": {"POST": Access(OPERATOR, 302)},
    "stuck/items/acknowledge/": {
        "POST": Access(OPERATOR, 302, {"scope": "matching", "action": "ack", "reason": "all of them"})
    },
    "lint/": {"GET": Access(VIEWER, 200)},
    "lint/api/results/": {"GET": Access(VIEWER, 200)},
    "lint/scan/": {"POST": Access(OPERATOR, 302)},
    "lint/catalog/": {"GET": Access(VIEWER, 200)},
    "lint/catalog.json": {"GET": Access(VIEWER, 200)},
    "lint/catalog.csv": {"GET": Access(VIEWER, 200)},
    # Linting a pasted config is a read: it is stored apart (trigger "paste"), never the
    # live system's latest scan, never alerted on.
    "lint/paste/": {
        "GET": Access(VIEWER, 200),
        "POST": Access(
            VIEWER, 200, {"config": "acks=1\n", "format": "properties", "client": "java", "kind": "producer"}
        ),
    },
    "alerts/": {"GET": Access(VIEWER, 200)},
    "alerts/channels/new/": {"GET": Access(ADMIN, 200), "POST": Access(ADMIN, 200, {})},  # {}: the form again
    "alerts/channels/<int:channel_id>/": {"GET": Access(VIEWER, 200)},
    "alerts/channels/<int:channel_id>/edit/": {"GET": Access(ADMIN, 200), "POST": Access(ADMIN, 200, {})},
    "alerts/channels/<int:channel_id>/delete/": {"POST": Access(ADMIN, 302)},
    "alerts/channels/<int:channel_id>/test/": {"POST": Access(OPERATOR, 302)},
    "alerts/alerts/<int:alert_id>/acknowledge/": {
        "POST": Access(OPERATOR, 302, {"action": "ack", "reason": "looking into it"})
    },
    "alerts/acknowledgements/<int:ack_id>/withdraw/": {"POST": Access(OPERATOR, 302)},
    "reports/": {"GET": Access(VIEWER, 200)},
    "reports/build/": {"POST": Access(OPERATOR, 302, {"since": "not-a-duration"})},  # refused, back to the list
    "reports/<int:report_id>/": {"GET": Access(VIEWER, 200)},
    "reports/<int:report_id>/report.html": {"GET": Access(VIEWER, 200)},
    "reports/<int:report_id>/findings.csv": {"GET": Access(VIEWER, 200)},
    "reports/schedules/new/": {"GET": Access(ADMIN, 200), "POST": Access(ADMIN, 200, {})},
    "reports/schedules/<int:schedule_id>/edit/": {"GET": Access(ADMIN, 200), "POST": Access(ADMIN, 200, {})},
    "reports/schedules/<int:schedule_id>/delete/": {"POST": Access(ADMIN, 302)},
    # Every role manages its own tokens (a token never carries more than its user's role).
    "api/tokens/": {"GET": Access(VIEWER, 200), "POST": Access(VIEWER, 200, {"name": "ci", "scope": "read"})},
    "api/tokens/<int:token_id>/revoke/": {"POST": Access(VIEWER, 302)},
}

# Token-authenticated URLs outside the JSON API's registry: answer 401, never a login redirect.
TOKEN_PAGES: dict[str, dict[str, Access]] = {
    "metrics/": {"GET": Access(VIEWER, 200)},
}

# The JSON API, by OpenAPI operationId: the role and the status of an allowed call.
API: dict[str, Access] = {
    "me": Access(VIEWER, 200),
    "bindings-list": Access(VIEWER, 200),
    "openapi": Access(VIEWER, 200),
    "overview": Access(VIEWER, 200),
    "alerts-list": Access(VIEWER, 200),
    "alert-channels-list": Access(VIEWER, 200),
    "alerts-acknowledge": Access(OPERATOR, 200, {"action": "ack", "reason": "looking into it"}),
    "canary-points-list": Access(VIEWER, 200),
    "lint-scans-list": Access(VIEWER, 200),
    "lint-scans-trigger": Access(OPERATOR, 202, {}),
    "lint-results-list": Access(VIEWER, 200),
    "reconcile-runs-list": Access(VIEWER, 200),
    "reconcile-runs-trigger": Access(OPERATOR, 202, {"binding": "matrix"}),
    "reconcile-run": Access(VIEWER, 200),
    "reconcile-findings-list": Access(VIEWER, 200),
    "reconcile-finding": Access(VIEWER, 200),
    "reconcile-finding-acknowledge": Access(OPERATOR, 200, {"action": "ack", "reason": "looking into it"}),
    "reports-list": Access(VIEWER, 200),
    "report": Access(VIEWER, 200),
    "report-csv": Access(VIEWER, 200),
    "report-html": Access(VIEWER, 200),
    "stuck-items-list": Access(VIEWER, 200),
    "stuck-runs-list": Access(VIEWER, 200),
    "stuck-diagnose": Access(OPERATOR, 200, {}),
    "stuck-item": Access(VIEWER, 200),
    "stuck-item-acknowledge": Access(OPERATOR, 200, {"action": "mute", "reason": "known, fixing"}),
}


# --- the project's URLs, as the resolver and the registry know them ------------------------


def walk_routes(patterns: list[URLPattern | URLResolver], prefix: str = "") -> Iterator[str]:
    for entry in patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from walk_routes(entry.url_patterns, route)
        else:
            yield route


def api_routes() -> set[str]:
    discover()
    return {f"api/{path}" for path in registry.operations}


def page_routes() -> set[str]:
    routes = set(walk_routes(get_resolver().url_patterns))
    return {r for r in routes if not r.startswith(tuple(SKIPPED))} - api_routes()


def page_cases(table: dict[str, dict[str, Access]]) -> list[tuple[str, str, str]]:
    return [(route, method, who) for route, methods in table.items() for method in methods for who in WHO]


def test_it_has_an_expected_role_for_every_url_of_the_project() -> None:
    assert page_routes() == set(PAGES) | set(TOKEN_PAGES), "a URL is missing from (or stale in) the tables"
    discover()
    assert {op.name for op in registry.all()} == set(API), "an API endpoint is missing from (or stale in) API"


# --- objects for the URL's arguments --------------------------------------------------------


@dataclass
class World:
    users: dict[str, AbstractBaseUser]
    binding: Binding
    rule: StuckRule
    item: StuckItem
    run: ReconcileRun
    finding: Finding
    channel: Channel
    alert: Alert
    ack_id: int
    report: Report
    schedule: ReportSchedule
    tokens: dict[tuple[str, str], str]  # (who, scope) -> raw token
    token_ids: dict[str, int]  # who -> the id of one of their own tokens

    def kwargs_for(self, route: str, who: str) -> dict[str, Any]:
        owner = who if who in self.token_ids else VIEWER  # anonymous has no token of their own
        values: dict[str, Any] = {
            "finding_id": self.finding.pk,
            "binding": self.binding.name,
            "key": "TCK-1",
            "channel_id": self.channel.pk,
            "alert_id": self.alert.pk,
            "ack_id": self.ack_id,
            "report_id": self.report.pk,
            "schedule_id": self.schedule.pk,
            "token_id": self.token_ids[owner],
            "run_id": self.run.pk,
            "name": self.rule.name,
            "item_id": self.item.pk,
        }
        return {name: values[name] for name in values if f":{name}>" in route}


def fill(route: str, kwargs: dict[str, Any]) -> str:
    """The URL of ``route`` with its <converter:name> parts filled in."""
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: str(kwargs[m.group(1)]), route)


@pytest.fixture
def queued(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """Tasks the views hand to Celery, kept here: this module checks who may trigger, the
    task tests check what the tasks do (and no stray task is left on the shared queue)."""
    from auditor.lint.tasks import scan_all_task
    from auditor.stuck.tasks import diagnose_rule_task

    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(scan_all_task, "delay", lambda *args: calls.append(("lint", *args)))
    monkeypatch.setattr(diagnose_rule_task, "delay", lambda *args: calls.append(("stuck", *args)))
    monkeypatch.setattr("auditor.lint.tasks.scan_running", lambda: False)
    return calls


SECRETS = ("matrix-sasl-pw-1", "matrix-key-pw-2", "matrix-db-pw-3", "matrix-sslkey-pw-4")


def assert_no_secret(content: bytes | str, where: str) -> None:
    text = content.decode(errors="replace") if isinstance(content, bytes) else content
    shown = [secret for secret in SECRETS if secret in text]
    assert not shown, f"{where} shows secret(s) {shown}"


def make_world(users: dict[str, AbstractBaseUser]) -> World:
    # A production-like configuration: a SASL_SSL cluster and a TLS source, with secrets both
    # as ${ENV} references (resolved here) and written in literally. No page, API answer or
    # webhook payload may show any of them.
    cluster = Cluster.objects.create(
        name="matrix",
        bootstrap_servers="127.0.0.1:9",
        config={
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "auditor",
            "sasl.password": "${MATRIX_SASL_PASSWORD}",
            "ssl.ca.location": "/etc/ca.pem",
            "ssl.key.password": SECRETS[1],
        },
    )
    source = SourceDatabase.objects.create(
        name="matrix",
        url=f"postgresql://app:{SECRETS[2]}@127.0.0.1/app?sslmode=verify-full&sslpassword={SECRETS[3]}",
    )
    binding = Binding.objects.create(
        name="matrix", cluster=cluster, topic="matrix", source=source, table="public.t", key_column="id"
    )
    rule = StuckRule.objects.create(
        name="matrix", binding=binding, status_column="status", stuck_values=["NEW"], age_column="created_at"
    )
    record_diagnosis(
        start_run(rule, "schedule"),
        DiagnosisResult(
            rule.name,
            items=[ItemVerdict(StuckRow("TCK-1", "NEW", 900.0), Diagnosis("skipped", "committed past it", {}))],
            engine="python",
        ),
    )
    item = StuckItem.objects.get(rule=rule, key="TCK-1")
    run = ReconcileRun.objects.create(binding=binding, trigger="schedule", status="ok", finished_at=timezone.now())
    finding = Finding.objects.create(run=run, binding=binding, kind="missing", key="TCK-1")
    channel = Channel.objects.create(name="matrix", url="https://hooks.example.com/x", secret="${MATRIX_SECRET}")
    now = timezone.now()
    alert = Alert.objects.create(
        channel=channel,
        fingerprint="missing:matrix",
        kind="missing",
        summary="1 missing",
        first_seen=now,
        last_seen=now,
    )
    ack = acknowledge(users[ADMIN], PROBLEM_ACK_KIND, "missing:matrix", action="ack", reason="known")
    report = Report.objects.create(
        title="matrix",
        trigger="manual",
        period_start=now - timedelta(days=1),
        period_end=now,
        status="ok",
        html="<p>report</p>",
        csv="kind,key\r\n",
    )
    schedule = ReportSchedule.objects.create(name="matrix")
    tokens = {}
    token_ids = {}
    for who, user in users.items():
        for scope in (ApiToken.READ, ApiToken.WRITE):
            token, raw = create_token(user, f"{who}-{scope}", scope)
            tokens[(who, scope)] = raw
            token_ids[who] = token.pk
    return World(
        users=users,
        binding=binding,
        rule=rule,
        item=item,
        run=run,
        finding=finding,
        channel=channel,
        alert=alert,
        ack_id=ack.pk,
        report=report,
        schedule=schedule,
        tokens=tokens,
        token_ids=token_ids,
    )


@pytest.fixture(scope="module")
def module_world(django_db_setup: None, django_db_blocker: DjangoDbBlocker) -> Iterator[World]:
    """The world, made once for the module in a transaction that is never committed (as
    Django's setUpTestData does): each test runs in a savepoint of it, so what a test's POST
    changes is rolled back after it as before, and the module's end rolls the world back."""
    with pytest.MonkeyPatch.context() as patch, django_db_blocker.unblock(), transaction.atomic():
        patch.setenv("MATRIX_SASL_PASSWORD", SECRETS[0])
        users: dict[str, AbstractBaseUser] = {}
        for name in ROLE_NAMES:
            user = get_user_model().objects.create_user(username=f"user-{name}")  # no password: no hashing
            grant_role(user, None if name == NO_ROLE else name)
            users[name] = user
        yield make_world(users)
        transaction.set_rollback(True)


@pytest.fixture
def world(module_world: World, db: None, queued: list[tuple[Any, ...]]) -> World:
    """The module's world, in this test's savepoint, with the views' Celery tasks kept here."""
    return module_world


def client_for(world: World, who: str) -> Client:
    client = Client()
    if who != ANONYMOUS:
        client.force_login(world.users[who])
    return client


def send(client: Client, method: str, url: str, data: dict[str, Any] | None, **extra: Any) -> Any:
    if method == "GET":
        return client.get(url, **extra)
    return client.post(url, data or {}, **extra)


# --- pages ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("route", "method", "who"), page_cases(PAGES))
def test_it_gives_each_role_its_pages_and_denies_the_others(world: World, route: str, method: str, who: str) -> None:
    access = PAGES[route][method]
    url = fill(route, world.kwargs_for(route, who))
    response = send(client_for(world, who), method, url, access.data)
    assert_no_secret(response.content, f"{method} {url} for {who}")

    if who == ANONYMOUS:
        assert response.status_code == 302
        assert response["Location"].startswith("/login/?next="), response["Location"]
    elif RANK[who] < RANK[access.role]:
        assert response.status_code == 403, f"{who} must not {method} {url}"
    else:
        assert response.status_code == access.status, f"{who} {method} {url}: {response.content[:300]!r}"
        if response.status_code == 302:
            assert not response["Location"].startswith("/login/")


@pytest.mark.parametrize(("route", "method", "who"), page_cases(TOKEN_PAGES))
def test_it_answers_token_pages_with_401_not_a_login_redirect(world: World, route: str, method: str, who: str) -> None:
    access = TOKEN_PAGES[route][method]
    url = fill(route, world.kwargs_for(route, who))
    by_session = send(client_for(world, who), method, url, access.data)
    expected = 401 if who == ANONYMOUS else 403 if RANK[who] < RANK[access.role] else access.status
    assert by_session.status_code == expected
    if who != ANONYMOUS:
        header = {"Authorization": f"Bearer {world.tokens[(who, ApiToken.READ)]}"}
        assert send(Client(), method, url, access.data, headers=header).status_code == expected


def _other_method(methods: dict[str, Access]) -> list[str]:
    return [m for m in ("GET", "POST") if m not in methods]


@pytest.mark.parametrize(
    ("route", "method"), [(route, m) for route, methods in PAGES.items() for m in _other_method(methods)]
)
def test_it_refuses_the_methods_a_page_does_not_take_even_for_admins(world: World, route: str, method: str) -> None:
    url = fill(route, world.kwargs_for(route, ADMIN))
    response = send(client_for(world, ADMIN), method, url, {})
    assert response.status_code == 405, f"{method} {url} answered {response.status_code}"


# --- the JSON API -----------------------------------------------------------------------------


def api_cases() -> list[tuple[str, str, str]]:
    discover()
    credentials = ["no token", f"{NO_ROLE} token", f"{NO_ROLE} session"]
    credentials += [f"{role} {scope}" for role in ROLES for scope in (ApiToken.READ, ApiToken.WRITE, "session")]
    return [(op.name, op.method, cred) for op in sorted(registry.all(), key=lambda o: o.name) for cred in credentials]


@pytest.mark.parametrize(("name", "method", "credential"), api_cases())
def test_it_checks_token_scope_and_role_on_every_api_endpoint(
    world: World, name: str, method: str, credential: str
) -> None:
    discover()
    operation = next(op for op in registry.all() if op.name == name)
    access = API[name]
    url = fill(f"api/{operation.path}", world.kwargs_for(operation.path, VIEWER))
    who, _, how = credential.partition(" ")
    client, headers = Client(), {}
    if how == "session":
        client = client_for(world, who)  # the test client skips CSRF checks: roles are what is tested
    elif who != "no":
        scope = ApiToken.WRITE if how == ApiToken.WRITE else ApiToken.READ
        headers = {"Authorization": f"Bearer {world.tokens[(who, scope)]}"}
    if method == "GET":
        response = client.get(url, headers=headers)
    else:
        response = client.post(url, json.dumps(access.data or {}), content_type="application/json", headers=headers)

    assert_no_secret(response.content, f"{method} {url} for {credential}")
    if who == "no":
        assert response.status_code == 401
    elif how == ApiToken.READ and method != "GET":
        assert response.status_code == 403 and "write-scope" in response.json()["error"]
    elif RANK[who] < RANK[access.role]:
        assert response.status_code == 403, f"{credential} must not {method} {url}"
    else:
        assert response.status_code == access.status, f"{credential} {method} {url}: {response.content[:300]!r}"


# --- secrets in what the auditor sends out ------------------------------------------------------


def test_it_keeps_the_secrets_out_of_webhook_payloads_and_pipeline_listings(world: World) -> None:
    from auditor.alerts.models import Delivery
    from auditor.alerts.outbox import send_test
    from auditor.reconcile.alerting import sync_problems

    send_test(world.channel, world.users[ADMIN])
    sync_problems(world.run)  # the world's missing finding, to every channel that hears of it
    payloads = list(Delivery.objects.values_list("payload", flat=True))
    assert payloads
    assert_no_secret(json.dumps(payloads), "a webhook payload")
    listing = client_for(world, ADMIN).get("/pipelines/")
    assert b"${MATRIX_SASL_PASSWORD}" in listing.content  # the reference is shown, its value never
    assert_no_secret(listing.content, "the pipelines page")
