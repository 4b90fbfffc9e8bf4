"""Who the access tests ask as: each role, a logged-in user in no role, and nobody."""

from __future__ import annotations

from auditor.accounts.roles import ADMIN, OPERATOR, ROLES, VIEWER

ANONYMOUS, NO_ROLE = "anonymous", "none"  # not logged in; logged in but in no role group
WHO = (ANONYMOUS, NO_ROLE, *ROLES)
RANK = {NO_ROLE: 0, VIEWER: 1, OPERATOR: 2, ADMIN: 3}
