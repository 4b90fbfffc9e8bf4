"""Reconciliation runs and the findings each run reported.

A run stores the whole current set of findings of its binding (the Spark job reports a
snapshot, see spark_jobs/README.md), so "the findings of a binding now" are those of its
latest successful run. Findings of older runs are pruned after a few runs; the run keeps
its counts.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.contrib.postgres.indexes import HashIndex
from django.db import models
from django.db.models import Q
from django.urls import NoReverseMatch, reverse

from auditor.lib.readable import readable_fields
from auditor.pipelines.models import Binding
from auditor.vocabulary import FINDING_KINDS

# The job's run count (not a finding kind) of source rows past grace without a record that
# could not be checked: records that old were deleted from the topic before it read them.
UNVERIFIABLE = "unverifiable"
# Nor this: source rows past grace without a record yet that a leader change holds (its failover
# may still be holding their sends): not reported missing until the send outcome bound has passed.
LATE = "late"
# Counts a run reports beside its findings (spark_jobs/reconcile_transform.RECORD_COUNTS):
# records it read without any audit header, and with audit headers it could not decode.
HEADER_COUNTS = ("records_without_headers", "records_malformed_headers")

FINDING_ACK_KIND = "finding"
# What makes two runs' findings the same finding: spark_jobs/reconcile_report.py IDENTITY (is_new).
FINDING_IDENTITY = ("kind", "key", "cause", "partition", "offset", "session", "seq", "group")


def finding_acknowledgement_key(binding_id: int, identity: Sequence[Any]) -> str:
    """The acknowledgement key of a finding: its binding and a digest of its identity.

    Stable across runs (each run stores its findings anew), short enough for any key,
    and prefixed with the binding so its mutes can be looked up together.
    """
    digest = hashlib.sha256(json.dumps(list(identity), separators=(",", ":")).encode()).hexdigest()
    return f"{binding_id}:{digest}"


class ReconcileRun(models.Model):
    QUEUED, RUNNING, OK, FAILED = "queued", "running", "ok", "failed"
    STATUSES = [(QUEUED, "queued"), (RUNNING, "running"), (OK, "ok"), (FAILED, "failed")]
    ACTIVE = (QUEUED, RUNNING)
    SCHEDULE, MANUAL, CLI, API = "schedule", "manual", "cli", "api"
    TRIGGERS = [(SCHEDULE, "schedule"), (MANUAL, "manual"), (CLI, "cli"), (API, "api")]

    binding = models.ForeignKey(Binding, on_delete=models.CASCADE, related_name="reconcile_runs")
    status = models.CharField(max_length=10, choices=STATUSES, default=QUEUED)
    trigger = models.CharField(max_length=10, choices=TRIGGERS)
    full = models.BooleanField(default=False, help_text="asked to ignore the incremental state")
    mode = models.CharField(max_length=12, blank=True, help_text="full or incremental, as the job ran it")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    job_run_id = models.CharField(max_length=100, blank=True, help_text="the Spark job's run id (state, staging)")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_seconds = models.FloatField(null=True, blank=True)
    window = models.JSONField(default=dict, blank=True, help_text="source rows read: lower, upper, grace cutoff")
    offset_ranges = models.JSONField(default=dict, blank=True, help_text="topic and ledgers: {partition: [start, end]}")
    # Also UNVERIFIABLE (rows) and HEADER_COUNTS (records), which are not findings: read them
    # with unverifiable / header_counts().
    counts = models.JSONField(default=dict, blank=True, help_text="findings per kind, and unverifiable rows")
    new_findings = models.PositiveIntegerField(default=0)
    records_read = models.BigIntegerField(default=0)
    error = models.TextField(blank=True, help_text="why the run failed (secrets masked)")
    warnings = models.JSONField(default=list, blank=True)
    timings = models.JSONField(default=dict, blank=True, help_text="seconds per phase of the job")
    claimed_by = models.CharField(max_length=200, blank=True, help_text="host:pid of the process running it")
    findings_pruned = models.BooleanField(default=False, help_text="its findings were deleted; counts kept")
    # Stored when the run is published, so reports built after prune_findings still have them.
    cause_counts = models.JSONField(
        null=True,
        blank=True,
        default=None,
        help_text="findings per kind and cause: [{kind, cause, count}]; null for runs published before it was stored",
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # Two runs of one binding never overlap: claiming is inserting the queued row.
            models.UniqueConstraint(
                fields=["binding"],
                condition=Q(status__in=("queued", "running")),
                name="reconcile_one_active_run_per_binding",
            )
        ]
        indexes = [
            models.Index(fields=["binding", "-created_at"], name="reconcile_run_binding_created"),
            models.Index(fields=["status", "binding"], name="reconcile_run_status_binding"),
        ]

    def __str__(self) -> str:
        return f"run {self.pk} of {self.binding_id} ({self.status})"

    @property
    def total_findings(self) -> int:
        return sum(n for _, n in self.kind_counts())

    def kind_counts(self) -> list[tuple[str, int]]:
        return [(kind, int((self.counts or {}).get(kind, 0))) for kind in FINDING_KINDS]

    @property
    def unverifiable(self) -> int:
        """Source rows this run could not check (never counted as findings)."""
        return int((self.counts or {}).get(UNVERIFIABLE, 0))

    @property
    def late(self) -> int:
        """Source rows past grace whose records a leader change may still be holding (0 for older runs)."""
        return int((self.counts or {}).get(LATE, 0))

    def header_counts(self) -> list[tuple[str, int]]:
        """Records this run read without audit headers / with malformed ones (0 for older runs)."""
        return [(name, int((self.counts or {}).get(name, 0))) for name in HEADER_COUNTS]

    def as_event(self) -> dict[str, Any]:
        """The JSON shape of a run: live events, the JSON API and `audit reconcile --json`."""
        return {
            "id": self.pk,
            "binding": self.binding.name,
            "status": self.status,
            "trigger": self.trigger,
            "full": self.full,
            "mode": self.mode,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "duration_s": self.duration_seconds,
            "counts": (
                dict(self.kind_counts())
                | {UNVERIFIABLE: self.unverifiable, LATE: self.late}
                | dict(self.header_counts())
                if self.status == self.OK
                else {}
            ),
            "total_findings": self.total_findings,
            "new_findings": self.new_findings,
            "records_read": self.records_read,
            "window": self.window,
            "offset_ranges": self.offset_ranges,
            "warnings": list(self.warnings or []),
            "error": self.error,
            "findings_pruned": self.findings_pruned,
        }


# Findings' order (Finding.Meta.ordering), as a typed tuple for order_by() after other fields.
FINDING_ORDER = ("kind", "cause", "key", "partition", "offset", "id")


class Finding(models.Model):
    """One finding as the job reports it (spark_jobs/reconcile_transform.FINDING_SCHEMA).

    key and cause stay NULL where the job has none (a record without a key, a kind
    without causes): "no key" is not the same as an empty key.
    """

    KINDS = [(kind, kind) for kind in FINDING_KINDS]

    run = models.ForeignKey(ReconcileRun, on_delete=models.CASCADE, related_name="findings")
    binding = models.ForeignKey(Binding, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=20, choices=KINDS)
    key = models.TextField(null=True, blank=True)
    cause = models.CharField(max_length=40, null=True, blank=True)
    partition = models.IntegerField(null=True, blank=True)
    offset = models.BigIntegerField(null=True, blank=True)
    offsets = models.JSONField(null=True, blank=True, help_text="[{partition, offset}] of every record involved")
    timestamp = models.DateTimeField(null=True, blank=True)
    session = models.TextField(null=True, blank=True, help_text="producer session (audit-pid)")
    seq = models.BigIntegerField(null=True, blank=True)
    seq_end = models.BigIntegerField(null=True, blank=True)
    group = models.TextField(null=True, blank=True, help_text="consumer group")
    evidence = models.JSONField(null=True, blank=True)
    is_new = models.BooleanField(default=False, help_text="the previous run did not report it")

    class Meta:
        ordering = list(FINDING_ORDER)
        indexes = [
            models.Index(fields=["run", "kind", "cause"], name="reconcile_finding_run_kind"),
            # The findings page reads a run's findings in (kind, id) order, a page at a time;
            # the overview asks for the first record time of a run's findings of a kind.
            models.Index(fields=["run", "kind", "id"], name="reconcile_finding_run_kind_id"),
            models.Index(fields=["run", "kind", "timestamp"], name="reconcile_finding_run_kind_ts"),
            models.Index(fields=["binding", "kind", "cause"], name="reconcile_finding_binding_kind"),
            # Hash: keys are arbitrary text; a B-tree refuses entries over ~2.7 kB.
            HashIndex(fields=["key"], name="reconcile_finding_key"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.key!r} ({self.cause or '-'})"

    @property
    def key_url(self) -> str | None:
        """The key's page; None for keys no URL can carry (none, empty, with line breaks)."""
        if not self.key:
            return None
        try:
            return reverse("reconcile:key", args=[self.binding.name, self.key])
        except NoReverseMatch:
            return None

    @property
    def acknowledgement_key(self) -> str:
        return finding_acknowledgement_key(self.binding_id, [getattr(self, field) for field in FINDING_IDENTITY])

    @property
    def evidence_text(self) -> str:
        return "" if self.evidence is None else json.dumps(self.evidence, ensure_ascii=False, separators=(",", ":"))

    @property
    def evidence_fields(self) -> list[tuple[str, str]]:
        """The evidence as a few readable (label, value) pairs; pages show the raw JSON on demand."""
        return readable_fields(self.evidence)

    @property
    def positions(self) -> list[tuple[int, int]]:
        """(partition, offset) of every record the finding names."""
        found = {(int(o["partition"]), int(o["offset"])) for o in self.offsets or [] if o.get("offset") is not None}
        if self.partition is not None and self.offset is not None:
            found.add((self.partition, self.offset))
        return sorted(found)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.pk,
            "run_id": self.run_id,
            "binding": self.binding.name,
            "kind": self.kind,
            "key": self.key,
            "cause": self.cause,
            "partition": self.partition,
            "offset": self.offset,
            "offsets": self.offsets,
            "timestamp": self.timestamp.isoformat() if self.timestamp else None,
            "session": self.session,
            "seq": self.seq,
            "seq_end": self.seq_end,
            "group": self.group,
            "evidence": self.evidence,
            "is_new": self.is_new,
        }


class FindingStaging(models.Model):
    """Where the Spark job appends a run's findings over JDBC (spark_jobs load_findings_jdbc).

    Column names are the job's. A successful run moves its rows into Finding in the same
    transaction that marks it ok, so a run's findings appear all at once or not at all.
    """

    run_id = models.CharField(max_length=100, db_index=True, help_text="the job's run id")
    kind = models.CharField(max_length=20)
    key = models.TextField(null=True)
    cause = models.CharField(max_length=40, null=True)
    partition = models.IntegerField(null=True)
    offset = models.BigIntegerField(null=True)
    offsets = models.JSONField(null=True)
    timestamp = models.DateTimeField(null=True)
    session = models.TextField(null=True)
    seq = models.BigIntegerField(null=True)
    seq_end = models.BigIntegerField(null=True)
    group = models.TextField(null=True)
    evidence = models.JSONField(null=True)
    is_new = models.BooleanField(null=True)

    class Meta:
        db_table = "reconcile_finding_staging"
