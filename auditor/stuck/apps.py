from django.apps import AppConfig


class StuckConfig(AppConfig):
    name = "auditor.stuck"
    label = "stuck"
    verbose_name = "Stuck items"

    def ready(self) -> None:
        # Keeps one beat PeriodicTask per stuck rule in step with the rule (schedules.py);
        # imported once the app registry is ready, since schedules.py imports models.
        from auditor.stuck import alerting, schedules

        schedules.connect_signals()
        alerting.connect_signals()
