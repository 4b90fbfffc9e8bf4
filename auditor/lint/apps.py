from django.apps import AppConfig


class LintConfig(AppConfig):
    name = "auditor.lint"
    label = "lint"
    verbose_name = "Config lint"

    def ready(self) -> None:
        # Imported once the app registry is ready: alerting.py imports models.
        from auditor.lint import alerting

        alerting.connect_signals()
