from __future__ import annotations

from django import forms

from auditor.api.models import ApiToken


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="what the token is for, e.g. 'grafana'")
    scope = forms.ChoiceField(choices=ApiToken.SCOPES, initial=ApiToken.READ, widget=forms.RadioSelect)
