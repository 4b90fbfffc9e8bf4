"""The acknowledge-or-mute form every page shares (alerts, findings, stuck items)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django import forms
from django.utils import timezone

from auditor.accounts.acknowledgements import MAX_REASON
from auditor.accounts.models import Acknowledgement


class AcknowledgeForm(forms.Form):
    action = forms.ChoiceField(choices=[(Acknowledgement.ACK, "acknowledge"), (Acknowledgement.MUTE, "mute")])
    reason = forms.CharField(max_length=MAX_REASON, widget=forms.TextInput(attrs={"placeholder": "why"}))
    mute_hours = forms.IntegerField(
        min_value=1, max_value=24 * 90, required=False, help_text="for a mute; empty: until withdrawn"
    )

    def mute_until(self) -> datetime | None:
        """When a mute asked for with a number of hours ends (None: until withdrawn, or not a mute)."""
        data = self.cleaned_data
        if data["action"] != Acknowledgement.MUTE or not data["mute_hours"]:
            return None
        return timezone.now() + timedelta(hours=data["mute_hours"])
