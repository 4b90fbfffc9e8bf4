from django.contrib import admin
from django.db.models import Model

from auditor.pipelines.models import Binding, Cluster, SourceDatabase, StuckRule


@admin.display(description="declared in", ordering="config_file")
def declared_in(obj: Model) -> str:
    """Where the object comes from: `audit apply --prune` of that file removes it once it is no longer declared."""
    return getattr(obj, "config_file", "") or "made here (no file)"


class FileAwareAdmin(admin.ModelAdmin):
    list_filter = ("config_file",)
    readonly_fields = ("config_file",)


@admin.register(Cluster)
class ClusterAdmin(FileAwareAdmin):
    list_display = ("name", "bootstrap_servers", declared_in, "updated_at")


@admin.register(SourceDatabase)
class SourceDatabaseAdmin(FileAwareAdmin):
    list_display = ("name", "masked_url", declared_in, "updated_at")


@admin.register(Binding)
class BindingAdmin(FileAwareAdmin):
    list_display = ("name", "cluster", "topic", "source", "table", "guarantee", "schedule_seconds", declared_in)
    list_select_related = ("cluster", "source")


@admin.register(StuckRule)
class StuckRuleAdmin(FileAwareAdmin):
    list_display = ("name", "binding", "status_column", "stuck_values", "older_than_seconds", declared_in)
    list_select_related = ("binding",)
