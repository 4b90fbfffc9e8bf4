"""JSON API of reports: list them, read one's summary, download its HTML or CSV."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse

from auditor.api.registry import ApiCall, ApiError, Param, endpoint, paginate
from auditor.reports.models import Report, ReportSchedule
from auditor.reports.render import render_document

REPORT_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "title": {"type": "string"},
        "schedule": {"type": ["string", "null"]},
        "trigger": {"type": "string", "enum": [t for t, _ in Report.TRIGGERS]},
        "status": {"type": "string", "enum": [s for s, _ in Report.STATUSES]},
        "error": {"type": "string"},
        "period_start": {"type": "string", "format": "date-time"},
        "period_end": {"type": "string", "format": "date-time"},
        "bindings": {"type": "array", "items": {"type": "string"}},
        "created_at": {"type": "string", "format": "date-time"},
        "finished_at": {"type": ["string", "null"], "format": "date-time"},
        "csv_rows": {"type": "integer"},
        "totals": {"type": "object", "description": "headline numbers: runs, failed_runs, findings, stuck, ..."},
        "delivery": {"type": "object"},
        "links": {
            "type": "object",
            "properties": {"page": {"type": "string"}, "html": {"type": "string"}, "csv": {"type": "string"}},
        },
        "summary": {"type": "object", "description": "only on the single-report endpoint: every section's numbers"},
    },
}


def _report(report_id: int, defer: tuple[str, ...] = ("html", "csv")) -> Report:
    report = Report.objects.select_related("schedule").defer(*defer).filter(pk=report_id).first()
    if report is None:
        raise ApiError(404, f"no report {report_id}")
    return report


@endpoint(
    "reports/",
    name="reports-list",
    summary="Reports, newest first",
    tag="reports",
    query=[
        Param("schedule", description="only this schedule's reports (its name)", max_length=100),
        Param("status", description="only reports in this status", enum=tuple(s for s, _ in Report.STATUSES)),
    ],
    item=REPORT_SCHEMA,
    paginated=True,
)
def list_reports(call: ApiCall) -> dict[str, Any]:
    reports = Report.objects.select_related("schedule").defer("html", "csv").order_by("-created_at", "-id")
    if call.query["schedule"]:
        schedule = ReportSchedule.objects.filter(name=call.query["schedule"]).first()
        if schedule is None:
            raise ApiError(404, f"no report schedule named {call.query['schedule']!r}")
        reports = reports.filter(schedule=schedule)
    if call.query["status"]:
        reports = reports.filter(status=call.query["status"])
    return paginate(call, reports, Report.as_dict)


@endpoint(
    "reports/<int:report_id>/",
    name="report",
    summary="One report with the numbers of every section",
    tag="reports",
    item=REPORT_SCHEMA,
)
def get_report(call: ApiCall, report_id: int) -> dict[str, Any]:
    return _report(report_id).as_dict(with_summary=True)


def _attachment(body: str, content_type: str, filename: str) -> HttpResponse:
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@endpoint(
    "reports/<int:report_id>/csv/",
    name="report-csv",
    summary="Download a report's findings and stuck items as CSV (text/csv)",
    tag="reports",
)
def download_csv(call: ApiCall, report_id: int) -> HttpResponse:
    report = _report(report_id, defer=("html",))
    return _attachment(report.csv, "text/csv; charset=utf-8", f"report-{report.pk}-findings.csv")


@endpoint(
    "reports/<int:report_id>/html/",
    name="report-html",
    summary="Download a report as a standalone HTML file with plotly.js inline (text/html; opens offline)",
    tag="reports",
)
def download_html(call: ApiCall, report_id: int) -> HttpResponse:
    report = _report(report_id, defer=("csv",))
    return _attachment(render_document(report), "text/html; charset=utf-8", f"report-{report.pk}.html")
