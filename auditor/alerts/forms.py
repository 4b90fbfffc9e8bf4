from __future__ import annotations

from typing import Any

from django import forms

from auditor.alerts import conf
from auditor.alerts.config import check_secret, check_url
from auditor.alerts.destinations import DestinationRefused, check_destination
from auditor.alerts.events import LINT_SEVERITIES, EventFilter
from auditor.alerts.models import Channel
from auditor.alerts.retry import TransportError
from auditor.lib.secrets import MaskedValueError, env_refs, keep_stored_if_masked, mask_webhook_url
from auditor.pipelines.models import Binding
from auditor.vocabulary import FINDING_KINDS, STUCK_VERDICTS


def _collect(check: Any, value: Any) -> None:
    """Run a config check and turn its problems into a ValidationError."""
    messages: list[str] = []
    check(value, "", lambda _path, message: messages.append(message))
    if messages:
        raise forms.ValidationError(messages)


class ChannelForm(forms.ModelForm):
    secret = forms.CharField(
        label="Signing secret",
        required=False,
        max_length=200,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text="a ${ENV} reference to the variable holding the signing secret; leave empty to keep the current one",
    )
    bindings = forms.ModelMultipleChoiceField(
        queryset=Binding.objects.all(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="none selected: every binding",
    )
    finding_kinds = forms.MultipleChoiceField(
        choices=[(k, k) for k in FINDING_KINDS], required=False, widget=forms.CheckboxSelectMultiple
    )
    stuck_verdicts = forms.MultipleChoiceField(
        choices=[(v, v) for v in STUCK_VERDICTS], required=False, widget=forms.CheckboxSelectMultiple
    )
    lint_severity = forms.ChoiceField(
        choices=[("", "none"), *[(s, f"{s} and worse") for s in LINT_SEVERITIES]], required=False
    )
    canary_loss = forms.IntegerField(min_value=1, required=False, help_text="records lost, at or above")
    canary_latency_ms = forms.IntegerField(min_value=1, required=False, help_text="p99 latency in ms, at or above")
    reports = forms.BooleanField(required=False)

    class Meta:
        model = Channel
        fields = ["name", "url", "secret", "format", "enabled", "bindings"]
        labels = {"url": "URL"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            events = self.instance.event_filter
            self.initial.update(
                finding_kinds=list(events.finding_kinds),
                stuck_verdicts=list(events.stuck_verdicts),
                lint_severity=events.lint_severity or "",
                canary_loss=events.canary_loss,
                canary_latency_ms=events.canary_latency_ms,
                reports=events.reports,
            )
        if self.instance.url:  # a literal hook URL carries its token: sent as pages show it
            self.initial["url"] = mask_webhook_url(self.instance.url)
        self.initial.pop("secret", None)  # never sent back to the browser

    def clean_url(self) -> str:
        url = self.cleaned_data["url"].strip()
        stored = self.instance.url  # not yet replaced: _post_clean fills the instance
        try:
            kept = keep_stored_if_masked(url, stored, mask_webhook_url(stored) if stored else None)
        except MaskedValueError as exc:
            _collect(check_url, url)  # a wrong scheme is said first
            raise forms.ValidationError(str(exc)) from None
        if kept != url:
            return str(kept)  # posted back as shown: the stored URL, unchanged
        _collect(check_url, url)
        if not env_refs(url):
            try:
                check_destination(url, allow_private=conf.allow_private())
            except DestinationRefused as exc:
                raise forms.ValidationError(exc.message) from None
            except TransportError:
                pass  # unresolvable now is not refused: the delivery will say so if it stays that way
        return url

    def clean_secret(self) -> str:
        secret = self.cleaned_data.get("secret", "").strip()
        if not secret and self.instance.pk:
            return self.instance.secret
        _collect(check_secret, secret)
        return secret

    def save(self, commit: bool = True) -> Channel:
        data = self.cleaned_data
        self.instance.events = EventFilter(
            finding_kinds=tuple(data["finding_kinds"]),
            stuck_verdicts=tuple(data["stuck_verdicts"]),
            lint_severity=data["lint_severity"] or None,
            canary_loss=data["canary_loss"],
            canary_latency_ms=data["canary_latency_ms"],
            reports=data["reports"],
        ).as_json()
        return super().save(commit)
