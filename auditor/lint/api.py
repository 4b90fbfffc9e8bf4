"""Config-lint endpoints of the JSON API (registered with auditor.api.registry)."""

from __future__ import annotations

import logging
from typing import Any

from django.http import JsonResponse

from auditor.api.registry import ApiCall, ApiError, Param, endpoint, paginate
from auditor.lint import tasks
from auditor.lint.engine.defaults import KINDS
from auditor.lint.models import SEVERITIES, LintResultRow, LintScan
from auditor.lint.service import latest_scan
from auditor.vocabulary import GUARANTEES

log = logging.getLogger(__name__)

TRIGGERS = tuple(value for value, _ in LintScan.TRIGGERS)
STATUSES = tuple(value for value, _ in LintScan.STATUSES)
SCAN_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "trigger": {"type": "string", "enum": list(TRIGGERS)},
        "status": {"type": "string", "enum": list(STATUSES), "description": "failed: a part could not be linted"},
        "guarantee": {"type": "string", "description": "blank when each target has its own"},
        "started_at": {"type": "string", "format": "date-time"},
        "finished_at": {"type": "string", "format": "date-time"},
        "summary": {"type": "string"},
        "error": {"type": "string"},
        "notes": {"type": "array", "items": {"type": "string"}},
        "counts": {
            "type": "object",
            "properties": {severity: {"type": "integer"} for severity in SEVERITIES},
        },
        "requested_by": {"type": ["string", "null"]},
    },
}
RESULT_SCHEMA = {
    "type": "object",
    "properties": {
        "rule": {"type": "string"},
        "title": {"type": "string"},
        "severity": {"type": "string", "enum": list(SEVERITIES)},
        "target": {"type": "string", "enum": list(KINDS)},
        "cluster": {"type": "string"},
        "subject": {"type": "string", "description": 'e.g. "topic tickets", "brokers 1, 2, 3"'},
        "config": {"type": "string"},
        "value": {"description": "the effective value (secrets masked)"},
        "expected": {"type": "string"},
        "message": {"type": "string"},
        "guarantee": {"type": "string", "enum": list(GUARANTEES)},
        "source": {"type": "string", "enum": ["explicit", "default"]},
        "why": {"type": "string"},
        "fix": {"type": "string"},
        "explains": {"type": "array", "items": {"type": "array"}, "description": "[finding kind, cause] pairs"},
    },
}
QUEUED_SCHEMA = {
    "type": "object",
    "properties": {
        "status": {"type": "string", "enum": ["queued", "running"]},
        "message": {"type": "string"},
    },
}


def serialize_scan(scan: LintScan) -> dict[str, Any]:
    return {**scan.as_event(), "requested_by": scan.requested_by.get_username() if scan.requested_by else None}


@endpoint(
    "lint/scans/",
    name="lint-scans-list",
    summary="Lint scans, newest first",
    tag="lint",
    query=[
        Param("trigger", description="how the scan was started", enum=TRIGGERS),
        Param("status", description="ok, or failed when a part could not be linted", enum=STATUSES),
    ],
    item=SCAN_SCHEMA,
    paginated=True,
)
def list_scans(call: ApiCall) -> dict[str, Any]:
    scans = LintScan.objects.select_related("requested_by").order_by("-finished_at", "-id")
    if call.query["trigger"]:
        scans = scans.filter(trigger=call.query["trigger"])
    if call.query["status"]:
        scans = scans.filter(status=call.query["status"])
    return paginate(call, scans, serialize_scan)


@endpoint(
    "lint/scans/",
    method="POST",
    name="lint-scans-trigger",
    summary="Queue a lint scan of every configured cluster (answers 202)",
    tag="lint",
    item=QUEUED_SCHEMA,
    description="The scan runs on a Celery worker; its result is the newest of GET /api/lint/scans/ "
    "once it finishes. While a scan runs, another is not queued (status running): "
    "the running scan's result is the one to wait for. 503 when the task queue is unreachable.",
)
def trigger_scan(call: ApiCall) -> JsonResponse:
    if tasks.scan_running():
        status, message = "running", "a lint scan is already running; its result will be the latest scan"
    else:
        try:
            tasks.scan_all_task.delay(LintScan.MANUAL, call.user.pk)
        except Exception:  # the broker being down is the caller's answer, not a 500
            log.exception("could not queue a lint scan")
            raise ApiError(503, "could not queue the scan: the task queue is unreachable") from None
        status, message = "queued", "scan queued; its result will be the latest scan when it finishes"
    return JsonResponse({"status": status, "message": message}, status=202)


@endpoint(
    "lint/results/",
    name="lint-results-list",
    summary="Results of the latest scan of the live system (or of ?scan=), errors first",
    tag="lint",
    query=[
        Param(
            "scan", "integer", description="a scan id (default: the latest scan, pasted configs excepted)", minimum=1
        ),
        Param("severity", description="error, warning or info", enum=SEVERITIES),
        Param("target", description="what was linted", enum=KINDS),
        Param("cluster", description="cluster name", max_length=100),
    ],
    item=RESULT_SCHEMA,
    paginated=True,
    description="The page also carries `scan`: the scan the results belong to (null when there is none yet).",
)
def list_results(call: ApiCall) -> dict[str, Any]:
    query = call.query
    if query["scan"] is not None:
        scan = LintScan.objects.select_related("requested_by").filter(pk=query["scan"]).first()
        if scan is None:
            raise ApiError(404, f"lint scan {query['scan']} does not exist")
    else:
        scan = latest_scan()
    rows = scan.results.all() if scan is not None else LintResultRow.objects.none()
    for name, field in (("severity", "severity"), ("target", "target_kind"), ("cluster", "cluster")):
        if query[name]:
            rows = rows.filter(**{field: query[name]})
    page = paginate(call, rows.in_report_order(), LintResultRow.as_dict)
    return {"scan": serialize_scan(scan) if scan is not None else None, **page}
