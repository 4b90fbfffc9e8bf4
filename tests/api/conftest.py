from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import AbstractBaseUser

from auditor.api.tokens import create_token
from tests.accounts.fixtures import client_as, role_users

__all__ = ["bearer", "client_as", "role_users"]


@pytest.fixture
def bearer(role_users: dict[str, AbstractBaseUser]) -> Callable[..., dict[str, str]]:
    """Headers carrying a fresh token of the user of ``role`` with ``scope``."""

    def make(role: str, scope: str = "read") -> dict[str, str]:
        _, raw = create_token(role_users[role], f"{role}-{scope}", scope)
        return {"Authorization": f"Bearer {raw}"}

    return make
