"""Users on each side of every role boundary, shared by the accounts, alerts and api tests.

Import the fixtures into a conftest: ``from tests.accounts.fixtures import role_users, client_as``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.test import Client

from auditor.accounts.roles import ROLES, grant_role

# "none": logged in but in no role group; "anonymous": not logged in.
ROLE_NAMES = ("none", *ROLES)


@pytest.fixture
def role_users(db: None) -> dict[str, AbstractBaseUser]:
    users = {}
    for name in ROLE_NAMES:
        user = get_user_model().objects.create_user(username=f"user-{name}")  # no password: no slow hashing
        grant_role(user, None if name == "none" else name)
        users[name] = user
    return users


@pytest.fixture
def client_as(role_users: dict[str, AbstractBaseUser]) -> Callable[[str], Client]:
    """A test client logged in as the user of a role ('anonymous' for none at all)."""

    def make(role: str) -> Client:
        client = Client()
        if role != "anonymous":
            client.force_login(role_users[role])
        return client

    return make


@pytest.fixture
def bearer(role_users: dict[str, AbstractBaseUser]) -> Callable[..., dict[str, str]]:
    """Headers carrying a fresh API token of the user of ``role`` with ``scope``."""
    from auditor.api.tokens import create_token

    def make(role: str, scope: str = "read") -> dict[str, str]:
        _, raw = create_token(role_users[role], f"{role}-{scope}", scope)
        return {"Authorization": f"Bearer {raw}"}

    return make
