"""JSON API of reconciliation: runs, findings, and triggering a run (operator, write scope)."""

from __future__ import annotations

from typing import Any

from django.http import JsonResponse

from auditor.accounts.acknowledgements import acknowledgement_json
from auditor.api.acknowledging import ACK_BODY, ACK_SCHEMA, acknowledge_for_api
from auditor.api.registry import ApiCall, ApiError, Param, endpoint, paginate
from auditor.pipelines.models import Binding
from auditor.reconcile.acknowledgements import attach_findings_acknowledgements
from auditor.reconcile.models import FINDING_ACK_KIND, FINDING_ORDER, Finding, ReconcileRun
from auditor.reconcile.service import RunInProgress, current_run_ids
from auditor.reconcile.tasks import queue_run
from auditor.vocabulary import FINDING_KINDS

RUN_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "binding": {"type": "string"},
        "status": {"type": "string", "enum": [s for s, _ in ReconcileRun.STATUSES]},
        "trigger": {"type": "string", "enum": [t for t, _ in ReconcileRun.TRIGGERS]},
        "full": {"type": "boolean"},
        "mode": {"type": "string"},
        "created_at": {"type": "string", "format": "date-time"},
        "started_at": {"type": ["string", "null"], "format": "date-time"},
        "finished_at": {"type": ["string", "null"], "format": "date-time"},
        "duration_s": {"type": ["number", "null"]},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        "total_findings": {"type": "integer"},
        "new_findings": {"type": "integer"},
        "records_read": {"type": "integer"},
        "window": {"type": "object"},
        "offset_ranges": {"type": "object"},
        "warnings": {"type": "array", "items": {"type": "string"}},
        "error": {"type": "string"},
        "findings_pruned": {"type": "boolean"},
    },
}
FINDING_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "run_id": {"type": "integer"},
        "binding": {"type": "string"},
        "kind": {"type": "string", "enum": list(FINDING_KINDS)},
        "key": {"type": ["string", "null"]},
        "cause": {"type": ["string", "null"]},
        "partition": {"type": ["integer", "null"]},
        "offset": {"type": ["integer", "null"]},
        "offsets": {"type": ["array", "null"]},
        "timestamp": {"type": ["string", "null"], "format": "date-time"},
        "session": {"type": ["string", "null"]},
        "seq": {"type": ["integer", "null"]},
        "seq_end": {"type": ["integer", "null"]},
        "group": {"type": ["string", "null"]},
        "evidence": {"type": ["object", "null"]},
        "is_new": {"type": "boolean"},
        "acknowledgement": ACK_SCHEMA,
    },
}
STATUS_NAMES = tuple(s for s, _ in ReconcileRun.STATUSES)


def _binding(name: str | None) -> Binding | None:
    if not name:
        return None
    binding = Binding.objects.filter(name=name).first()
    if binding is None:
        raise ApiError(404, f"no binding named {name!r}")
    return binding


@endpoint(
    "reconcile/runs/",
    name="reconcile-runs-list",
    summary="Reconciliation runs, newest first",
    tag="reconcile",
    query=[
        Param("binding", description="only runs of this binding (its name)", max_length=100),
        Param("status", description="only runs in this status", enum=STATUS_NAMES),
    ],
    item=RUN_SCHEMA,
    paginated=True,
)
def list_runs(call: ApiCall) -> dict[str, Any]:
    runs = ReconcileRun.objects.select_related("binding").order_by("-id")
    binding = _binding(call.query["binding"])
    if binding is not None:
        runs = runs.filter(binding=binding)
    if call.query["status"]:
        runs = runs.filter(status=call.query["status"])
    return paginate(call, runs, ReconcileRun.as_event)


@endpoint(
    "reconcile/runs/",
    method="POST",
    name="reconcile-runs-trigger",
    summary="Queue a reconciliation run of a binding (202; 409 while one is in progress)",
    tag="reconcile",
    body=[
        Param("binding", description="the binding's name", required=True, max_length=100),
        Param("full", "boolean", description="ignore the incremental state and read everything", default=False),
    ],
    item=RUN_SCHEMA,
)
def trigger_run(call: ApiCall) -> JsonResponse:
    binding = _binding(call.body["binding"])
    if binding is None:
        raise ApiError(400, "field 'binding' is required")
    try:
        run = queue_run(binding, ReconcileRun.API, full=call.body["full"], requested_by=call.user)
    except RunInProgress as exc:
        raise ApiError(409, str(exc)) from None
    return JsonResponse(run.as_event(), status=202)


