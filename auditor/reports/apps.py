from django.apps import AppConfig


class ReportsConfig(AppConfig):
    name = "auditor.reports"
    label = "reports"
    verbose_name = "Scheduled reconciliation reports"

    def ready(self) -> None:
        # Imported once the app registry is ready: schedules.py imports models.
        from auditor.reports import schedules

        schedules.connect_signals()
