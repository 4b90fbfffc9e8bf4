from django.apps import AppConfig


class MetricsConfig(AppConfig):
    name = "auditor.metrics"
    label = "metrics"
    verbose_name = "Prometheus metrics"
