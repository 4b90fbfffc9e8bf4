"""Stuck-item endpoints of the JSON API (registered with auditor.api.registry)."""

from __future__ import annotations

from typing import Any

from auditor.api.acknowledging import ACK_BODY, ACK_SCHEMA, acknowledge_for_api
from auditor.api.registry import ApiCall, ApiError, Param, endpoint, paginate
from auditor.pipelines.models import StuckRule
from auditor.stuck.acknowledgements import attach_items_acknowledgements, item_json
from auditor.stuck.models import STUCK_ITEM_ACK_KIND, DiagnosisRun, StuckItem
from auditor.stuck.runlock import diagnosis_running
from auditor.stuck.tasks import diagnose_rule_task
from auditor.vocabulary import STUCK_VERDICTS

ITEM_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "rule": {"type": "string"},
        "key": {"type": "string"},
        "status": {"type": "string"},
        "age_seconds": {"type": "number"},
        "since": {"type": ["string", "null"], "format": "date-time"},
        "verdict": {"type": "string", "enum": list(STUCK_VERDICTS)},
        "reason": {"type": "string"},
        "evidence": {"type": "object"},
        "first_seen": {"type": "string", "format": "date-time"},
        "last_seen": {"type": "string", "format": "date-time"},
        "verdict_since": {"type": "string", "format": "date-time"},
        "resolved_at": {"type": ["string", "null"], "format": "date-time"},
        "acknowledgement": ACK_SCHEMA,
    },
}
RUN_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "rule": {"type": "string"},
        "binding": {"type": "string"},
        "trigger": {"type": "string"},
        "status": {"type": "string", "enum": ["running", "ok", "failed"]},
        "error": {"type": "string"},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        "risks": {"type": "array", "items": {"type": "object"}},
    },
}
_RULE = Param("rule", description="stuck rule name", max_length=100)


@endpoint(
    "stuck/items/",
    name="stuck-items-list",
    summary="Items stuck now (or resolved ones with state=resolved), oldest first, with verdict and evidence",
    tag="stuck",
    query=[
        _RULE,
        Param("verdict", description="verdict", enum=STUCK_VERDICTS),
        Param("state", description="open (default) or resolved", enum=("open", "resolved"), default="open"),
    ],
    item=ITEM_SCHEMA,
    paginated=True,
)
def list_items(call: ApiCall) -> dict[str, Any]:
    items = StuckItem.objects.select_related("rule")
    if call.query["state"] == "resolved":
        items = items.filter(resolved_at__isnull=False).order_by("-resolved_at", "-id")
    else:
        items = items.open().order_by("-age_seconds", "key")
    if call.query["rule"]:
        items = items.filter(rule__name=call.query["rule"])
    if call.query["verdict"]:
        items = items.filter(verdict=call.query["verdict"])
    page = paginate(call, items, lambda item: item)
    page["results"] = [item_json(item) for item in attach_items_acknowledgements(page["results"])]
    return page


def _item(item_id: int) -> StuckItem:
    item = StuckItem.objects.select_related("rule").filter(pk=item_id).first()
    if item is None:
        raise ApiError(404, f"stuck item {item_id} does not exist")
    return item


@endpoint(
    "stuck/items/<int:item_id>/",
    name="stuck-item",
    summary="One stuck item (open or resolved), with the acknowledgement or mute in force",
    tag="stuck",
    item=ITEM_SCHEMA,
)
def get_item(call: ApiCall, item_id: int) -> dict[str, Any]:
    [item] = attach_items_acknowledgements([_item(item_id)])
    return item_json(item)


@endpoint(
    "stuck/items/<int:item_id>/acknowledge/",
    method="POST",
    name="stuck-item-acknowledge",
    summary="Acknowledge or mute an open stuck item (a muted item raises no alert while the mute lasts)",
    tag="stuck",
    body=ACK_BODY,
    item=ACK_SCHEMA,
)
def acknowledge_item(call: ApiCall, item_id: int) -> dict[str, Any]:
    item = _item(item_id)
    if item.resolved_at is not None:
        raise ApiError(
            409, f"stuck item {item_id} was resolved at {item.resolved_at.isoformat()}: nothing to acknowledge"
        )
    return acknowledge_for_api(call, STUCK_ITEM_ACK_KIND, item.acknowledgement_key)


@endpoint(
    "stuck/runs/",
    name="stuck-runs-list",
    summary="Diagnosis runs, newest first",
    tag="stuck",
    query=[_RULE],
    item=RUN_SCHEMA,
    paginated=True,
)
def list_runs(call: ApiCall) -> dict[str, Any]:
    runs = DiagnosisRun.objects.select_related("rule", "rule__binding")
    if call.query["rule"]:
        runs = runs.filter(rule__name=call.query["rule"])
    return paginate(call, runs, lambda run: run.as_event())


@endpoint(
    "stuck/rules/<slug:name>/diagnose/",
    name="stuck-diagnose",
    summary="Queue a diagnosis of one stuck rule; its result arrives as a run",
    tag="stuck",
    method="POST",
)
def diagnose(call: ApiCall, name: str) -> dict[str, Any]:
    rule = StuckRule.objects.filter(name=name).first()
    if rule is None:
        raise ApiError(404, f"stuck rule {name!r} does not exist")
    if diagnosis_running(rule):
        return {"status": "running", "rule": name}
    try:
        diagnose_rule_task.delay(rule.pk, DiagnosisRun.MANUAL, getattr(call.user, "pk", None))
    except Exception as exc:
        raise ApiError(503, "the task queue is unreachable") from exc
    return {"status": "queued", "rule": name}
