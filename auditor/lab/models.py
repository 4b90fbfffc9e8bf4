"""Lab runs and their per-scenario results: the auditor's reliability record."""

from __future__ import annotations

from typing import Any

from django.db import models


class LabRun(models.Model):
    RUNNING, OK, FAILED = "running", "ok", "failed"
    STATUSES = [(s, s) for s in (RUNNING, OK, FAILED)]

    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_seconds = models.FloatField(null=True, blank=True)
    # every scenario a run was given is named: 81 of them take about 2,400 characters
    command = models.TextField()
    status = models.CharField(max_length=10, choices=STATUSES, default=RUNNING)
    bootstrap_servers = models.CharField(max_length=1000, blank=True)

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return f"lab run {self.pk} ({self.status})"

    @property
    def false_alarms(self) -> int:
        return sum(r.false_alarms for r in self.results.all())

    @property
    def misses(self) -> int:
        return sum(r.misses for r in self.results.all())


class LabResult(models.Model):
    """One scenario of a run. `expected` and `got` count verdicts ({verdict: keys})."""

    run = models.ForeignKey(LabRun, on_delete=models.CASCADE, related_name="results")
    name = models.CharField(max_length=100)
    injected = models.TextField()
    expected = models.JSONField(default=dict)
    got = models.JSONField(default=dict)
    false_alarms = models.PositiveIntegerField(default=0)
    misses = models.PositiveIntegerField(default=0)
    detect_seconds = models.FloatField(null=True, blank=True, help_text="fault injected → the auditor reported it")
    duration_seconds = models.FloatField(null=True, blank=True)
    wrong = models.JSONField(default=list, blank=True, help_text="the keys whose verdicts differ")
    notes = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True, help_text="the scenario could not run to its end")

    class Meta:
        ordering = ["run", "id"]

    def __str__(self) -> str:
        return self.name

    @property
    def passed(self) -> bool:
        return not self.error and self.false_alarms == 0 and self.misses == 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "injected": self.injected,
            "expected": self.expected,
            "got": self.got,
            "false_alarms": self.false_alarms,
            "misses": self.misses,
            "detect_s": None if self.detect_seconds is None else round(self.detect_seconds, 1),
            "duration_s": None if self.duration_seconds is None else round(self.duration_seconds, 1),
            "wrong": self.wrong,
            "notes": self.notes,
            "error": self.error or None,
        }
