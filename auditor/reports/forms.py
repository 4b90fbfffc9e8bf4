from __future__ import annotations

import re
from typing import Any

from django import forms
from django.core.validators import validate_email

from auditor.alerts.models import Channel
from auditor.lib.durations import parse_duration
from auditor.pipelines.models import Binding
from auditor.reports.models import ReportSchedule

MAX_SINCE_SECONDS = 31 * 86400


class RecipientsField(forms.CharField):
    """E-mail addresses, one per line or separated by commas."""

    widget = forms.Textarea(attrs={"rows": 3})

    def to_python(self, value: Any) -> list[str]:  # type: ignore[override]  # a list field on a text widget
        text = super().to_python(value) or ""
        return [part for part in re.split(r"[\s,;]+", text) if part]

    def prepare_value(self, value: Any) -> Any:
        return "\n".join(value) if isinstance(value, list) else value

    def validate(self, value: Any) -> None:
        bad = []
        for address in value:
            try:
                validate_email(address)
            except forms.ValidationError:
                bad.append(address)
        if bad:
            raise forms.ValidationError(f"not an e-mail address: {', '.join(bad)}")


class ScheduleForm(forms.ModelForm):
    bindings = forms.ModelMultipleChoiceField(
        queryset=Binding.objects.all(), required=False, widget=forms.CheckboxSelectMultiple
    )
    channels = forms.ModelMultipleChoiceField(
        queryset=Channel.objects.all(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="none selected: every enabled channel with 'reports' on",
    )
    email_recipients = RecipientsField(
        required=False, help_text="one address per line; e-mail is sent only when EMAIL_HOST is configured"
    )

    class Meta:
        model = ReportSchedule
        fields = ["name", "period", "enabled", "all_bindings", "bindings", "channels", "email_recipients"]

    def clean(self) -> dict[str, Any]:
        super().clean()  # ModelForm's: returns cleaned_data (typed Optional) and turns on the unique checks
        data = self.cleaned_data
        if not data.get("all_bindings") and not data.get("bindings"):
            self.add_error("bindings", "choose at least one binding, or report on all bindings")
        return data


class BuildForm(forms.Form):
    schedule = forms.ModelChoiceField(
        queryset=ReportSchedule.objects.all(),
        required=False,
        empty_label="no schedule: all bindings",
        help_text="a schedule's bindings over its last whole period",
    )
    since = forms.CharField(
        required=False,
        max_length=20,
        help_text="without a schedule: how far back, e.g. 6h, 1d, 7d (default 1d)",
    )
    deliver = forms.BooleanField(required=False, help_text="send it to the schedule's channels and recipients")

    def clean_since(self) -> int | None:
        raw = (self.cleaned_data.get("since") or "").strip()
        if not raw:
            return None
        try:
            seconds = parse_duration(raw)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
        if not 0 < seconds <= MAX_SINCE_SECONDS:
            raise forms.ValidationError(f"must be between 1s and {MAX_SINCE_SECONDS // 86400}d, got {raw}")
        return seconds
