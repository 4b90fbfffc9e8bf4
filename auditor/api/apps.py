from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "auditor.api"
    label = "api"
