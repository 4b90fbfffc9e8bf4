"""Alerting endpoints of the JSON API (registered with auditor.api.registry)."""

from __future__ import annotations

from typing import Any

from auditor.accounts.acknowledgements import acknowledgement_json
from auditor.accounts.roles import OPERATOR
from auditor.alerts.acknowledgements import attach_acknowledgements
from auditor.alerts.models import Alert, Channel
from auditor.alerts.problems import PROBLEM_ACK_KIND
from auditor.api.acknowledging import ACK_BODY, ACK_SCHEMA, acknowledge_for_api
from auditor.api.registry import ApiCall, ApiError, Param, endpoint, paginate

ALERT_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "channel": {"type": "string"},
        "fingerprint": {"type": "string"},
        "kind": {"type": "string"},
        "binding": {"type": ["string", "null"]},
        "summary": {"type": "string"},
        "details": {"type": "object"},
        "state": {"type": "string", "enum": ["open", "resolved"]},
        "first_seen": {"type": "string", "format": "date-time"},
        "last_seen": {"type": "string", "format": "date-time"},
        "resolved_at": {"type": ["string", "null"], "format": "date-time"},
        "count": {"type": "integer"},
        "acknowledgement": ACK_SCHEMA,
    },
}
CHANNEL_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "url": {"type": "string", "description": "as configured (${ENV} references unresolved, passwords masked)"},
        "format": {"type": "string", "enum": ["generic", "slack"]},
        "enabled": {"type": "boolean"},
        "events": {"type": "object"},
        "bindings": {"type": "array", "items": {"type": "string"}},
        "last_delivery_at": {"type": ["string", "null"], "format": "date-time"},
        "last_error": {"type": "string"},
    },
}


def serialize_alert(alert: Alert) -> dict[str, Any]:
    return {**alert.as_dict(), "channel": alert.channel.name, "acknowledgement": acknowledgement_json(alert)}


@endpoint(
    "alerts/",
    name="alerts-list",
    summary="Alerts (problems per channel), most recently seen first, with their acknowledgement",
    tag="alerts",
    query=[
        Param("state", description="open or resolved", enum=("open", "resolved")),
        Param("channel", description="channel name", max_length=100),
        Param("binding", description="binding name", max_length=100),
        Param("kind", description="problem kind, e.g. finding:missing", max_length=60),
    ],
    item=ALERT_SCHEMA,
    paginated=True,
)
def list_alerts(call: ApiCall) -> dict[str, Any]:
    alerts = Alert.objects.select_related("channel", "binding").order_by("-last_seen", "-id")
    for field, lookup in (
        ("state", "state"),
        ("channel", "channel__name"),
        ("binding", "binding__name"),
        ("kind", "kind"),
    ):
        if call.query[field]:
            alerts = alerts.filter(**{lookup: call.query[field]})
    page = paginate(call, alerts, lambda alert: alert)
    page["results"] = [serialize_alert(a) for a in attach_acknowledgements(page["results"])]
    return page


@endpoint(
    "alerts/<int:alert_id>/acknowledge/",
    method="POST",
    name="alerts-acknowledge",
    summary="Acknowledge or mute the problem of an alert (on every channel)",
    tag="alerts",
    role=OPERATOR,
    body=ACK_BODY,
    item=ACK_SCHEMA,
)
def acknowledge_alert(call: ApiCall, alert_id: int) -> dict[str, Any]:
    alert = Alert.objects.filter(pk=alert_id).first()
    if alert is None:
        raise ApiError(404, f"alert {alert_id} does not exist")
    return acknowledge_for_api(call, PROBLEM_ACK_KIND, alert.fingerprint)


def serialize_channel(channel: Channel) -> dict[str, Any]:
    return {
        "name": channel.name,
        "url": channel.masked_url(),
        "format": channel.format,
        "enabled": channel.enabled,
        "events": channel.event_filter.as_json(),
        "bindings": [b.name for b in channel.bindings.all()],
        "last_delivery_at": channel.last_delivery_at.isoformat() if channel.last_delivery_at else None,
        "last_error": channel.last_error,
    }


@endpoint(
    "alerts/channels/",
    name="alert-channels-list",
    summary="Webhook channels (secrets are never included)",
    tag="alerts",
    item=CHANNEL_SCHEMA,
    paginated=True,
)
def list_channels(call: ApiCall) -> dict[str, Any]:
    return paginate(call, Channel.objects.prefetch_related("bindings").order_by("name"), serialize_channel)
