"""Payload formats: format name -> dotted path of a builder, imported on first use."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from django.utils.module_loading import import_string

FORMATS = {
    "generic": "auditor.alerts.formats.generic_payload",
    "slack": "auditor.alerts.formats.slack_payload",
}
_HEADLINES = {"opened": "Problem", "resolved": "Resolved", "test": "Test", "notice": "Notice"}


@dataclass(frozen=True)
class Message:
    event: str  # opened | resolved | test | notice
    channel: str
    kind: str
    summary: str
    fingerprint: str | None = None
    binding: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    alert: dict[str, Any] | None = None
    # In the signed body, so a receiver deduplicating on them can trust them (the headers
    # X-Auditor-Delivery and X-Auditor-Event are not signed).
    delivery_id: int | None = None
    sequence: int | None = None  # of the alert's deliveries: 1 for its first


@cache
def _builder(format_name: str) -> Callable[[Message], dict[str, Any]]:
    try:
        return import_string(FORMATS[format_name])
    except KeyError:
        raise ValueError(f"unknown payload format {format_name!r} (expected: {', '.join(FORMATS)})") from None


def build_payload(format_name: str, message: Message) -> dict[str, Any]:
    return _builder(format_name)(message)


def generic_payload(message: Message) -> dict[str, Any]:
    return {
        "event": message.event,
        "delivery_id": message.delivery_id,
        "sequence": message.sequence,
        "channel": message.channel,
        "kind": message.kind,
        "fingerprint": message.fingerprint,
        "binding": message.binding,
        "summary": message.summary,
        "details": message.details,
        "alert": message.alert,
    }


def slack_escape(text: str) -> str:
    """Slack mrkdwn control characters (a summary must not become a link or a mention)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_payload(message: Message) -> dict[str, Any]:
    headline = _HEADLINES.get(message.event, message.event)
    where = f" on {message.binding}" if message.binding else ""
    text = f"[{headline}] {message.kind}{where}: {message.summary}"
    context = [f"channel `{slack_escape(message.channel)}`"]
    if message.fingerprint:
        context.append(f"fingerprint `{slack_escape(message.fingerprint)}`")
    if message.alert:
        context.append(f"first seen {message.alert['first_seen']}, seen {message.alert['count']} times")
    if message.delivery_id is not None:
        # Only text and blocks: strict Slack-compatible tools refuse other fields.
        context.append(f"delivery #{message.delivery_id}")
    return {
        "text": slack_escape(text),
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": f"{headline}: {message.kind}{where}"[:150]}},
            {"type": "section", "text": {"type": "mrkdwn", "text": slack_escape(message.summary)[:3000]}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": " · ".join(context)}]},
        ],
    }
