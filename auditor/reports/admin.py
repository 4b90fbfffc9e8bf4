from django.contrib import admin
from django.http import HttpRequest

from auditor.reports.models import Report, ReportSchedule


@admin.register(ReportSchedule)
class ReportScheduleAdmin(admin.ModelAdmin):
    list_display = ("name", "period", "enabled", "all_bindings", "updated_at")
    list_filter = ("period", "enabled")
    filter_horizontal = ("bindings", "channels")


@admin.register(Report)
class ReportAdmin(admin.ModelAdmin):
    list_display = ("id", "title", "schedule", "trigger", "status", "period_start", "period_end", "csv_rows")
    list_filter = ("status", "trigger", "schedule")
    date_hierarchy = "period_start"
    exclude = ("html", "csv")  # megabytes of markup; the report's page shows them
    readonly_fields = [f.name for f in Report._meta.fields if f.name not in ("html", "csv")]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # reports are built, not typed in
