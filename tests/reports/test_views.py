"""Report pages for each role: viewers read and download, operators build now, admins edit schedules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django_celery_beat.models import PeriodicTask

from auditor.reports.models import Report, ReportSchedule
from auditor.reports.service import build_report
from tests.support.reports import END, HOSTILE, START, ReportData

pytestmark = pytest.mark.django_db

ClientAs = Callable[[str], Client]


@pytest.fixture
def report(report_data: ReportData) -> Report:
    schedule = ReportSchedule.objects.create(name="ops")
    return build_report([report_data.tickets, report_data.orders], START, END, trigger="cli", schedule=schedule)


@pytest.mark.parametrize(
    ("role", "status"), [("anonymous", 302), ("none", 403), ("viewer", 200), ("operator", 200), ("admin", 200)]
)
def test_it_shows_reports_to_viewers_and_up(client_as: ClientAs, report: Report, role: str, status: int) -> None:
    for url in (
        "/reports/",
        f"/reports/{report.pk}/",
        f"/reports/{report.pk}/report.html",
        f"/reports/{report.pk}/findings.csv",
    ):
        assert client_as(role).get(url).status_code == status, url


def test_it_lists_reports_filtered_by_schedule(client_as: ClientAs, report: Report, report_data: ReportData) -> None:
    other = build_report([report_data.tickets], START, END, trigger="cli")
    viewer = client_as("viewer")

    everything = viewer.get("/reports/").content.decode()
    assert f'data-report="{report.pk}"' in everything and f'data-report="{other.pk}"' in everything
    assert "Build now" not in everything and "New schedule" not in everything

    filtered = viewer.get(f"/reports/?schedule={report.schedule_id}").content.decode()
    assert f'data-report="{report.pk}"' in filtered and f'data-report="{other.pk}"' not in filtered
    assert viewer.get("/reports/?schedule=ops").context["selected"].name == "ops"


def test_it_renders_the_report_page_with_plotly_from_static_files(client_as: ClientAs, report: Report) -> None:
    page = client_as("viewer").get(f"/reports/{report.pk}/").content.decode()
    assert '<script src="/static/vendor/plotly/plotly.min.js"></script>' in page
    assert 'id="chart-stuck-1"' in page and "Plotly.newPlot" in page
    assert HOSTILE not in page and "&lt;img src=x" in page
    assert f'href="/reports/{report.pk}/findings.csv"' in page


def test_it_downloads_the_csv_and_the_offline_html(client_as: ClientAs, report: Report) -> None:
    viewer = client_as("viewer")
    csv_response = viewer.get(f"/reports/{report.pk}/findings.csv")
    assert csv_response["Content-Type"] == "text/csv; charset=utf-8"
    assert csv_response["Content-Disposition"] == f'attachment; filename="report-{report.pk}-findings.csv"'
    assert csv_response.content.decode() == report.csv

    html_response = viewer.get(f"/reports/{report.pk}/report.html")
    assert html_response["Content-Disposition"] == f'attachment; filename="report-{report.pk}.html"'
    body = html_response.content.decode()
    assert "/static/" not in body.split("<body>", 1)[1] and len(body) > 3_000_000


@pytest.mark.parametrize(("role", "status"), [("anonymous", 302), ("none", 403), ("viewer", 403), ("operator", 302)])
def test_it_builds_now_for_operators_only(client_as: ClientAs, report_data: ReportData, role: str, status: int) -> None:
    response = client_as(role).post("/reports/build/", {"since": "2h"})
    assert response.status_code == status
    built = Report.objects.filter(trigger="manual").first()
    if role == "operator":
        assert built is not None and response["Location"] == f"/reports/{built.pk}/"
        assert built.requested_by.username == "user-operator"
        assert (built.period_end - built.period_start).total_seconds() == 7200
        assert built.binding_names == ["orders", "other", "tickets"]
    else:
        assert built is None


def test_it_builds_a_schedule_s_report_now_and_delivers_it_when_asked(
    client_as: ClientAs, settings: Any, report_data: ReportData
) -> None:
    settings.EMAIL_HOST = "smtp.example.com"
    schedule = ReportSchedule.objects.create(name="ops", all_bindings=False, email_recipients=["a@example.com"])
    schedule.bindings.set([report_data.orders])
    operator = client_as("operator")

    operator.post("/reports/build/", {"schedule": schedule.pk, "deliver": "on"})

    built = Report.objects.get(trigger="manual")
    assert (built.schedule, built.binding_names, built.delivery["email"]["status"]) == (schedule, ["orders"], "sent")


def test_it_refuses_a_bad_duration(client_as: ClientAs, db: None) -> None:
    response = client_as("operator").post("/reports/build/", {"since": "soon"}, follow=True)
    assert "Not built: since: &#x27;soon&#x27; is not a duration" in response.content.decode()
    assert not Report.objects.exists()


def test_it_refuses_get_on_build_now(client_as: ClientAs, db: None) -> None:
    assert client_as("operator").get("/reports/build/").status_code == 405


def test_it_needs_the_csrf_token_to_build(role_users: dict[str, Any], db: None) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(role_users["operator"])
    assert client.post("/reports/build/", {"since": "1h"}).status_code == 403


@pytest.mark.parametrize(("role", "status"), [("viewer", 403), ("operator", 403), ("admin", 200)])
def test_it_lets_only_admins_edit_schedules(client_as: ClientAs, db: None, role: str, status: int) -> None:
    assert client_as(role).get("/reports/schedules/new/").status_code == status
    schedule = ReportSchedule.objects.create(name="ops")
    assert client_as(role).get(f"/reports/schedules/{schedule.pk}/edit/").status_code == status
    assert client_as(role).post(f"/reports/schedules/{schedule.pk}/delete/").status_code == (
        302 if role == "admin" else 403
    )


def test_it_creates_edits_and_deletes_a_schedule_with_its_task(client_as: ClientAs, report_data: ReportData) -> None:
    admin = client_as("admin")
    response = admin.post(
        "/reports/schedules/new/",
        {
            "name": "weekly-ops",
            "period": "weekly",
            "enabled": "on",
            "bindings": [report_data.tickets.pk],
            "email_recipients": "a@example.com, b@example.com\nc@example.com",
        },
    )
    schedule = ReportSchedule.objects.get(name="weekly-ops")
    assert response.status_code == 302 and response["Location"] == f"/reports/?schedule={schedule.pk}"
    assert (schedule.all_bindings, [b.name for b in schedule.bindings.all()]) == (False, ["tickets"])
    assert schedule.email_recipients == ["a@example.com", "b@example.com", "c@example.com"]
    assert PeriodicTask.objects.get(name="report: weekly-ops").crontab.day_of_week == "1"

    admin.post(
        f"/reports/schedules/{schedule.pk}/edit/", {"name": "weekly-ops", "period": "daily", "all_bindings": "on"}
    )
    task = PeriodicTask.objects.get(name="report: weekly-ops")
    assert (task.crontab.day_of_week, task.enabled) == ("*", False)

    admin.post(f"/reports/schedules/{schedule.pk}/delete/")
    assert not ReportSchedule.objects.exists() and not PeriodicTask.objects.filter(name__startswith="report:").exists()


def test_it_rejects_a_schedule_without_bindings_or_with_bad_addresses(client_as: ClientAs, db: None) -> None:
    response = client_as("admin").post(
        "/reports/schedules/new/", {"name": "ops", "period": "daily", "email_recipients": "not-an-address"}
    )
    errors = response.context["form"].errors
    assert errors["bindings"] == ["choose at least one binding, or report on all bindings"]
    assert errors["email_recipients"] == ["not an e-mail address: not-an-address"]
    assert not ReportSchedule.objects.exists()


def test_it_says_why_a_report_without_schedule_is_not_delivered(client_as: ClientAs, db: None) -> None:
    response = client_as("operator").post("/reports/build/", {"since": "1h", "deliver": "on"}, follow=True)
    assert "Not built: only a schedule&#x27;s report can be delivered" in response.content.decode()
    assert not Report.objects.exists()
