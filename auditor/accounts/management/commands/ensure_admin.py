"""Create (or reset the password of) the admin login printed by `make run`."""

from __future__ import annotations

import os
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = "Create or update a superuser from --username and the AUDITOR_ADMIN_PASSWORD variable."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument("--password-env", default="AUDITOR_ADMIN_PASSWORD")

    def handle(self, *args: Any, **options: Any) -> None:
        password = os.environ.get(options["password_env"])
        if not password:
            raise CommandError(f"environment variable {options['password_env']} is not set")
        user, created = get_user_model().objects.get_or_create(username=options["username"])
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
        self.stdout.write(f"{'created' if created else 'updated'} admin user {user.username}")
