from django.contrib import admin
from django.http import HttpRequest

from auditor.reconcile.models import Finding, ReconcileRun


@admin.register(ReconcileRun)
class ReconcileRunAdmin(admin.ModelAdmin):
    list_display = ("id", "binding", "status", "trigger", "mode", "created_at", "duration_seconds", "records_read")
    list_filter = ("status", "trigger", "binding")
    date_hierarchy = "created_at"
    readonly_fields = [field.name for field in ReconcileRun._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # runs are started by beat, "run now", the API or the CLI


@admin.register(Finding)
class FindingAdmin(admin.ModelAdmin):
    list_display = ("id", "run", "binding", "kind", "cause", "key", "partition", "offset", "is_new")
    list_filter = ("kind", "cause", "binding")
    search_fields = ("=key",)
    list_select_related = ("run", "binding")
    readonly_fields = [field.name for field in Finding._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # findings are what a run reported
