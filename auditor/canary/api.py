"""Canary endpoints of the JSON API (registered with auditor.api.registry)."""

from __future__ import annotations

from typing import Any

from auditor.api.registry import ApiCall, ApiError, Param, endpoint, paginate
from auditor.canary.models import CanaryPoint

POINT_SCHEMA = {
    "type": "object",
    "properties": {
        "topic": {"type": "string"},
        "partition": {"type": "integer"},
        "minute": {"type": "string", "format": "date-time", "description": "start of the minute (UTC)"},
        "session": {"type": "string", "description": "the canary run that measured it"},
        "cluster": {
            "type": "string",
            "description": "the configured cluster it ran against (audit canary --cluster); empty when none was named",
        },
        "bootstrap_servers": {
            "type": "string",
            "description": "the bootstrap servers it ran against; empty on points stored before they were recorded",
        },
        "scope": {
            "type": "string",
            "description": "what tells its cluster apart from canaries on other clusters (same as the alerts' "
            "fingerprints and the metrics' cluster label): the cluster's name, servers=<hosts> for other "
            "bootstrap servers, empty for the default cluster",
        },
        "leader": {"type": ["integer", "null"], "description": "leader broker id when the minute closed"},
        "sent": {"type": "integer"},
        "received": {"type": "integer"},
        "lost": {"type": "integer", "description": "acknowledged by the broker and not received within the SLA"},
        "lost_leaders": {
            "type": "object",
            "additionalProperties": {"type": "integer"},
            "description": "lost records per leader broker id they were sent to (the leader when the minute "
            "closed can be a successor)",
        },
        "duplicated": {"type": "integer"},
        "out_of_order": {"type": "integer"},
        "late": {"type": "integer", "description": "received after the SLA (already counted lost)"},
        "produce_errors": {
            "type": "integer",
            "description": "delivery failed: the broker never took the record (never counted lost)",
        },
        "unacked": {
            "type": "integer",
            "description": "no delivery report yet when the SLA ran out (not a loss; counted once)",
        },
        "truncated": {
            "type": "integer",
            "description": "read, then cut from the log: another record was read later at its offset",
        },
        "p50_ms": {"type": ["number", "null"]},
        "p99_ms": {"type": ["number", "null"]},
        "max_ms": {"type": ["number", "null"]},
        "partial": {"type": "boolean", "description": "the session ended before the minute did"},
    },
}


def serialize_point(point: CanaryPoint) -> dict[str, Any]:
    return {"topic": point.topic, **point.as_event()}


@endpoint(
    "canary/points/",
    name="canary-points-list",
    summary="Per-minute canary measurements per topic partition, newest minute first",
    tag="canary",
    query=[
        Param("topic", description="canary topic name", max_length=249),
        Param("partition", "integer", description="partition number", minimum=0, maximum=2**31 - 1),
        Param("since", "datetime", description="minutes starting at or after this time"),
        Param("until", "datetime", description="minutes starting before this time"),
    ],
    item=POINT_SCHEMA,
    paginated=True,
)
def list_points(call: ApiCall) -> dict[str, Any]:
    query = call.query
    if query["since"] and query["until"] and query["since"] >= query["until"]:
        raise ApiError(400, "query parameter since must be earlier than until")
    points = CanaryPoint.objects.order_by("-minute", "topic", "partition", "session")
    if query["topic"]:
        points = points.filter(topic=query["topic"])
    if query["partition"] is not None:
        points = points.filter(partition=query["partition"])
    if query["since"]:
        points = points.filter(minute__gte=query["since"])
    if query["until"]:
        points = points.filter(minute__lt=query["until"])
    return paginate(call, points, serialize_point)
