"""Reconciliation pages: runs per binding (run now, chart, live), findings, a finding, a key."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.core.cache import cache
from django.core.paginator import Paginator
from django.db.models import Max, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from auditor.accounts.acknowledgements import current_acknowledgement
from auditor.accounts.forms import AcknowledgeForm
from auditor.accounts.pages import acknowledge_from_post, acknowledge_many_from_post, withdraw_from_post
from auditor.accounts.roles import OPERATOR, SignedInRequest, has_role, require_role
from auditor.lint.engine.catalog import RULES_BY_ID
from auditor.lint.engine.evidence import rules_explaining
from auditor.lint.models import LintResultRow
from auditor.lint.service import latest_scan
from auditor.pipelines.models import Binding
from auditor.reconcile import conf, memory, records
from auditor.reconcile.acknowledgements import attach_findings_acknowledgements
from auditor.reconcile.models import (
    FINDING_ACK_KIND,
    FINDING_IDENTITY,
    FINDING_ORDER,
    HEADER_COUNTS,
    Finding,
    ReconcileRun,
    finding_acknowledgement_key,
)
from auditor.reconcile.service import RunInProgress, current_run_ids
from auditor.reconcile.tasks import queue_run
from auditor.reconcile.timeline import IN_TOPIC, UNKNOWN, Timeline
from auditor.stuck.models import StuckItem
from auditor.vocabulary import FINDING_CAUSES, FINDING_KINDS
from spark_jobs.state_location import StateLocationError

log = logging.getLogger(__name__)

RUNS_SHOWN = 50
CHART_RUNS = 200
FINDINGS_PER_PAGE = 50
KEY_FINDINGS = 100
MAX_BULK = 10_000
RUN_COUNT_CACHE_SECONDS = 7 * 24 * 3600
KEY_STUCK_ITEMS = 5
ALL_CAUSES = sorted({cause for causes in FINDING_CAUSES.values() for cause in causes})


def _binding_filter(request: HttpRequest, query: QueryDict | None = None) -> Binding | None:
    name = (request.GET if query is None else query).get("binding", "").strip()
    if not name:
        return None
    return get_object_or_404(Binding, name=name)


# --- runs ------------------------------------------------------------------------------------


def chart_points(binding: Binding | None) -> list[dict[str, Any]]:
    """Successful runs, oldest first: when each finished and its findings per kind."""
    runs = ReconcileRun.objects.filter(status=ReconcileRun.OK).select_related("binding")
    if binding is not None:
        runs = runs.filter(binding=binding)
    latest = list(runs.order_by("-id")[:CHART_RUNS])
    return [
        {
            "id": r.pk,
            "binding": r.binding.name,
            "finished_at": r.finished_at.isoformat(),
            "counts": r.as_event()["counts"],
        }
        for r in reversed(latest)
        if r.finished_at
    ]


@require_GET
def runs(request: HttpRequest) -> HttpResponse:
    binding = _binding_filter(request)
    recent = ReconcileRun.objects.select_related("binding")
    if binding is not None:
        recent = recent.filter(binding=binding)
    bindings = list(Binding.objects.all())
    return render(
        request,
        "reconcile/runs.html",
        {
            "binding": binding,
            "bindings": bindings,
            "runs": list(recent[:RUNS_SHOWN]),
            "kinds": FINDING_KINDS,
            "can_run": has_role(request.user, OPERATOR),
            "runs_page": {
                "binding": binding.name if binding else None,
                "kinds": list(FINDING_KINDS),
                "header_counts": list(HEADER_COUNTS),
                "points": chart_points(binding),
                "findings_url": reverse("reconcile:findings"),
            },
        },
    )


@require_role(OPERATOR)
@require_POST
def run_now(request: SignedInRequest) -> HttpResponse:
    """Queue a run of one binding on the worker; the runs page shows it live."""
    wants_json = "application/json" in request.headers.get("Accept", "")
    binding = Binding.objects.filter(name=request.POST.get("binding", "")).first()
    if binding is None:
        status, text, code = "invalid", "Unknown binding.", 400
    else:
        try:
            run = queue_run(
                binding, ReconcileRun.MANUAL, full=request.POST.get("full") == "1", requested_by=request.user
            )
        except RunInProgress as exc:
            status, text, code = "busy", f"{exc}.", 409
        else:
            status, text, code = "queued", f"Run #{run.pk} of {binding.name} queued.", 202
    if wants_json:
        return JsonResponse({"status": status, "message": text}, status=code)
    (messages.info if code == 202 else messages.error)(request, text)
    target = reverse("reconcile:runs")
    return redirect(f"{target}?binding={binding.name}" if binding and request.POST.get("back") == "binding" else target)


# --- findings --------------------------------------------------------------------------------


@dataclass
class FindingFilters:
    binding: Binding | None = None
    kind: str = ""
    cause: str = ""
    key: str | None = None
    run: ReconcileRun | None = None
    new_only: bool = False

    def as_query(self) -> dict[str, str]:
        query = {
            "binding": self.binding.name if self.binding else "",
            "kind": self.kind,
            "cause": self.cause,
            "key": self.key or "",
            "run": str(self.run.pk) if self.run else "",
            "new": "1" if self.new_only else "",
        }
        return {k: v for k, v in query.items() if v}


def finding_filters(request: HttpRequest, query: QueryDict | None = None) -> FindingFilters:
    """Filters from the query string (or ``query``); unknown kinds and causes are ignored, unknown objects are 404."""
    query = request.GET if query is None else query
    kind = query.get("kind", "")
    cause = query.get("cause", "")
    key = query.get("key")
    run_id = query.get("run", "")
    return FindingFilters(
        binding=_binding_filter(request, query),
        kind=kind if kind in FINDING_KINDS else "",
        cause=cause if cause in ALL_CAUSES else "",
        key=key if key else None,
        run=get_object_or_404(ReconcileRun, pk=int(run_id)) if run_id.isdigit() else None,
        new_only=query.get("new") == "1",
    )


def filtered_findings(filters: FindingFilters) -> QuerySet[Finding]:
    """The current findings (each binding's latest successful run) or one run's, filtered."""
    findings = Finding.objects.select_related("binding", "run")
    if filters.run is not None:
        findings = findings.filter(run=filters.run)
    else:
        findings = findings.filter(run_id__in=current_run_ids(filters.binding))
    if filters.binding is not None:
        findings = findings.filter(binding=filters.binding)
    if filters.kind:
        findings = findings.filter(kind=filters.kind)
    if filters.cause:
        findings = findings.filter(cause=filters.cause)
    if filters.key is not None:
        findings = findings.filter(key=filters.key)
    if filters.new_only:
        findings = findings.filter(is_new=True)
    return findings.order_by("binding__name", *FINDING_ORDER)


class RunSlicedFindings:
    """The current findings of several runs as one sequence a Paginator can page through.

    A run's findings never change once it is published, until prune_findings deletes them
    (it sets ``findings_pruned``, which is part of the cache key), so each run's count (for
    the kind filter) is counted once and cached, and a page is read from the one or two runs
    it covers through the (run, kind, id) index: the page costs the same with a million
    findings as with a hundred, instead of sorting every current finding for each page.
    """

    def __init__(self, runs: list[ReconcileRun], kind: str) -> None:
        self.kind = kind
        self.runs = runs
        self.sizes = [self._count(run) for run in runs]

    def _query(self, run: ReconcileRun) -> QuerySet[Finding]:
        findings = Finding.objects.filter(run=run).select_related("binding", "run")
        return findings.filter(kind=self.kind) if self.kind else findings

    def _count(self, run: ReconcileRun) -> int:
        # The run's job id and finish time too: a restored database may give another run this pk.
        # And whether its findings were pruned: pruning deletes them, and the count cached
        # before would show them for RUN_COUNT_CACHE_SECONDS.
        finished = run.finished_at.timestamp() if run.finished_at else ""
        pruned = "pruned" if run.findings_pruned else "kept"
        cache_key = f"findings:count:{run.pk}:{run.job_run_id}:{finished}:{pruned}:{self.kind}"
        n = cache.get(cache_key)
        if n is None:
            n = self._query(run).count()
            cache.set(cache_key, n, timeout=RUN_COUNT_CACHE_SECONDS)
        return int(n)

    def count(self) -> int:
        return sum(self.sizes)

    def __len__(self) -> int:
        return self.count()

    def __getitem__(self, window: slice) -> list[Finding]:
        start, stop = window.start or 0, window.stop if window.stop is not None else self.count()
        found: list[Finding] = []
        offset = 0
        for run, size in zip(self.runs, self.sizes, strict=True):
            lo, hi = max(start - offset, 0), min(stop - offset, size)
            if lo < hi:
                # Ids first (an index-only scan of (run, kind, id), however deep the page), then those rows.
                ids = list(self._query(run).order_by("kind", "id").values_list("id", flat=True)[lo:hi])
                rows = Finding.objects.select_related("binding", "run").order_by().in_bulk(ids)
                found.extend(rows[i] for i in ids if i in rows)
            offset += size
            if offset >= stop:
                break
        return found


def paged_findings(filters: FindingFilters) -> QuerySet[Finding] | RunSlicedFindings:
    """What the findings page pages through: by run when only binding, run and kind filter it."""
    if filters.cause or filters.key is not None or filters.new_only:
        return filtered_findings(filters)
    if filters.run is not None:
        runs = [filters.run]
    else:
        runs = list(
            ReconcileRun.objects.filter(id__in=current_run_ids(filters.binding))
            .select_related("binding")
            .order_by("binding__name", "id")
        )
    return RunSlicedFindings(runs, filters.kind)


@require_GET
def findings(request: HttpRequest) -> HttpResponse:
    filters = finding_filters(request)
    paged = paged_findings(filters)
    # Paginator uses only count() and slices, which RunSlicedFindings has; the stub's
    # protocol also asks for int indexing and iteration, which it never does.
    page = Paginator(paged, FINDINGS_PER_PAGE).get_page(request.GET.get("page"))  # type: ignore[arg-type]
    summary: list[tuple[str, int]] = []
    if isinstance(paged, RunSlicedFindings) and not filters.kind:
        totals = dict.fromkeys(FINDING_KINDS, 0)
        for run in paged.runs:
            for kind, n in run.kind_counts():
                totals[kind] += n
        summary = [(kind, n) for kind, n in totals.items() if n]
    page.object_list = attach_findings_acknowledgements(page.object_list)
    latest_failed: list[ReconcileRun] = []
    if filters.run is None:
        finished = ReconcileRun.objects.exclude(status__in=ReconcileRun.ACTIVE)
        if filters.binding is not None:
            finished = finished.filter(binding=filters.binding)
        last_ids = finished.values("binding").annotate(last=Max("id")).values_list("last", flat=True)
        latest_failed = list(
            ReconcileRun.objects.filter(id__in=list(last_ids), status=ReconcileRun.FAILED).select_related("binding")
        )
    return render(
        request,
        "reconcile/findings.html",
        {
            "filters": filters,
            "query": filters.as_query(),
            "page": page,
            "bindings": Binding.objects.all(),
            "kinds": FINDING_KINDS,
            "causes": ALL_CAUSES,
            "latest_failed": latest_failed,
            "summary": summary,
            "can_operate": has_role(request.user, OPERATOR),
            "ack_form": AcknowledgeForm(),
            "findings_page": {
                "binding": filters.binding.name if filters.binding else None,
                "pinned": bool(filters.run),
            },
        },
    )


def _lint_evidence(finding: Finding) -> dict[str, Any]:
    """Lint rules whose setting can produce this finding, and the latest scan's results of them here."""
    rule_ids = rules_explaining(finding.kind, finding.cause)
    scan = latest_scan()
    results: list[LintResultRow] = []
    if scan is not None and rule_ids:
        topic_subject = f"topic {finding.binding.topic}"
        rows = scan.results.filter(rule__in=rule_ids, cluster=finding.binding.cluster.name).in_report_order()
        results = [r for r in rows if r.target_kind != "topic" or r.subject == topic_subject]
    return {
        "rules": [RULES_BY_ID[r] for r in rule_ids if r in RULES_BY_ID],
        "scan": scan,
        "results": results,
    }


