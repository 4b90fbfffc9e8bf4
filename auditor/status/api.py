"""The overview endpoint of the JSON API: each pipeline's verdict, as the first screen shows it."""

from __future__ import annotations

from typing import Any

from auditor.api.registry import ApiCall, endpoint
from auditor.status.overview import BROKEN, KEPT, UNKNOWN, overview_json
from auditor.vocabulary import GUARANTEES

_COUNTS = {"type": "object", "additionalProperties": {"type": "integer"}}
PIPELINE_SCHEMA = {
    "type": "object",
    "properties": {
        "binding": {"type": "string"},
        "guarantee": {"type": "string", "enum": list(GUARANTEES)},
        "verdict": {"type": "string", "enum": [KEPT, BROKEN, UNKNOWN]},
        "reasons": {"type": "array", "items": {"type": "string"}, "description": "why, in words"},
        "counts": {**_COUNTS, "description": "breaking findings of the latest successful run, per kind"},
        "unacknowledged": {**_COUNTS, "description": "those of counts nobody acknowledged or muted"},
        "stuck": {**_COUNTS, "description": "open stuck items per verdict"},
        "lint_errors": {"type": "integer", "description": "error results of the latest lint scan on its cluster"},
        "lint_explaining": {"type": "array", "items": {"type": "string"}},
        "alerts_open": {"type": "integer"},
        "last_run_at": {"type": ["string", "null"], "format": "date-time"},
        "last_run_id": {"type": ["integer", "null"]},
        "trend": {"type": "array", "items": {"type": "integer"}, "description": "breaking findings, last runs"},
        "canary": {
            "type": ["object", "null"],
            "description": "loss and latency of the canary on its cluster over the metrics window: sent, lost, truncated (read, then cut from the log), loss_pct ((lost + truncated) / sent, in %), p99_ms, window_minutes",
        },
    },
}
OVERVIEW_SCHEMA = {
    "type": "object",
    "properties": {"pipelines": {"type": "array", "items": PIPELINE_SCHEMA}},
}


@endpoint(
    "overview/",
    name="overview",
    summary="Which pipelines keep their promise now: a verdict (kept, broken, unknown) per binding, with reasons",
    description=(
        "broken: the latest successful reconciliation reported missing, duplicate, gap, aborted, unprocessed "
        "or reprocessed findings that are not acknowledged. unknown: no successful run yet, the last run "
        "failed, or the latest successful run is older than three schedules; the reasons say which."
    ),
    tag="overview",
    item=OVERVIEW_SCHEMA,
)
def overview(call: ApiCall) -> dict[str, Any]:
    return overview_json()
