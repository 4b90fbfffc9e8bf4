from django.apps import AppConfig


class CanaryConfig(AppConfig):
    name = "auditor.canary"
    label = "canary"
    verbose_name = "Canary"