@require_GET
def finding_detail(request: HttpRequest, finding_id: int) -> HttpResponse:
    finding = get_object_or_404(Finding.objects.select_related("binding__cluster", "run"), pk=finding_id)
    [finding] = attach_findings_acknowledgements([finding])
    return render(
        request,
        "reconcile/finding.html",
        {
            "finding": finding,
            "evidence_json": json.dumps(finding.evidence, indent=2, ensure_ascii=False),
            "lint": _lint_evidence(finding),
            "can_operate": has_role(request.user, OPERATOR),
            "ack_form": AcknowledgeForm(),
        },
    )


def _finding_label(finding: Finding) -> str:
    return f"finding #{finding.pk} ({finding.kind} on {finding.binding.name})"


def _back_from_finding(request: HttpRequest, finding: Finding) -> HttpResponse:
    """To the finding's page when the form was posted from it, else to the current findings."""
    if request.POST.get("next") == "finding":
        return redirect("reconcile:finding", finding_id=finding.pk)
    return redirect("reconcile:findings")


@require_role(OPERATOR)
@require_POST
def finding_acknowledge(request: HttpRequest, finding_id: int) -> HttpResponse:
    """Acknowledge or mute a finding: it carries over to later runs that report the same finding."""
    finding = get_object_or_404(Finding.objects.select_related("binding"), pk=finding_id)
    acknowledge_from_post(request, FINDING_ACK_KIND, finding.acknowledgement_key, _finding_label(finding))
    return _back_from_finding(request, finding)


