from django.apps import AppConfig


class StatusConfig(AppConfig):
    name = "auditor.status"
    label = "status"
