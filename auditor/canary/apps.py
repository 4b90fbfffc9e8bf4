from django.apps import AppConfig


class CanaryConfig(AppConfig):
    name = "auditor.canary"
    label = "canary"
    verbose_name = "Canary"

    def ready(self) -> None:
        # Imported once the app registry is ready: alerting.py imports models.
        from auditor.canary import alerting

        alerting.connect_signals()
