"""Lint scans and their results.

Values and messages arrive masked from the engine (auditor/lint/engine/masking.py); nothing
here ever holds a config as the user wrote it, so a secret cannot reach the database.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import models
from django.db.models import Case, IntegerField, Value, When

from auditor.lint.engine.catalog import RULES_BY_ID
from auditor.lint.engine.defaults import KINDS
from auditor.lint.engine.evidence import Explained, describe, explains
from auditor.lint.engine.terms import SEVERITY_ORDER
from auditor.vocabulary import GUARANTEES

if TYPE_CHECKING:
    from auditor.lint.links import FindingLink

SEVERITIES = tuple(SEVERITY_ORDER)


class LintScan(models.Model):
    SCHEDULE, MANUAL, CLI, PASTE = "schedule", "manual", "cli", "paste"
    TRIGGERS = [(SCHEDULE, "schedule"), (MANUAL, "manual"), (CLI, "cli"), (PASTE, "paste")]
    OK, FAILED = "ok", "failed"
    STATUSES = [(OK, "ok"), (FAILED, "failed")]

    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    trigger = models.CharField(max_length=10, choices=TRIGGERS)
    guarantee = models.CharField(
        max_length=20, blank=True, help_text="the guarantee linted against; blank when each target has its own"
    )
    status = models.CharField(max_length=10, choices=STATUSES, default=OK)
    error = models.TextField(blank=True, help_text="why part of the scan could not run (masked)")
    notes = models.JSONField(default=list, blank=True, help_text="what was skipped and why (masked)")
    summary = models.CharField(max_length=300, blank=True, help_text="what was linted")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    error_count = models.PositiveIntegerField(default=0)
    warning_count = models.PositiveIntegerField(default=0)
    info_count = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-finished_at", "-id"]
        indexes = [models.Index(fields=["trigger", "-finished_at"], name="lint_scan_trigger_finished")]

    def __str__(self) -> str:
        return f"lint scan {self.pk} ({self.trigger}, {self.status})"

    def counts(self) -> dict[str, int]:
        return {"error": self.error_count, "warning": self.warning_count, "info": self.info_count}

    def as_event(self) -> dict[str, Any]:
        """The JSON shape of a scan in the live event, the JSON API and `audit lint --json`."""
        return {
            "id": self.pk,
            "trigger": self.trigger,
            "status": self.status,
            "guarantee": self.guarantee,
            "started_at": self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat(),
            "summary": self.summary,
            "error": self.error,
            "notes": list(self.notes),
            "counts": self.counts(),
        }


class LintResultQuerySet(models.QuerySet["LintResultRow"]):
    def in_report_order(self) -> LintResultQuerySet:
        """Errors first, then per target kind and subject, then rule."""
        rank = Case(
            *(When(severity=name, then=Value(order)) for name, order in SEVERITY_ORDER.items()),
            default=Value(len(SEVERITY_ORDER)),
            output_field=IntegerField(),
        )
        return self.annotate(severity_rank=rank).order_by("severity_rank", "target_kind", "subject", "rule", "id")


class LintResultRow(models.Model):
    EXPLICIT, DEFAULT = "explicit", "default"
    SOURCES = [(EXPLICIT, "explicit"), (DEFAULT, "default")]

    scan = models.ForeignKey(LintScan, on_delete=models.CASCADE, related_name="results")
    rule = models.CharField(max_length=8)
    title = models.CharField(max_length=200)
    severity = models.CharField(max_length=10, choices=[(s, s) for s in SEVERITIES])
    target_kind = models.CharField(max_length=10, choices=[(k, k) for k in KINDS])
    cluster = models.CharField(max_length=100, blank=True)
    subject = models.CharField(
        max_length=500, help_text='e.g. "topic tickets", "producer app@host session", "brokers 1, 2, 3"'
    )
    config_key = models.CharField(max_length=300)
    value = models.JSONField(null=True, blank=True, help_text="masked")
    expected = models.TextField()
    message = models.TextField(help_text="masked")
    guarantee = models.CharField(max_length=20, choices=[(g, g) for g in GUARANTEES])
    source = models.CharField(max_length=10, choices=SOURCES)

    objects = LintResultQuerySet.as_manager()
    # Not stored: the pages set it (auditor.lint.links) to where the explained findings are listed.
    finding_links: Sequence[FindingLink] = ()

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["scan", "severity"], name="lint_result_scan_severity")]

    def __str__(self) -> str:
        return f"{self.rule} {self.severity} on {self.subject}"

    @property
    def shown_value(self) -> str:
        """The value as the client spells it: booleans lower-case, nothing for unset."""
        if self.value is None:
            return ""
        if isinstance(self.value, bool):
            return str(self.value).lower()
        return str(self.value)

    def explains(self) -> Explained:
        """The reconciliation findings (kind, cause or None) this result's setting can cause."""
        return explains(self.rule)

    def explains_labels(self) -> list[str]:
        return describe(self.explains())

    def as_dict(self) -> dict[str, Any]:
        """The engine's result keys (rule, severity, target, config, value, ...) plus where and why."""
        rule = RULES_BY_ID.get(self.rule)
        return {
            "rule": self.rule,
            "title": self.title,
            "severity": self.severity,
            "target": self.target_kind,
            "cluster": self.cluster,
            "subject": self.subject,
            "config": self.config_key,
            "value": self.value,
            "expected": self.expected,
            "message": self.message,
            "guarantee": self.guarantee,
            "source": self.source,
            "why": rule.why if rule else "",
            "fix": rule.fix if rule else "",
            "explains": [[kind, cause] for kind, cause in self.explains()],
        }
