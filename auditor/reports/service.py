"""Build reports: run the section providers over the bindings and the period, render and store.

One function per state change: ``start_report`` (a ``building`` row; for a schedule the
row is the claim, one per schedule and period), ``finish_report`` (body, CSV, summary,
status in one update) and ``fail_report``. ``build_report`` chains them and never
raises for a failing section: the report says what is missing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from auditor.pipelines.models import Binding
from auditor.reports import conf
from auditor.reports.csvexport import to_csv
from auditor.reports.delivery import deliver_report
from auditor.reports.models import Report, ReportSchedule
from auditor.reports.periods import DAILY, check_period, last_full_period
from auditor.reports.render import render_body
from auditor.reports.sections import BuiltSection, registry

log = logging.getLogger(__name__)


def resolve_bindings(names: Iterable[str] | None) -> list[Binding]:
    """The bindings named (every binding when ``names`` is empty); ValueError naming the unknown ones."""
    wanted = sorted(set(names or ()))
    bindings = Binding.objects.select_related("cluster").order_by("name")
    if not wanted:
        return list(bindings)
    found = list(bindings.filter(name__in=wanted))
    missing = sorted(set(wanted) - {b.name for b in found})
    if missing:
        known = ", ".join(Binding.objects.order_by("name").values_list("name", flat=True)) or "none"
        raise ValueError(f"unknown binding(s) {', '.join(missing)} (known: {known})")
    return found


def report_title(schedule: ReportSchedule | None, start: datetime, end: datetime, bindings: Sequence[Binding]) -> str:
    if schedule is not None:
        if schedule.period == DAILY and (end - start).days == 1:
            return f"{schedule.name}: daily report for {start:%Y-%m-%d}"
        return f"{schedule.name}: report for {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC"
    what = "all bindings" if len(bindings) == Binding.objects.count() else ", ".join(b.name for b in bindings)
    return f"Report on {what[:120]}: {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC"


def start_report(
    bindings: Sequence[Binding],
    start: datetime,
    end: datetime,
    *,
    trigger: str,
    schedule: ReportSchedule | None = None,
    requested_by: User | None = None,
) -> Report:
    check_period(start, end)
    return Report.objects.create(
        schedule=schedule,
        title=report_title(schedule, start, end, bindings),
        trigger=trigger,
        requested_by=requested_by,
        period_start=start,
        period_end=end,
        binding_names=[b.name for b in bindings],
    )


def claim_scheduled_report(schedule: ReportSchedule, start: datetime, end: datetime) -> Report | None:
    """The schedule's report of the period, or None when another worker already claimed it."""
    try:
        with transaction.atomic():
            return start_report(schedule.chosen_bindings(), start, end, trigger=Report.SCHEDULE, schedule=schedule)
    except IntegrityError:
        return None


def _summary(report: Report, sections: Sequence[BuiltSection], csv_rows: int, truncated: bool) -> dict[str, Any]:
    totals: dict[str, Any] = {}
    for section in sections:
        totals.update(section.summary.get("totals") or {})
    return {
        "title": report.title,
        "period": {"start": report.period_start.isoformat(), "end": report.period_end.isoformat()},
        "bindings": list(report.binding_names),
        "totals": totals,
        "sections": {s.name: s.summary for s in sections if s.ok},
        "unavailable": {s.name: s.unavailable for s in sections if s.unavailable},
        "errors": {s.name: s.error for s in sections if s.error},
        "notes": {s.name: s.notes for s in sections if s.notes},
        "csv": {"rows": csv_rows, "truncated": truncated},
    }


def finish_report(report: Report, sections: Sequence[BuiltSection]) -> Report:
    limit = conf.max_csv_rows()
    rows = [row for section in sections for row in section.csv_rows]
    truncated = len(rows) > limit or any(s.result and s.result.get("csv_truncated") for s in sections)
    rows = rows[:limit]
    summary = _summary(report, sections, len(rows), truncated)
    html = render_body(
        report.title, report.period_start, report.period_end, report.binding_names, summary["totals"], sections
    )
    report.html, report.csv, report.csv_rows, report.summary = html, to_csv(rows), len(rows), summary
    report.status = Report.PARTIAL if summary["errors"] else Report.OK
    report.error = "; ".join(f"section {name}: {error}" for name, error in summary["errors"].items())
    report.finished_at = timezone.now()
    report.save(update_fields=["html", "csv", "csv_rows", "summary", "status", "error", "finished_at"])
    return report


def fail_report(report: Report, error: str) -> Report:
    report.status, report.error, report.finished_at = Report.FAILED, error[:5000], timezone.now()
    report.save(update_fields=["status", "error", "finished_at"])
    return report


def fill_report(report: Report, bindings: Sequence[Binding]) -> Report:
    """Run the sections and store the result; a failure to render fails the report, not the caller."""
    try:
        sections = registry.build(bindings, report.period_start, report.period_end)
        return finish_report(report, sections)
    except Exception as exc:  # the row must not stay "building" forever
        log.exception("report %s could not be built", report.pk)
        return fail_report(report, f"{type(exc).__name__}: {exc}")


def build_report(
    bindings: Sequence[Binding],
    start: datetime,
    end: datetime,
    *,
    trigger: str,
    schedule: ReportSchedule | None = None,
    requested_by: User | None = None,
) -> Report:
    """Build a report now (the page's "build now", the CLI); the caller decides on delivery."""
    report = start_report(bindings, start, end, trigger=trigger, schedule=schedule, requested_by=requested_by)
    return fill_report(report, bindings)


def build_scheduled_report(schedule_id: int, now: datetime | None = None, deliver: bool = True) -> Report | None:
    """Beat's entry point: the schedule's report of the last whole period, built once, then delivered."""
    schedule = ReportSchedule.objects.filter(pk=schedule_id).first()
    if schedule is None:
        log.warning("report schedule #%s no longer exists; its beat task is stale", schedule_id)
        return None
    start, end = last_full_period(schedule.period, now or timezone.now())
    report = claim_scheduled_report(schedule, start, end)
    if report is None:
        log.info("report %s for %s was already built", schedule.name, start.isoformat())
        return None
    report = fill_report(report, schedule.chosen_bindings())
    if deliver:  # a failed report is news too: its notice says why
        deliver_report(report)
    return report


DEFAULT_SINCE_SECONDS = 86400


def build_now(
    *,
    trigger: str,
    schedule: ReportSchedule | None = None,
    binding_names: Iterable[str] | None = None,
    since_seconds: int | None = None,
    requested_by: User | None = None,
    deliver: bool = False,
    now: datetime | None = None,
) -> Report:
    """A report built on demand: a schedule's bindings over its last whole period (or the last
    ``since_seconds``), or the named bindings (all when none) over the last ``since_seconds``
    (a day by default). Only a schedule's report can be delivered: it names the recipients."""
    now = now or timezone.now()
    if schedule is not None:
        if binding_names:
            raise ValueError("a schedule names its own bindings: give a schedule or bindings, not both")
        bindings = schedule.chosen_bindings()
        if since_seconds:
            start, end = now - timedelta(seconds=since_seconds), now
        else:
            start, end = last_full_period(schedule.period, now)
    else:
        if deliver:
            raise ValueError("only a schedule's report can be delivered (the schedule names channels and recipients)")
        bindings = resolve_bindings(binding_names)
        start, end = now - timedelta(seconds=since_seconds or DEFAULT_SINCE_SECONDS), now
    report = build_report(bindings, start, end, trigger=trigger, schedule=schedule, requested_by=requested_by)
    if deliver:
        report = deliver_report(report)
    return report
