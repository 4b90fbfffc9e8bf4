from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "auditor.alerts"
    label = "alerts"
