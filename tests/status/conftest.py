from tests.accounts.fixtures import bearer, client_as, role_users

__all__ = ["bearer", "client_as", "role_users"]
