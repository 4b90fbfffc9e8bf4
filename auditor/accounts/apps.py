from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "auditor.accounts"
    label = "accounts"