@require_role(OPERATOR)
@require_POST
def findings_acknowledge(request: HttpRequest) -> HttpResponse:
    """Acknowledge or mute a selection of findings with one form: the rows ticked, or every
    current finding matching the page's filters (at most MAX_BULK, all or none)."""
    filters = finding_filters(request, request.POST)
    if request.POST.get("scope") == "matching":
        chosen = filtered_findings(filters)
    else:
        ids = [int(v) for v in request.POST.getlist("finding") if v.isdigit()]
        chosen = Finding.objects.filter(pk__in=ids)
    rows = list(chosen.order_by().values_list("binding_id", *FINDING_IDENTITY)[: MAX_BULK + 1])
    target = reverse("reconcile:findings")
    query = filters.as_query()
    back = redirect(f"{target}?{urlencode(query)}" if query else target)
    if len(rows) > MAX_BULK:
        messages.error(request, f"Not acknowledged: more than {MAX_BULK} findings match; narrow the filters.")
        return back
    keys = [finding_acknowledgement_key(row[0], list(row[1:])) for row in rows]
    acknowledge_many_from_post(request, FINDING_ACK_KIND, keys, "findings" if len(keys) != 1 else "finding")
    return back


@require_role(OPERATOR)
@require_POST
def finding_withdraw(request: HttpRequest, finding_id: int) -> HttpResponse:
    finding = get_object_or_404(Finding.objects.select_related("binding"), pk=finding_id)
    ack = current_acknowledgement(FINDING_ACK_KIND, finding.acknowledgement_key)
    withdraw_from_post(request, ack, _finding_label(finding))
    return _back_from_finding(request, finding)


