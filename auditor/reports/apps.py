from django.apps import AppConfig


class ReportsConfig(AppConfig):
    name = "auditor.reports"
    label = "reports"
    verbose_name = "Scheduled reconciliation reports"

    def ready(self) -> None:
        from auditor.reports import schedules

        schedules.connect_signals()
