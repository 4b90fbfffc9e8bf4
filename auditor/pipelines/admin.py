from django.contrib import admin

from auditor.pipelines.models import Binding, Cluster, SourceDatabase, StuckRule


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ("name", "bootstrap_servers", "updated_at")


@admin.register(SourceDatabase)
class SourceDatabaseAdmin(admin.ModelAdmin):
    list_display = ("name", "masked_url", "updated_at")


@admin.register(Binding)
class BindingAdmin(admin.ModelAdmin):
    list_display = ("name", "cluster", "topic", "source", "table", "guarantee", "schedule_seconds")
    list_select_related = ("cluster", "source")


@admin.register(StuckRule)
class StuckRuleAdmin(admin.ModelAdmin):
    list_display = ("name", "binding", "status_column", "stuck_values", "older_than_seconds")
    list_select_related = ("binding",)
