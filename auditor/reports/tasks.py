from __future__ import annotations

from celery import shared_task

from auditor.reports.service import build_scheduled_report


@shared_task(time_limit=1800, soft_time_limit=1740, ignore_result=True)
def build_scheduled_report_task(schedule_id: int) -> int | None:
    """Beat's entry point (one PeriodicTask per schedule): build and deliver the last period's report."""
    report = build_scheduled_report(schedule_id)
    return report.pk if report else None
