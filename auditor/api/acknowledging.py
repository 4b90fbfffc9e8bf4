"""What the API's acknowledge endpoints share: the body they take, the answer's schema, the call.

Each app registers its own ``…/acknowledge/`` endpoint (it knows the object and its key)
with ``body=ACK_BODY`` and ``item=ACK_SCHEMA`` and answers with ``acknowledge_for_api``.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied

from auditor.accounts.acknowledgements import MAX_REASON, AcknowledgementError, acknowledge
from auditor.api.registry import ApiCall, ApiError, Param

ACK_SCHEMA: dict[str, Any] = {
    "type": ["object", "null"],
    "description": "the acknowledgement or mute in force: who, when and why (null: none)",
    "properties": {
        "id": {"type": "integer"},
        "kind": {"type": "string"},
        "key": {"type": "string"},
        "action": {"type": "string", "enum": ["ack", "mute"]},
        "reason": {"type": "string"},
        "by": {"type": "string"},
        "at": {"type": "string", "format": "date-time"},
        "mute_until": {"type": ["string", "null"], "format": "date-time"},
    },
}
ACK_BODY = (
    Param("action", description="ack or mute", required=True, enum=("ack", "mute")),
    Param("reason", description="why", required=True, max_length=MAX_REASON),
    Param("mute_until", "datetime", description="end of a mute (default: until withdrawn)"),
)


def acknowledge_for_api(call: ApiCall, kind: str, key: str) -> dict[str, Any]:
    """Acknowledge or mute kind:key as the call's validated body asks; 400/403 with the reason otherwise."""
    try:
        ack = acknowledge(
            call.user,
            kind,
            key,
            action=call.body["action"],
            reason=call.body["reason"],
            mute_until=call.body["mute_until"],
        )
    except AcknowledgementError as exc:
        raise ApiError(400, str(exc)) from None
    except PermissionDenied as exc:
        raise ApiError(403, str(exc)) from None
    return ack.as_dict()
