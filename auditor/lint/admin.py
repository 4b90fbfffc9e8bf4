from django.contrib import admin
from django.http import HttpRequest

from auditor.lint.models import LintResultRow, LintScan


class LintResultInline(admin.TabularInline):
    model = LintResultRow
    fields = ("severity", "rule", "target_kind", "cluster", "subject", "config_key", "value", "expected", "source")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(LintScan)
class LintScanAdmin(admin.ModelAdmin):
    list_display = ("id", "finished_at", "trigger", "status", "error_count", "warning_count", "info_count", "summary")
    list_filter = ("trigger", "status")
    date_hierarchy = "finished_at"
    readonly_fields = [field.name for field in LintScan._meta.fields]
    inlines = [LintResultInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # scans are what the linter found: only scans write them


@admin.register(LintResultRow)
class LintResultRowAdmin(admin.ModelAdmin):
    list_display = ("scan", "severity", "rule", "target_kind", "subject", "config_key", "value")
    list_filter = ("severity", "target_kind", "rule")
    list_select_related = ("scan",)
    readonly_fields = [field.name for field in LintResultRow._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