@endpoint(
    "reconcile/runs/<int:run_id>/",
    name="reconcile-run",
    summary="One reconciliation run",
    tag="reconcile",
    item=RUN_SCHEMA,
)
def get_run(call: ApiCall, run_id: int) -> dict[str, Any]:
    run = ReconcileRun.objects.select_related("binding").filter(pk=run_id).first()
    if run is None:
        raise ApiError(404, f"no run {run_id}")
    return run.as_event()


@endpoint(
    "reconcile/findings/",
    name="reconcile-findings-list",
    summary="Findings: the current ones (each binding's latest successful run) unless ?run= names a run",
    tag="reconcile",
    query=[
        Param("binding", description="only this binding's findings (its name)", max_length=100),
        Param("kind", description="finding kind", enum=FINDING_KINDS),
        Param("cause", description="cause, e.g. producer-retry, app-resend, send-failed", max_length=40),
        Param("key", description="the item's key, exactly", max_length=10_000),
        Param("run", "integer", description="findings of this run instead of the current ones", minimum=1),
        Param("new", "boolean", description="only findings the previous run did not report"),
    ],
    item=FINDING_SCHEMA,
    paginated=True,
)
def list_findings(call: ApiCall) -> dict[str, Any]:
    q = call.query
    binding = _binding(q["binding"])
    findings = Finding.objects.select_related("binding")
    if q["run"] is not None:
        if not ReconcileRun.objects.filter(pk=q["run"]).exists():
            raise ApiError(404, f"no run {q['run']}")
        findings = findings.filter(run_id=q["run"])
    else:
        findings = findings.filter(run_id__in=current_run_ids(binding))
    if binding is not None:
        findings = findings.filter(binding=binding)
    if q["kind"]:
        findings = findings.filter(kind=q["kind"])
    if q["cause"]:
        findings = findings.filter(cause=q["cause"])
    if q["key"] is not None:
        findings = findings.filter(key=q["key"])
    if q["new"]:
        findings = findings.filter(is_new=True)
    page = paginate(call, findings.order_by("binding__name", *FINDING_ORDER), lambda finding: finding)
    page["results"] = [serialize_finding(f) for f in attach_findings_acknowledgements(page["results"])]
    return page


def serialize_finding(finding: Finding) -> dict[str, Any]:
    """A finding with the acknowledgement attached by attach_findings_acknowledgements."""
    return {**finding.as_dict(), "acknowledgement": acknowledgement_json(finding)}


def _finding(finding_id: int) -> Finding:
    finding = Finding.objects.select_related("binding").filter(pk=finding_id).first()
    if finding is None:
        raise ApiError(404, f"no finding {finding_id}")
    return finding


@endpoint(
    "reconcile/findings/<int:finding_id>/",
    name="reconcile-finding",
    summary="One finding, with the acknowledgement or mute in force",
    tag="reconcile",
    item=FINDING_SCHEMA,
)
def get_finding(call: ApiCall, finding_id: int) -> dict[str, Any]:
    [finding] = attach_findings_acknowledgements([_finding(finding_id)])
    return serialize_finding(finding)


@endpoint(
    "reconcile/findings/<int:finding_id>/acknowledge/",
    method="POST",
    name="reconcile-finding-acknowledge",
    summary="Acknowledge or mute a finding (it carries over to later runs reporting the same finding)",
    tag="reconcile",
    body=ACK_BODY,
    item=ACK_SCHEMA,
)
def acknowledge_finding(call: ApiCall, finding_id: int) -> dict[str, Any]:
    """A muted finding raises no alert while the mute lasts; an acknowledged one stays listed, marked."""
    finding = _finding(finding_id)
    return acknowledge_for_api(call, FINDING_ACK_KIND, finding.acknowledgement_key)
