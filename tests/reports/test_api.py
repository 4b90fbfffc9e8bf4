"""JSON API of reports: list, one report's summary, downloads; roles and authentication."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.test import Client

from auditor.reports.models import Report, ReportSchedule
from auditor.reports.service import build_report
from tests.support.reports import END, START, ReportData

pytestmark = pytest.mark.django_db


@pytest.fixture
def reports(report_data: ReportData) -> tuple[Report, Report]:
    schedule = ReportSchedule.objects.create(name="ops")
    scheduled = build_report([report_data.tickets], START, END, trigger="schedule", schedule=schedule)
    adhoc = build_report([report_data.orders], START, END, trigger="cli")
    return scheduled, adhoc


def test_it_lists_reports_newest_first_with_filters(
    client_as: Callable[[str], Client], reports: tuple[Report, Report]
) -> None:
    scheduled, adhoc = reports
    body = client_as("viewer").get("/api/reports/").json()
    assert [r["id"] for r in body["results"]] == [adhoc.pk, scheduled.pk] and body["count"] == 2
    first = body["results"][1]
    assert (first["schedule"], first["status"], first["bindings"], first["csv_rows"]) == ("ops", "ok", ["tickets"], 4)
    assert first["totals"]["findings"] == 2 and first["links"]["csv"].endswith(f"/reports/{scheduled.pk}/findings.csv")
    assert "summary" not in first

    only = client_as("viewer").get("/api/reports/?schedule=ops").json()
    assert [r["id"] for r in only["results"]] == [scheduled.pk]
    assert client_as("viewer").get("/api/reports/?schedule=nope").status_code == 404
    assert client_as("viewer").get("/api/reports/?status=failed").json()["count"] == 0


def test_it_returns_one_report_with_its_summary(
    client_as: Callable[[str], Client], reports: tuple[Report, Report]
) -> None:
    scheduled, _ = reports
    body = client_as("viewer").get(f"/api/reports/{scheduled.pk}/").json()
    assert body["summary"]["sections"]["stuck"]["bindings"]["tickets"]["stuck_at_end"] == 2
    assert client_as("viewer").get("/api/reports/999999/").json() == {"error": "no report 999999"}


def test_it_downloads_csv_and_html(client_as: Callable[[str], Client], reports: tuple[Report, Report]) -> None:
    scheduled, _ = reports
    viewer = client_as("viewer")
    csv_response = viewer.get(f"/api/reports/{scheduled.pk}/csv/")
    assert csv_response["Content-Type"] == "text/csv; charset=utf-8" and csv_response.content.decode() == scheduled.csv
    html_response = viewer.get(f"/api/reports/{scheduled.pk}/html/")
    assert html_response["Content-Type"] == "text/html; charset=utf-8"
    assert html_response.content.startswith(b"<!doctype html>")


@pytest.mark.parametrize(("role", "status"), [("anonymous", 401), ("none", 403), ("viewer", 200)])
def test_it_needs_the_viewer_role(
    client_as: Callable[[str], Client], reports: tuple[Report, Report], role: str, status: int
) -> None:
    scheduled, _ = reports
    for url in ("/api/reports/", f"/api/reports/{scheduled.pk}/", f"/api/reports/{scheduled.pk}/csv/"):
        assert client_as(role).get(url).status_code == status, url


def test_it_describes_the_endpoints_in_openapi(client_as: Callable[[str], Client], db: None) -> None:
    paths = client_as("viewer").get("/api/openapi.json").json()["paths"]
    assert {"/api/reports/", "/api/reports/{report_id}/", "/api/reports/{report_id}/csv/"} <= set(paths)
