"""Report schedules and the reports built from them (or on demand).

A report keeps everything it showed: the rendered HTML body (charts included, as
Plotly divs), the CSV of findings and a JSON summary of the numbers. It does not depend
on the rows it was built from, which other apps prune.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import models
from django.db.models import Q
from django.utils.safestring import SafeString, mark_safe

from auditor.alerts.models import Channel
from auditor.pipelines.models import Binding
from auditor.reports.links import report_links
from auditor.reports.periods import DAILY, PERIODS


def validate_recipients(value: Any) -> None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValidationError("e-mail recipients must be a list of addresses")
    for address in value:
        validate_email(address)


class ReportSchedule(models.Model):
    name = models.SlugField(max_length=100, unique=True)
    period = models.CharField(max_length=10, choices=PERIODS, default=DAILY)
    all_bindings = models.BooleanField(default=True, help_text="report on every binding, now and added later")
    bindings = models.ManyToManyField(
        Binding, blank=True, related_name="report_schedules", help_text="used when 'all bindings' is off"
    )
    channels = models.ManyToManyField(
        Channel,
        blank=True,
        related_name="report_schedules",
        help_text="webhook channels told of each report; none selected: every channel with 'reports' on",
    )
    email_recipients = models.JSONField(default=list, blank=True, validators=[validate_recipients])
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def chosen_bindings(self) -> list[Binding]:
        bindings = Binding.objects.all() if self.all_bindings else self.bindings.all()
        return list(bindings.select_related("cluster").order_by("name"))


class Report(models.Model):
    BUILDING, OK, PARTIAL, FAILED = "building", "ok", "partial", "failed"
    STATUSES = [(BUILDING, "building"), (OK, "ok"), (PARTIAL, "partial: a section failed"), (FAILED, "failed")]
    SCHEDULE, MANUAL, CLI, API = "schedule", "manual", "cli", "api"
    TRIGGERS = [(SCHEDULE, "schedule"), (MANUAL, "manual"), (CLI, "cli"), (API, "api")]

    schedule = models.ForeignKey(
        ReportSchedule, null=True, blank=True, on_delete=models.SET_NULL, related_name="reports"
    )
    title = models.CharField(max_length=200)
    trigger = models.CharField(max_length=10, choices=TRIGGERS)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    binding_names = models.JSONField(default=list, blank=True, help_text="the bindings reported on, by name")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=STATUSES, default=BUILDING)
    error = models.TextField(blank=True)
    html = models.TextField(blank=True, help_text="the rendered report body (sections, tables, Plotly divs)")
    csv = models.TextField(blank=True, help_text="the findings and stuck items, one per row")
    csv_rows = models.PositiveIntegerField(default=0)
    summary = models.JSONField(default=dict, blank=True)
    delivery = models.JSONField(default=dict, blank=True, help_text="what was sent where, and what was skipped")

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # Beat firing twice (or two beats) still builds one report per schedule and period.
            models.UniqueConstraint(
                fields=["schedule", "period_start", "period_end"],
                condition=Q(trigger="schedule"),
                name="reports_one_scheduled_report_per_period",
            )
        ]
        indexes = [models.Index(fields=["schedule", "-created_at"], name="reports_schedule_created")]

    def __str__(self) -> str:
        return f"report {self.pk}: {self.title}"

    def body_html(self) -> SafeString:
        """The stored body. It is the output of reports/_body.html, whose data went through
        Django's auto-escaping; the only unescaped parts are the Plotly divs built by
        auditor.reports.charts from numbers and escaped labels."""
        return mark_safe(self.html)

    @property
    def totals(self) -> dict[str, Any]:
        return dict((self.summary or {}).get("totals") or {})

    def as_dict(self, with_summary: bool = False) -> dict[str, Any]:
        """The JSON shape of a report: the API and `audit report --json`."""
        data: dict[str, Any] = {
            "id": self.pk,
            "title": self.title,
            "schedule": self.schedule.name if self.schedule_id and self.schedule else None,
            "trigger": self.trigger,
            "status": self.status,
            "error": self.error,
            "period_start": self.period_start.isoformat(),
            "period_end": self.period_end.isoformat(),
            "bindings": list(self.binding_names),
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "csv_rows": self.csv_rows,
            "totals": self.totals,
            "delivery": self.delivery,
            "links": report_links(self),
        }
        if with_summary:
            data["summary"] = self.summary
        return data
