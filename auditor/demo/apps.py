from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "auditor.demo"
    label = "demo"
    verbose_name = "Demo ticket pipeline"
