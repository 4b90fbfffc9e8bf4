from django.apps import AppConfig


class LabConfig(AppConfig):
    name = "auditor.lab"
    label = "lab"
    verbose_name = "Fault lab"
