"""Diagnoses on the worker: on each rule's beat schedule (schedules.py), or on demand."""

from __future__ import annotations

import logging

from celery import shared_task
from django.contrib.auth import get_user_model

from auditor.pipelines.models import StuckRule
from auditor.stuck.models import DiagnosisRun
from auditor.stuck.runlock import DiagnosisBusy
from auditor.stuck.service import run_diagnosis

log = logging.getLogger(__name__)

DIAGNOSIS_TIME_LIMIT = 1800


@shared_task(time_limit=DIAGNOSIS_TIME_LIMIT, soft_time_limit=DIAGNOSIS_TIME_LIMIT - 60)
def diagnose_rule_task(
    rule_id: int, trigger: str = DiagnosisRun.SCHEDULE, requested_by_id: int | None = None
) -> int | None:
    """Diagnose one rule; returns the run's id, or None (rule gone, or a diagnosis of it running)."""
    rule = StuckRule.objects.select_related("binding", "binding__cluster", "binding__source").filter(pk=rule_id).first()
    if rule is None:
        log.warning("stuck rule %s no longer exists: diagnosis skipped", rule_id)
        return None
    user = get_user_model().objects.filter(pk=requested_by_id).first() if requested_by_id else None
    try:
        return run_diagnosis(rule, trigger, requested_by=user).pk
    except DiagnosisBusy:
        log.info("diagnosis of %s (%s) skipped: another one is running", rule.name, trigger)
        return None
