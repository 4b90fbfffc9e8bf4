"""The operator's first screen: does each pipeline (binding) keep its promise right now, and why not.

One verdict per binding, drawn from what the other apps stored:

* ``unknown`` when the auditor cannot tell: no successful reconciliation yet, the last
  finished run failed, or the latest successful one is older than three schedules. The
  reason says which; an unknown pipeline is never called broken or kept.
* ``broken`` when the latest successful run reported findings of a breaking kind
  (BREAKING_KINDS) that nobody acknowledged or muted;
* ``kept`` otherwise.

Everything is read in a fixed number of queries whatever the number of bindings and
findings (counts come from the runs, not from counting findings), so the page and
``GET /api/overview/`` stay fast with a million findings (benchmarks/dashboard_scale.py).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.db.models import Count, Max, Sum
from django.utils import timezone

from auditor.accounts.acknowledgements import current_acknowledgements
from auditor.accounts.models import Acknowledgement
from auditor.alerts.models import Alert
from auditor.canary.models import CanaryPoint
from auditor.canary.scope import bootstrap_hosts
from auditor.lib.secrets import MissingEnvError, resolve_env
from auditor.lint.engine.evidence import rules_explaining
from auditor.lint.models import LintResultRow
from auditor.lint.service import latest_scan
from auditor.pipelines.models import Binding, Cluster, StuckRule
from auditor.reconcile.models import (
    FINDING_ACK_KIND,
    FINDING_IDENTITY,
    Finding,
    ReconcileRun,
    finding_acknowledgement_key,
)
from auditor.stuck.counts import open_counts
from auditor.vocabulary import STUCK_VERDICTS

KEPT, BROKEN, UNKNOWN = "kept", "broken", "unknown"
# Findings that break a delivery promise. An orphan (a record whose key the table lacks)
# is worth a look but says nothing about whether the table's items were delivered.
BREAKING_KINDS = ("missing", "duplicate", "gap", "aborted", "unprocessed", "reprocessed")
STALE_SCHEDULES = 3
SPARK_RUNS = 20
UNACKED_CACHE_SECONDS = 24 * 3600


@dataclass
class PipelineView:
    binding: Binding
    verdict: str = UNKNOWN
    reasons: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    unacknowledged: dict[str, int] = field(default_factory=dict)
    stuck: dict[str, int] = field(default_factory=dict)
    lint: list[LintResultRow] = field(default_factory=list)  # error results on its cluster and topic
    explaining: list[LintResultRow] = field(default_factory=list)  # those whose setting explains its findings
    alerts_open: int = 0
    last_run: ReconcileRun | None = None  # latest successful
    last_finished: ReconcileRun | None = None  # latest finished, successful or not
    trend: list[int] = field(default_factory=list)  # breaking findings of the last runs, oldest first
    canary: dict[str, Any] | None = None

    @property
    def last_run_at(self) -> datetime | None:
        return self.last_run.finished_at if self.last_run else None

    @property
    def sparkline(self) -> str:
        """SVG polyline points (a 100 by 20 box) of ``trend``; empty with fewer than two runs."""
        if len(self.trend) < 2:
            return ""
        # Scaled between the lowest and highest count so a change shows; flat in the middle when none.
        low, high = min(self.trend), max(self.trend)
        step = 100 / (len(self.trend) - 1)
        if high == low:
            return " ".join(f"{i * step:.1f},10.0" for i in range(len(self.trend)))
        return " ".join(f"{i * step:.1f},{19 - 18 * (n - low) / (high - low):.1f}" for i, n in enumerate(self.trend))

    def as_dict(self) -> dict[str, Any]:
        """The API's shape (the issue's contract): binding, guarantee, verdict, reasons, counts, ..."""
        return {
            "binding": self.binding.name,
            "guarantee": self.binding.guarantee,
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "counts": dict(self.counts),
            "unacknowledged": dict(self.unacknowledged),
            "stuck": dict(self.stuck),
            "lint_errors": len(self.lint),
            "lint_explaining": [f"{r.rule} {r.config_key}={r.shown_value}" for r in self.explaining],
            "alerts_open": self.alerts_open,
            "last_run_at": self.last_run_at.isoformat() if self.last_run_at else None,
            "last_run_id": self.last_run.pk if self.last_run else None,
            "trend": list(self.trend),
            "canary": self.canary,
        }


def _ago(when: datetime, now: datetime) -> str:
    seconds = max(0, int((now - when).total_seconds()))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    if seconds < 172800:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} d"


def _latest_runs() -> tuple[dict[int, ReconcileRun], dict[int, ReconcileRun]]:
    """Per binding id: its latest successful run, and its latest finished run (ok or failed)."""
    ok_ids = ReconcileRun.objects.filter(status=ReconcileRun.OK).values("binding").annotate(last=Max("id"))
    finished_ids = (
        ReconcileRun.objects.exclude(status__in=ReconcileRun.ACTIVE).values("binding").annotate(last=Max("id"))
    )
    ids = {row["last"] for row in ok_ids} | {row["last"] for row in finished_ids}
    runs = {r.pk: r for r in ReconcileRun.objects.filter(id__in=ids).defer("offset_ranges", "window", "timings")}
    return (
        {row["binding"]: runs[row["last"]] for row in ok_ids},
        {row["binding"]: runs[row["last"]] for row in finished_ids},
    )


def _trends(binding_ids: list[int]) -> dict[int, list[int]]:
    """Breaking findings of each binding's last SPARK_RUNS successful runs, oldest first (one query)."""
    if not binding_ids:
        return {}
    table = ReconcileRun._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT binding_id, counts FROM (
              SELECT binding_id, id, counts,
                     row_number() OVER (PARTITION BY binding_id ORDER BY id DESC) AS n
              FROM {table} WHERE status = %s AND binding_id = ANY(%s)
            ) recent WHERE n <= %s ORDER BY binding_id, id
            """,  # the table name is the model's, never input
            [ReconcileRun.OK, binding_ids, SPARK_RUNS],
        )
        trends: dict[int, list[int]] = defaultdict(list)
        for binding_id, counts in cursor.fetchall():
            counts = counts if isinstance(counts, dict) else {}
            trends[binding_id].append(sum(int(counts.get(kind, 0) or 0) for kind in BREAKING_KINDS))
    return trends


def _breaking_counts(run: ReconcileRun) -> dict[str, int]:
    counts = run.counts or {}
    return {kind: int(counts.get(kind, 0) or 0) for kind in BREAKING_KINDS if int(counts.get(kind, 0) or 0)}


def _finding_acks_by_binding(binding_ids: list[int]) -> dict[int, set[str]]:
    """Finding acknowledgement keys in force, per binding (keys are "<binding id>:<digest>")."""
    candidates = (
        Acknowledgement.objects.filter(kind=FINDING_ACK_KIND, withdrawn_at=None)
        .values_list("key", flat=True)
        .distinct()
    )
    in_force = current_acknowledgements(FINDING_ACK_KIND, list(candidates))
    wanted = {str(b) for b in binding_ids}
    acks: dict[int, set[str]] = defaultdict(set)
    for key in in_force:
        prefix = key.partition(":")[0]
        if prefix in wanted:
            acks[int(prefix)].add(key)
    return acks


def _unacknowledged(run: ReconcileRun, counts: dict[str, int], acked: set[str]) -> dict[str, int]:
    """Breaking findings of ``run`` per kind that no acknowledgement or mute in force covers.

    Without acknowledgements the run's counts are the answer. Otherwise the run's breaking
    findings are matched against them once per (run, set of acknowledgements in force) and
    the result is cached: acknowledgements change rarely, the page is read often.
    """
    if not acked or not counts:
        return dict(counts)
    digest = hashlib.sha256("\n".join(sorted(acked)).encode()).hexdigest()[:32]
    finished = run.finished_at.timestamp() if run.finished_at else ""
    cache_key = f"overview:unacked:{run.pk}:{run.job_run_id}:{finished}:{digest}"
    cached = cache.get(cache_key)
    if cached is not None:
        return dict(cached)
    result: dict[str, int] = {}
    rows = Finding.objects.filter(run=run, kind__in=list(counts)).values_list(*FINDING_IDENTITY)
    for row in rows.iterator(chunk_size=5000):
        if finding_acknowledgement_key(run.binding_id, list(row)) not in acked:
            result[row[0]] = result.get(row[0], 0) + 1
    cache.set(cache_key, result, timeout=UNACKED_CACHE_SECONDS)
    return result


def _first_seen(pairs: list[tuple[int, str]]) -> dict[tuple[int, str], datetime]:
    """The earliest record time of each (run, kind)'s findings: one query, an index probe per pair."""
    if not pairs:
        return {}
    table = Finding._meta.db_table
    values = ", ".join(["(%s, %s)"] * len(pairs))
    params: list[Any] = [v for pair in pairs for v in pair]
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT v.run_id, v.kind,
                   (SELECT min(f.timestamp) FROM {table} f WHERE f.run_id = v.run_id AND f.kind = v.kind)
            FROM (VALUES {values}) AS v(run_id, kind)
            """,  # the table name is the model's; values are bound parameters
            params,
        )
        return {(run_id, kind): ts for run_id, kind, ts in cursor.fetchall() if ts is not None}


def _stuck_counts() -> dict[int, dict[str, int]]:
    binding_of = dict(StuckRule.objects.values_list("id", "binding_id"))
    stuck: dict[int, dict[str, int]] = defaultdict(dict)
    for (rule_id, verdict), n in open_counts().items():
        if rule_id in binding_of:
            per_binding = stuck[binding_of[rule_id]]
            per_binding[verdict] = per_binding.get(verdict, 0) + n
    order = {v: i for i, v in enumerate(STUCK_VERDICTS)}
    return {b: dict(sorted(v.items(), key=lambda kv: order.get(kv[0], 99))) for b, v in stuck.items()}


def _open_alerts() -> dict[int, int]:
    rows = Alert.objects.filter(state=Alert.OPEN, binding__isnull=False).values("binding_id").annotate(n=Count("id"))
    return {row["binding_id"]: row["n"] for row in rows}


def _lint_errors(bindings: list[Binding]) -> dict[int, list[LintResultRow]]:
    """Error results of the latest scan that apply to each binding: its cluster, its topic."""
    scan = latest_scan()
    if scan is None:
        return {}
    rows = list(scan.results.filter(severity="error").in_report_order())
    found: dict[int, list[LintResultRow]] = {}
    for binding in bindings:
        topic_subject = f"topic {binding.topic}"
        found[binding.pk] = [
            r
            for r in rows
            if r.cluster == binding.cluster.name and (r.target_kind != "topic" or r.subject == topic_subject)
        ]
    return found


def _cluster_hosts(cluster: Cluster) -> set[str]:
    """The cluster's bootstrap hosts as clients see them: a file's ${ENV} reference resolved
    (compared unresolved, it never matched the canary's), nothing when it cannot be."""
    try:
        return bootstrap_hosts(resolve_env(cluster.bootstrap_servers))
    except MissingEnvError:
        return set()


def _canary_groups(now: datetime) -> list[dict[str, Any]]:
    """The canary's sums over the metrics window, one row per cluster it ran against."""
    since = now - timedelta(minutes=canary_window_minutes())
    rows = (
        CanaryPoint.objects.filter(minute__gte=since)
        .values("cluster", "bootstrap_servers")
        .annotate(sent=Sum("sent"), lost=Sum("lost"), truncated=Sum("truncated"), p99=Max("p99_ms"))
        .order_by("cluster", "bootstrap_servers")
    )
    return [dict(row) for row in rows]


def canary_window_minutes() -> int:
    return int(getattr(settings, "AUDITOR_METRICS_CANARY_WINDOW_MINUTES", 15))


def canary_measured_on(group: dict[str, Any], cluster: Cluster) -> bool:
    """Whether canary points measured ``cluster``: named after it (--cluster), or run against its
    bootstrap servers without a name. Points that recorded neither (stored before the
    canary recorded its cluster) belong to no cluster."""
    if group["cluster"]:
        return bool(group["cluster"] == cluster.name)
    return bool(bootstrap_hosts(group["bootstrap_servers"]) & _cluster_hosts(cluster))


def canary_summary(groups: list[dict[str, Any]], cluster: Cluster) -> dict[str, Any] | None:
    """Loss and latency of the canary on ``cluster`` over the metrics window, or None when it sent nothing there.

    ``loss_pct`` counts the records lost and those truncated (read, then cut from the log), as
    the report's loss ratio, the canary's loss alert and the CanaryLoss rule do."""
    mine = [g for g in groups if canary_measured_on(g, cluster)]
    sent = sum(int(g["sent"] or 0) for g in mine)
    if not sent:
        return None
    lost = sum(int(g["lost"] or 0) for g in mine)
    truncated = sum(int(g["truncated"] or 0) for g in mine)
    p99s = [g["p99"] for g in mine if g["p99"] is not None]
    return {
        "window_minutes": canary_window_minutes(),
        "sent": sent,
        "lost": lost,
        "truncated": truncated,
        "loss_pct": round(100.0 * (lost + truncated) / sent, 3),
        "p99_ms": max(p99s) if p99s else None,
    }


def build_overview(now: datetime | None = None) -> list[PipelineView]:
    """One PipelineView per binding, by name."""
    now = now or timezone.now()
    bindings = list(Binding.objects.select_related("cluster").order_by("name"))
    ids = [b.pk for b in bindings]
    last_ok, last_finished = _latest_runs()
    trends = _trends(ids)
    stuck = _stuck_counts()
    alerts = _open_alerts()
    lint = _lint_errors(bindings)
    acks = _finding_acks_by_binding(ids)
    canary_groups = _canary_groups(now)

    views = []
    for binding in bindings:
        view = PipelineView(binding=binding)
        view.last_run = last_ok.get(binding.pk)
        view.last_finished = last_finished.get(binding.pk)
        view.trend = trends.get(binding.pk, [])
        view.stuck = stuck.get(binding.pk, {})
        view.alerts_open = alerts.get(binding.pk, 0)
        view.lint = lint.get(binding.pk, [])
        view.canary = canary_summary(canary_groups, binding.cluster)
        if view.last_run is not None:
            view.counts = _breaking_counts(view.last_run)
            view.unacknowledged = _unacknowledged(view.last_run, view.counts, acks.get(binding.pk, set()))
        views.append(view)

    pairs = [(v.last_run.pk, kind) for v in views if v.last_run for kind in v.unacknowledged]
    first_seen = _first_seen(pairs)
    for view in views:
        _judge(view, now, first_seen)
    return views


def _judge(view: PipelineView, now: datetime, first_seen: dict[tuple[int, str], datetime]) -> None:
    binding = view.binding
    finished = view.last_finished
    if view.last_run is None:
        view.verdict = UNKNOWN
        if finished is not None and finished.status == ReconcileRun.FAILED:
            view.reasons.append(f"no successful reconciliation yet; the last run failed: {finished.error}")
        else:
            view.reasons.append("no reconciliation has run yet")
        return
    unknown = False
    if finished is not None and finished.status == ReconcileRun.FAILED and finished.pk > view.last_run.pk:
        unknown = True
        view.reasons.append(f"the last run failed: {finished.error}")
    stale_after = timedelta(seconds=binding.schedule_seconds * STALE_SCHEDULES)
    last_at = view.last_run.finished_at or view.last_run.created_at
    if binding.schedule_seconds > 0 and now - last_at > stale_after:
        unknown = True
        view.reasons.append(
            f"the last successful run is {_ago(last_at, now)} old, more than {STALE_SCHEDULES} schedules "
            f"({_ago(now - timedelta(seconds=binding.schedule_seconds), now)} each)"
        )
    if unknown:
        view.verdict = UNKNOWN
        if view.unacknowledged:
            earlier = ", ".join(f"{n} {kind}" for kind, n in view.unacknowledged.items())
            view.reasons.append(f"the last successful run reported {earlier}, not acknowledged")
        return
    if not view.unacknowledged:
        view.verdict = KEPT
        acked = sum(view.counts.values())
        view.reasons.append(
            f"{acked} finding{'s' if acked != 1 else ''} acknowledged" if acked else "no findings that break it"
        )
        return
    view.verdict = BROKEN
    explaining = []
    for row in view.lint:
        if any(rules_explaining_kind(row.rule, kind) for kind in view.unacknowledged):
            explaining.append(row)
    view.explaining = explaining
    settings_text = "; ".join(f"{_setting(r)} ({r.rule})" for r in explaining[:3])
    for kind, n in view.unacknowledged.items():
        since = first_seen.get((view.last_run.pk, kind))
        text = f"{n} {kind}"
        if since is not None:
            text += f" since {since:%Y-%m-%d %H:%M} UTC"
        view.reasons.append(text)
    if settings_text:
        view.reasons.append(settings_text)


def rules_explaining_kind(rule_id: str, kind: str) -> bool:
    return rule_id in rules_explaining(kind)


def _setting(row: LintResultRow) -> str:
    who = row.target_kind
    return f"{who} {row.config_key}={row.shown_value}" if row.shown_value else f"{who} {row.config_key}"


def overview_json(now: datetime | None = None) -> dict[str, Any]:
    return {"pipelines": [view.as_dict() for view in build_overview(now)]}
