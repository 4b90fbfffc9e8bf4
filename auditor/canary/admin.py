from django.contrib import admin

from auditor.canary.models import CanaryPoint


@admin.register(CanaryPoint)
class CanaryPointAdmin(admin.ModelAdmin):
    list_display = ("minute", "topic", "partition", "leader", "sent", "received", "lost", "duplicated", "p99_ms")
    list_filter = ("topic",)
    ordering = ("-minute", "partition")
    date_hierarchy = "minute"

    def has_add_permission(self, request: object) -> bool:
        return False  # points are measurements: only the canary writes them
