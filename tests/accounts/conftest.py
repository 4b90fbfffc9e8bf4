from tests.accounts.fixtures import client_as, role_users

__all__ = ["client_as", "role_users"]
