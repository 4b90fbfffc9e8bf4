from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import Model

from auditor.lib.secrets import MaskedValueError, keep_stored_if_masked, mask_mapping, mask_url
from auditor.pipelines.models import Binding, Cluster, SourceDatabase, StuckRule


@admin.display(description="declared in", ordering="config_file")
def declared_in(obj: Model) -> str:
    """Where the object comes from: `audit apply --prune` of that file removes it once it is no longer declared."""
    return getattr(obj, "config_file", "") or "made here (no file)"


class FileAwareAdmin(admin.ModelAdmin):
    list_filter = ("config_file",)
    readonly_fields = ("config_file",)


class ClusterAdminForm(forms.ModelForm):
    """The config as pages show it (secret keys and URL passwords as ****, ${ENV} references
    kept); a value posted back as its mask keeps the stored value, one edited around the mask
    (or a new key posted as ****) is refused (keep_stored_if_masked)."""

    class Meta:
        model = Cluster
        fields = "__all__"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if isinstance(self.instance.config, dict):
            self.initial["config"] = mask_mapping(self.instance.config)

    def clean_config(self) -> Any:
        config = self.cleaned_data["config"]
        stored = self.instance.config  # not yet replaced: _post_clean fills the instance
        if not isinstance(config, dict) or not isinstance(stored, dict):
            return config
        masked = mask_mapping(stored)
        kept: dict[str, Any] = {}
        problems: list[str] = []
        for key, value in config.items():
            try:
                kept[key] = keep_stored_if_masked(value, stored.get(key), masked.get(key))
            except MaskedValueError as exc:
                problems.append(f"{key}: {exc}")
        if problems:
            raise forms.ValidationError(problems)
        return kept


class SourceDatabaseAdminForm(forms.ModelForm):
    """The URL as pages show it (its password as ****, a ${ENV} reference kept); posted back
    as that mask, the stored URL is kept; edited around the mask, refused."""

    class Meta:
        model = SourceDatabase
        fields = "__all__"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.url:
            self.initial["url"] = mask_url(self.instance.url)

    def clean_url(self) -> str:
        url: str = self.cleaned_data["url"]
        stored = self.instance.url  # not yet replaced: _post_clean fills the instance
        try:
            return str(keep_stored_if_masked(url, stored, mask_url(stored) if stored else None))
        except MaskedValueError as exc:
            raise forms.ValidationError(str(exc)) from None


@admin.register(Cluster)
class ClusterAdmin(FileAwareAdmin):
    form = ClusterAdminForm
    list_display = ("name", "bootstrap_servers", declared_in, "updated_at")


@admin.register(SourceDatabase)
class SourceDatabaseAdmin(FileAwareAdmin):
    form = SourceDatabaseAdminForm
    list_display = ("name", "masked_url", declared_in, "updated_at")


@admin.register(Binding)
class BindingAdmin(FileAwareAdmin):
    list_display = ("name", "cluster", "topic", "source", "table", "guarantee", "schedule_seconds", declared_in)
    list_select_related = ("cluster", "source")


@admin.register(StuckRule)
class StuckRuleAdmin(FileAwareAdmin):
    list_display = ("name", "binding", "status_column", "stuck_values", "older_than_seconds", declared_in)
    list_select_related = ("binding",)
