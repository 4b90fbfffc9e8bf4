"""Acknowledge, mute and withdraw: the only functions that change acknowledgements.

Every app acknowledges through these, naming what it acknowledges by (kind, key):
``problem`` + an alert fingerprint (auditor/alerts), ``finding`` + a finding's identity
(auditor/reconcile), ``stuck-item`` + a stuck item's id (auditor/stuck). The readers
below attach the acknowledgement in force to the objects a page or the API shows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TypeVar

from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from auditor.accounts.models import Acknowledgement
from auditor.accounts.roles import OPERATOR, has_role
from auditor.lib.live import publish

MAX_REASON = 2000
ATTRIBUTE = "acknowledgement"

T = TypeVar("T")


class AcknowledgementError(ValueError):
    """The acknowledgement asked for is not valid (the message says which input and why)."""


# The live group whose pages show each kind: they refresh when an acknowledgement changes.
LIVE_GROUP_OF_KIND = {"finding": "reconcile", "stuck-item": "stuck", "problem": "alerts"}


def _announce(kind: str, keys: list[str], action: str) -> None:
    group = LIVE_GROUP_OF_KIND.get(kind)
    if group is not None:
        publish(group, "acknowledged", {"kind": kind, "count": len(keys), "action": action})


def _validated_reason(user: User | AnonymousUser, action: str, reason: str, mute_until: datetime | None) -> str:
    if not has_role(user, OPERATOR):
        raise PermissionDenied("acknowledging or muting needs the operator role")
    if action not in (Acknowledgement.ACK, Acknowledgement.MUTE):
        raise AcknowledgementError(f"action {action!r} must be 'ack' or 'mute'")
    reason = (reason or "").strip()
    if not reason:
        raise AcknowledgementError("reason is required: say why")
    if len(reason) > MAX_REASON:
        raise AcknowledgementError(f"reason is longer than {MAX_REASON} characters")
    if mute_until is not None:
        if action != Acknowledgement.MUTE:
            raise AcknowledgementError("mute_until only applies to action 'mute'")
        if timezone.is_naive(mute_until):
            raise AcknowledgementError("mute_until must carry a time zone (e.g. 2030-01-01T00:00:00Z)")
        if mute_until <= timezone.now():
            raise AcknowledgementError("mute_until is in the past")
    return reason


def acknowledge(
    user: User | AnonymousUser,
    kind: str,
    key: str,
    *,
    action: str,
    reason: str,
    mute_until: datetime | None = None,
) -> Acknowledgement:
    """Record that ``user`` acknowledged (action="ack") or muted (action="mute") kind:key."""
    [ack] = acknowledge_many(user, kind, [key], action=action, reason=reason, mute_until=mute_until)
    return ack


def acknowledge_many(
    user: User | AnonymousUser,
    kind: str,
    keys: Iterable[str],
    *,
    action: str,
    reason: str,
    mute_until: datetime | None = None,
) -> list[Acknowledgement]:
    """Acknowledge or mute every kind:key with one reason, all or none (one transaction)."""
    reason = _validated_reason(user, action, reason, mute_until)
    keys = list(dict.fromkeys(keys))
    if not kind or not keys or not all(keys):
        raise AcknowledgementError("kind and key are required")
    with transaction.atomic():
        acks = Acknowledgement.objects.bulk_create(
            [
                Acknowledgement(
                    kind=kind,
                    key=key,
                    action=action,
                    reason=reason,
                    user=user if user.is_authenticated else None,
                    username=user.get_username(),
                    mute_until=mute_until,
                )
                for key in keys
            ]
        )
        _announce(kind, keys, action)
    return acks


def withdraw(user: User | AnonymousUser, acknowledgement: Acknowledgement) -> bool:
    """Withdraw an acknowledgement or mute; False when it was already withdrawn."""
    if not has_role(user, OPERATOR):
        raise PermissionDenied("withdrawing an acknowledgement needs the operator role")
    with transaction.atomic():
        # Conditional: two operators withdrawing at once record one withdrawal.
        updated = Acknowledgement.objects.filter(pk=acknowledgement.pk, withdrawn_at=None).update(
            withdrawn_at=timezone.now(), withdrawn_by=user.get_username()
        )
        if updated:
            _announce(acknowledgement.kind, [acknowledgement.key], "withdrawn")
    acknowledgement.refresh_from_db()
    return updated == 1


def _in_force(ack: Acknowledgement, now: datetime) -> bool:
    return not (ack.action == Acknowledgement.MUTE and ack.mute_until is not None and ack.mute_until <= now)


def current_acknowledgements(kind: str, keys: Iterable[str], now: datetime | None = None) -> dict[str, Acknowledgement]:
    """The acknowledgement in force for each key (one query; keys without one are absent).

    The newest non-withdrawn row decides: an expired mute leaves the key unacknowledged.
    """
    keys = list(set(keys))
    if not keys:
        return {}
    now = now or timezone.now()
    latest = (
        Acknowledgement.objects.filter(kind=kind, key__in=keys, withdrawn_at=None)
        .order_by("key", "-created_at", "-id")
        .distinct("key")
    )
    return {ack.key: ack for ack in latest if _in_force(ack, now)}


def current_acknowledgement(kind: str, key: str, now: datetime | None = None) -> Acknowledgement | None:
    return current_acknowledgements(kind, [key], now).get(key)


def is_muted(kind: str, key: str, now: datetime | None = None) -> Acknowledgement | None:
    """The mute in force for kind:key, or None."""
    ack = current_acknowledgement(kind, key, now)
    return ack if ack is not None and ack.action == Acknowledgement.MUTE else None


def mutes_in_force(kind: str, key_prefix: str = "", now: datetime | None = None) -> dict[str, Acknowledgement]:
    """The mutes in force of ``kind`` (keys starting with ``key_prefix``), by key.

    For callers that must leave muted things out of a large set (alerting on every finding
    of a run): the query scales with the number of live mutes, not with the set.
    """
    now = now or timezone.now()
    candidates = (
        Acknowledgement.objects.filter(kind=kind, action=Acknowledgement.MUTE, withdrawn_at=None)
        .filter(Q(mute_until=None) | Q(mute_until__gt=now))
        .filter(key__startswith=key_prefix)
        .values_list("key", flat=True)
        .distinct()
    )
    current = current_acknowledgements(kind, list(candidates), now)
    return {key: ack for key, ack in current.items() if ack.action == Acknowledgement.MUTE}


def attach_acknowledgements(objects: Iterable[T], kind: str, key_of: Callable[[T], str]) -> list[T]:
    """Set ``obj.acknowledgement`` of each object to the acknowledgement in force for it (one query)."""
    objects = list(objects)
    current = current_acknowledgements(kind, [key_of(obj) for obj in objects])
    for obj in objects:
        setattr(obj, ATTRIBUTE, current.get(key_of(obj)))
    return objects


def acknowledgement_json(obj: object) -> dict[str, Any] | None:
    """The JSON of the acknowledgement attached to ``obj`` by attach_acknowledgements (None: none)."""
    ack: Acknowledgement | None = getattr(obj, ATTRIBUTE, None)
    return ack.as_dict() if ack is not None else None
