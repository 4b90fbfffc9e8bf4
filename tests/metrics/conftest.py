from __future__ import annotations

from tests.accounts.fixtures import client_as, role_users
from tests.api.conftest import bearer

__all__ = ["bearer", "client_as", "role_users"]
