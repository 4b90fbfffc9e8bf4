"""Diagnosis runs, the stuck items they find (tracked across runs), and counts over time.

An item is open while its row stays stuck: ``first_seen`` is when a diagnosis first found
it ("became stuck"), ``resolved_at`` when a later successful diagnosis no longer did ("got
unstuck"). At most one open item per (rule, key); a key that gets stuck again later opens
a new item.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from auditor.pipelines.models import StuckRule
from auditor.vocabulary import STUCK_VERDICTS

VERDICT_CHOICES = [(v, v) for v in STUCK_VERDICTS]
STUCK_ITEM_ACK_KIND = "stuck-item"


class DiagnosisRun(models.Model):
    SCHEDULE, MANUAL, CLI = "schedule", "manual", "cli"
    TRIGGERS = [(SCHEDULE, "schedule"), (MANUAL, "manual"), (CLI, "cli")]
    RUNNING, OK, FAILED = "running", "ok", "failed"
    STATUSES = [(RUNNING, "running"), (OK, "ok"), (FAILED, "failed")]

    rule = models.ForeignKey(StuckRule, on_delete=models.CASCADE, related_name="diagnosis_runs")
    trigger = models.CharField(max_length=10, choices=TRIGGERS, default=SCHEDULE)
    status = models.CharField(max_length=10, choices=STATUSES, default=RUNNING)
    error = models.TextField(blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_s = models.FloatField(null=True, blank=True)
    engine = models.CharField(max_length=10, blank=True, help_text="python or spark: how records were located")
    total = models.PositiveIntegerField(default=0)
    counts = models.JSONField(default=dict, blank=True, help_text="verdict -> number of items")
    became_stuck = models.PositiveIntegerField(default=0)
    got_unstuck = models.PositiveIntegerField(default=0)
    truncated = models.BooleanField(default=False, help_text="more rows were stuck than one run diagnoses")
    degraded = models.BooleanField(
        default=False, help_text="Kafka or a ledger could not be read: some verdicts unknown"
    )
    risks = models.JSONField(default=list, blank=True, help_text="cluster-side risks seen during the run")
    notes = models.JSONField(default=list, blank=True)
    timings = models.JSONField(default=dict, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [
            models.Index(fields=["rule", "-started_at"], name="stuck_run_rule_started"),
            # The newest finish names the state of the open items (auditor/stuck/counts.py).
            models.Index(fields=["-finished_at"], name="stuck_run_finished"),
        ]

    def __str__(self) -> str:
        return f"diagnosis {self.pk} of {self.rule_id} ({self.status})"

    def as_event(self) -> dict[str, Any]:
        return {
            "id": self.pk,
            "rule": self.rule.name,
            "binding": self.rule.binding.name,
            "trigger": self.trigger,
            "status": self.status,
            "error": self.error,
            "started_at": self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "duration_s": self.duration_s,
            "engine": self.engine,
            "total": self.total,
            "counts": {v: int(self.counts.get(v, 0)) for v in STUCK_VERDICTS},
            "became_stuck": self.became_stuck,
            "got_unstuck": self.got_unstuck,
            "truncated": self.truncated,
            "degraded": self.degraded,
            "risks": list(self.risks),
            "notes": list(self.notes),
        }


class StuckItemQuerySet(models.QuerySet["StuckItem"]):
    def open(self) -> StuckItemQuerySet:
        return self.filter(resolved_at__isnull=True)


class StuckItem(models.Model):
    rule = models.ForeignKey(StuckRule, on_delete=models.CASCADE, related_name="stuck_items")
    key = models.CharField(max_length=1000)
    status = models.CharField(max_length=200, help_text="the row's status when last seen")
    age_seconds = models.FloatField(help_text="the row's age when last diagnosed")
    since = models.DateTimeField(null=True, blank=True, help_text="the row's age column")
    verdict = models.CharField(max_length=30, choices=VERDICT_CHOICES)
    reason = models.TextField(blank=True)
    evidence = models.JSONField(default=dict, blank=True)
    first_seen = models.DateTimeField(help_text="the diagnosis that first found it stuck")
    last_seen = models.DateTimeField()
    verdict_since = models.DateTimeField(help_text="when the current verdict was first given")
    resolved_at = models.DateTimeField(null=True, blank=True, help_text="no longer stuck (got unstuck)")
    first_run = models.ForeignKey(DiagnosisRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    last_run = models.ForeignKey(DiagnosisRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="items")

    objects = StuckItemQuerySet.as_manager()

    class Meta:
        ordering = ["-age_seconds", "key"]
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "key"], condition=Q(resolved_at__isnull=True), name="stuck_item_one_open_per_key"
            )
        ]
        indexes = [
            models.Index(fields=["rule", "verdict"], condition=Q(resolved_at__isnull=True), name="stuck_item_open"),
            # The page reads open items a verdict at a time, oldest first (with or without a rule).
            models.Index(
                fields=["verdict", "-age_seconds", "id"],
                condition=Q(resolved_at__isnull=True),
                name="stuck_item_open_age",
            ),
            models.Index(
                fields=["rule", "verdict", "-age_seconds", "id"],
                condition=Q(resolved_at__isnull=True),
                name="stuck_item_open_rule_age",
            ),
            models.Index(fields=["-resolved_at"], name="stuck_item_resolved"),
        ]

    def __str__(self) -> str:
        return f"{self.rule_id}:{self.key} ({self.verdict})"

    @property
    def acknowledgement_key(self) -> str:
        """An item is one stretch of being stuck: a key stuck again later is a new item, unacknowledged."""
        return str(self.pk)

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of an item: CLI --json, the page's refresh, the API, live events."""
        return {
            "id": self.pk,
            "rule": self.rule.name,
            "key": self.key,
            "status": self.status,
            "age_seconds": round(self.age_seconds, 1),
            "since": self.since.isoformat() if self.since else None,
            "verdict": self.verdict,
            "reason": self.reason,
            "evidence": self.evidence,
            "first_seen": self.first_seen.isoformat(),
            "last_seen": self.last_seen.isoformat(),
            "verdict_since": self.verdict_since.isoformat(),
            "resolved_at": self.resolved_at.isoformat() if self.resolved_at else None,
        }


class VerdictCount(models.Model):
    """One point of the chart: how many items of a rule had a verdict after a run."""

    rule = models.ForeignKey(StuckRule, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(DiagnosisRun, on_delete=models.CASCADE, related_name="points")
    at = models.DateTimeField()
    verdict = models.CharField(max_length=30, choices=VERDICT_CHOICES)
    count = models.PositiveIntegerField()

    class Meta:
        ordering = ["at", "verdict"]
        indexes = [models.Index(fields=["rule", "at"], name="stuck_count_rule_at")]
