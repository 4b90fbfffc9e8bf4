from django.apps import AppConfig


class ReconcileConfig(AppConfig):
    name = "auditor.reconcile"
    label = "reconcile"
    verbose_name = "Reconciliation (topic against source table)"

    def ready(self) -> None:
        # Imported once the app registry is ready: schedules.py imports models.
        from auditor.reconcile import alerting, schedules

        schedules.connect_signals()
        alerting.connect_signals()
