"""Report pages: viewers read and download, operators build now, admins edit schedules."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Prefetch, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from auditor.accounts.roles import ADMIN, OPERATOR, VIEWER, SignedInRequest, has_role, require_role
from auditor.pipelines.models import Binding
from auditor.reports.forms import BuildForm, ScheduleForm
from auditor.reports.models import Report, ReportSchedule
from auditor.reports.render import headline, render_document
from auditor.reports.service import build_now

PAGE_SIZE = 50
# The list never loads the stored bodies and CSVs.
LIST_FIELDS = (
    "id",
    "title",
    "schedule",
    "trigger",
    "status",
    "error",
    "period_start",
    "period_end",
    "created_at",
    "finished_at",
    "csv_rows",
    "summary",
    "delivery",
)


def _schedules() -> QuerySet[ReportSchedule]:
    return ReportSchedule.objects.prefetch_related(
        Prefetch("bindings", queryset=Binding.objects.order_by("name")), "channels"
    )


@require_GET
@require_role(VIEWER)
def index(request: HttpRequest) -> HttpResponse:
    schedules = list(_schedules())
    reports = Report.objects.select_related("schedule").only(*LIST_FIELDS)
    chosen = request.GET.get("schedule", "").strip()
    selected = next((s for s in schedules if chosen in (str(s.pk), s.name)), None) if chosen else None
    if chosen and selected is None:
        messages.error(request, f"No report schedule {chosen!r}; showing every report.")
    if selected is not None:
        reports = reports.filter(schedule=selected)
    page = Paginator(reports, PAGE_SIZE).get_page(request.GET.get("page"))
    for report in page.object_list:
        report.cards = headline(report.totals)  # type: ignore[attr-defined]  # for the template only
    return render(
        request,
        "reports/index.html",
        {
            "page": page,
            "schedules": schedules,
            "selected": selected,
            "build_form": BuildForm(),
            "can_operate": has_role(request.user, OPERATOR),
            "can_admin": has_role(request.user, ADMIN),
        },
    )


@require_GET
@require_role(VIEWER)
def report_page(request: HttpRequest, report_id: int) -> HttpResponse:
    report = get_object_or_404(Report.objects.select_related("schedule", "requested_by").defer("csv"), pk=report_id)
    return render(request, "reports/report.html", {"report": report})


def _download(body: str, content_type: str, filename: str) -> HttpResponse:
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_GET
@require_role(VIEWER)
def download_html(request: HttpRequest, report_id: int) -> HttpResponse:
    report = get_object_or_404(Report.objects.defer("csv"), pk=report_id)
    return _download(render_document(report), "text/html; charset=utf-8", f"report-{report.pk}.html")


@require_GET
@require_role(VIEWER)
def download_csv(request: HttpRequest, report_id: int) -> HttpResponse:
    report = get_object_or_404(Report.objects.only("id", "csv"), pk=report_id)
    return _download(report.csv, "text/csv; charset=utf-8", f"report-{report.pk}-findings.csv")


@require_POST
@require_role(OPERATOR)
def build(request: SignedInRequest) -> HttpResponse:
    form = BuildForm(request.POST)
    if not form.is_valid():
        errors = "; ".join(f"{field}: {' '.join(map(str, errs))}" for field, errs in form.errors.items())
        messages.error(request, f"Not built: {errors}")
        return redirect("reports:index")
    data = form.cleaned_data
    try:
        report = build_now(
            trigger=Report.MANUAL,
            schedule=data["schedule"],
            since_seconds=data["since"],
            requested_by=request.user,
            deliver=data["deliver"],  # without a schedule: refused with the reason
        )
    except ValueError as exc:
        messages.error(request, f"Not built: {exc}")
        return redirect("reports:index")
    if report.status == Report.OK:
        messages.success(request, f"Report {report.pk} built.")
    else:
        messages.error(request, f"Report {report.pk} is {report.status}: {report.error}")
    return redirect("reports:report", report_id=report.pk)


@require_http_methods(["GET", "POST"])
@require_role(ADMIN)
def schedule_edit(request: HttpRequest, schedule_id: int | None = None) -> HttpResponse:
    schedule = get_object_or_404(ReportSchedule, pk=schedule_id) if schedule_id is not None else None
    form = ScheduleForm(request.POST or None, instance=schedule)
    if request.method == "POST" and form.is_valid():
        saved = form.save()
        messages.success(request, f"Report schedule {saved.name} saved; beat builds it {saved.get_period_display()}.")
        return redirect(f"{reverse('reports:index')}?schedule={saved.pk}")
    return render(request, "reports/schedule_form.html", {"form": form, "schedule": schedule})


@require_POST
@require_role(ADMIN)
def schedule_delete(request: HttpRequest, schedule_id: int) -> HttpResponse:
    schedule = get_object_or_404(ReportSchedule, pk=schedule_id)
    schedule.delete()
    messages.success(request, f"Report schedule {schedule.name} deleted; its reports are kept.")
    return redirect("reports:index")
