"""What a page's acknowledge and withdraw POSTs share, whatever they acknowledge.

The views stay in their apps (they know the object, its key and where to go back);
these helpers validate the shared form, make the one state change and say what happened.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest

from auditor.accounts.acknowledgements import AcknowledgementError, acknowledge, acknowledge_many, withdraw
from auditor.accounts.forms import AcknowledgeForm
from auditor.accounts.models import Acknowledgement


def acknowledge_from_post(request: HttpRequest, kind: str, key: str, label: str) -> Acknowledgement | None:
    """Acknowledge or mute kind:key as the AcknowledgeForm in request.POST asks; None if refused (with why)."""
    form = AcknowledgeForm(request.POST)
    if not form.is_valid():
        errors = "; ".join(f"{field}: {' '.join(map(str, errs))}" for field, errs in form.errors.items())
        messages.error(request, f"Not acknowledged: {errors}")
        return None
    try:
        ack = acknowledge(
            request.user,
            kind,
            key,
            action=form.cleaned_data["action"],
            reason=form.cleaned_data["reason"],
            mute_until=form.mute_until(),
        )
    except AcknowledgementError as exc:
        messages.error(request, f"Not acknowledged: {exc}")
        return None
    messages.success(request, f"{ack.get_action_display().capitalize()} {label}.")
    return ack


def withdraw_from_post(request: HttpRequest, ack: Acknowledgement | None, label: str) -> bool:
    """Withdraw ``ack`` for the requesting operator; False (and a message) when there was none in force."""
    if ack is None or not withdraw(request.user, ack):
        messages.info(request, f"Nothing to withdraw for {label}: no acknowledgement or mute is in force.")
        return False
    messages.success(request, f"Withdrawn: {ack.get_action_display()} of {label}.")
    return True


def acknowledge_many_from_post(request: HttpRequest, kind: str, keys: list[str], label: str) -> int:
    """Acknowledge or mute every kind:key of a page's selection with the one form in request.POST.

    All or none; returns how many were recorded (0, with a message saying why, when refused).
    """
    form = AcknowledgeForm(request.POST)
    if not form.is_valid():
        errors = "; ".join(f"{field}: {' '.join(map(str, errs))}" for field, errs in form.errors.items())
        messages.error(request, f"Not acknowledged: {errors}")
        return 0
    if not keys:
        messages.error(request, f"Not acknowledged: no {label} selected")
        return 0
    try:
        acks = acknowledge_many(
            request.user,
            kind,
            keys,
            action=form.cleaned_data["action"],
            reason=form.cleaned_data["reason"],
            mute_until=form.mute_until(),
        )
    except AcknowledgementError as exc:
        messages.error(request, f"Not acknowledged: {exc}")
        return 0
    verb = "Muted" if form.cleaned_data["action"] == Acknowledgement.MUTE else "Acknowledged"
    messages.success(request, f"{verb} {len(acks)} {label}.")
    return len(acks)
