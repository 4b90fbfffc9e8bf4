from django.contrib import admin

from auditor.stuck.models import DiagnosisRun, StuckItem


@admin.register(DiagnosisRun)
class DiagnosisRunAdmin(admin.ModelAdmin):
    list_display = ("id", "rule", "trigger", "status", "started_at", "duration_s", "total", "engine", "degraded")
    list_filter = ("status", "trigger", "rule")
    readonly_fields = [f.name for f in DiagnosisRun._meta.fields]

    def has_add_permission(self, request: object) -> bool:
        return False  # runs are records of diagnoses: only a diagnosis writes them


@admin.register(StuckItem)
class StuckItemAdmin(admin.ModelAdmin):
    list_display = ("key", "rule", "verdict", "status", "age_seconds", "first_seen", "resolved_at")
    list_filter = ("verdict", "rule")
    search_fields = ("key",)
    readonly_fields = [f.name for f in StuckItem._meta.fields]

    def has_add_permission(self, request: object) -> bool:
        return False
