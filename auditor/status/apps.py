from django.apps import AppConfig


class StatusConfig(AppConfig):
    name = "auditor.status"
    label = "status"

    def ready(self) -> None:
        # Bind @shared_task to the auditor's Celery app in every Django process
        # (web, management commands); `celery -A auditor` imports it by itself.
        import auditor.celery  # noqa: F401
