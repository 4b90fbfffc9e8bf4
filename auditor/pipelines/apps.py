from django.apps import AppConfig


class PipelinesConfig(AppConfig):
    name = "auditor.pipelines"
    label = "pipelines"
    verbose_name = "Pipelines (clusters, sources, bindings)"