# --- a key -----------------------------------------------------------------------------------


def _ledger_entries(findings: list[Finding]) -> list[dict[str, Any]]:
    """Producer-ledger entries the findings carry as evidence (gap findings do)."""
    entries = []
    for finding in findings:
        ledger = (finding.evidence or {}).get("ledger") if isinstance(finding.evidence, dict) else None
        if ledger:
            entries.append({"session": finding.session, "seq": finding.seq, "run": finding.run_id, **ledger})
    return entries


def _key_sighting(binding: Binding, key: str) -> tuple[Any, str]:
    """Where reconciliation first saw this key (its key index; a record of it a later run
    found rewritten first), and why it could not tell if not."""
    try:
        seen = memory.read_sightings(conf.state_location().join(binding.name), [key], binding).get(key)
    except (memory.StateUnreadable, StateLocationError) as exc:
        return None, str(exc)
    if seen is None:
        return None, ""
    return next((s for s in seen.copies if s.lost), seen.first), ""


def _stuck_positions(items: list[StuckItem]) -> set[tuple[int, int]]:
    """(partition, offset) of the records the items' diagnoses found (their evidence)."""
    found = set()
    for item in items:
        evidence = item.evidence if isinstance(item.evidence, dict) else {}
        for record in evidence.get("records") or []:
            if isinstance(record.get("partition"), int) and isinstance(record.get("offset"), int):
                found.add((record["partition"], record["offset"]))
    return found


