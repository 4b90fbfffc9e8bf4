from django.apps import AppConfig


class LintConfig(AppConfig):
    name = "auditor.lint"
    label = "lint"
    verbose_name = "Config lint"