def key_timeline(
    binding: Binding,
    key: str,
    source: records.SourceLookup,
    lookup: records.RecordLookup,
    findings: list[Finding],
    current_runs: set[int],
    stuck_items: list[StuckItem],
) -> Timeline:
    """The key's delivery timeline from everything the key page read (see auditor/reconcile/timeline.py)."""
    timeline = Timeline(binding=binding.name, key=key)
    timeline.add_source_row(source.created, source.columns, source.rows)
    timeline.add_row_status(binding.stuck_rules.all(), source.columns, source.rows)
    timeline.add_records(lookup.records, binding.topic)
    if lookup.error:
        timeline.steps[IN_TOPIC].note(UNKNOWN, f"the topic could not be read: {lookup.error}", "topic read")
    timeline.add_committed(lookup.records, lookup.committed, lookup.committed_errors)
    timeline.add_findings(findings, current_runs)
    for item in stuck_items[:1]:  # the latest stretch of being stuck tells the current story
        timeline.add_stuck_item(item, binding.topic)
    return timeline


@require_GET
def key_page(request: HttpRequest, binding: str, key: str) -> HttpResponse:
    binding_obj = get_object_or_404(Binding.objects.select_related("cluster", "source"), name=binding)
    if len(key) > 10_000:
        raise Http404("key too long")
    key_findings = list(
        Finding.objects.filter(binding=binding_obj, key=key)
        .select_related("run")
        .order_by("-run_id", "kind")[:KEY_FINDINGS]
    )
    current = set(current_run_ids(binding_obj))
    stuck_items = list(
        StuckItem.objects.filter(rule__binding=binding_obj, key=key)
        .select_related("rule")
        .order_by("-first_seen")[:KEY_STUCK_ITEMS]
    )
    sighting, memory_reason = _key_sighting(binding_obj, key)
    # Read back every position the findings, the stuck diagnoses and the key index name for this key.
    remembered = {(sighting.partition, sighting.offset)} if sighting is not None and not sighting.lost else set()
    positions = sorted({p for f in key_findings for p in f.positions} | _stuck_positions(stuck_items) | remembered)
    source = records.read_source_row(binding_obj, key)
    created = source.created
    if created is None:
        created = next((f.timestamp for f in key_findings if f.kind == "missing" and f.timestamp), None)
    lookup = records.find_records(binding_obj, key, positions, created)
    aborted = {(f.partition, f.offset) for f in key_findings if f.kind == "aborted"}
    for record in lookup.records:
        record.aborted = (record.partition, record.offset) in aborted
    timeline = key_timeline(binding_obj, key, source, lookup, key_findings, current, stuck_items)
    timeline.add_key_memory(sighting, memory_reason, binding_obj.topic)
    permalink = request.build_absolute_uri(request.path)
    if request.GET.get("format") == "text":
        return HttpResponse(timeline.as_text(permalink), content_type="text/plain; charset=utf-8")
    return render(
        request,
        "reconcile/key.html",
        {
            "binding": binding_obj,
            "key": key,
            "source": source,
            "lookup": lookup,
            "findings": key_findings,
            "current_runs": current,
            "ledger": _ledger_entries(key_findings),
            "stuck_items": stuck_items,
            "timeline": timeline,
            "timeline_text": timeline.as_text(permalink),
            "permalink": permalink,
        },
    )
