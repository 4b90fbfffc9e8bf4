"""Roles: three Django groups, ordered viewer < operator < admin.

A user holds the highest role of the groups they are in; superusers are admins.
A logged-in user in none of the groups has no role: every app page answers 403
(the user can still log in and out, and an admin can grant a role). This is
deliberate: creating an account must not, by itself, reveal pipeline data.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from django.contrib.auth.models import AnonymousUser, Group, User
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpRequest, HttpResponse

VIEWER = "viewer"
OPERATOR = "operator"
ADMIN = "admin"
ROLES: tuple[str, ...] = (VIEWER, OPERATOR, ADMIN)
_RANK = {role: rank for rank, role in enumerate(ROLES, start=1)}
_CACHE_ATTR = "_auditor_role_rank"

View = TypeVar("View", bound=Callable[..., HttpResponse])
AnyUser = User | AnonymousUser


class SignedInRequest(HttpRequest):
    """The request a view receives unless it is marked ``login_not_required``:
    LoginRequiredMiddleware (and ``require_role``) turn anonymous users away first, so
    ``user`` is a signed-in ``User``. An annotation for the type checker only; the
    object is Django's own request."""

    user: User


def _check_role_name(role: str) -> int:
    try:
        return _RANK[role]
    except KeyError:
        raise ValueError(f"unknown role {role!r} (expected one of: {', '.join(ROLES)})") from None


def _rank(user: AnyUser) -> int:
    if not user.is_authenticated or not user.is_active:
        return 0
    if getattr(user, "is_superuser", False):
        return _RANK[ADMIN]
    cached = getattr(user, _CACHE_ATTR, None)
    if cached is None:
        names = user.groups.filter(name__in=ROLES).values_list("name", flat=True)
        cached = max((_RANK[name] for name in names), default=0)
        setattr(user, _CACHE_ATTR, cached)
    return cached


def has_role(user: AnyUser, role: str) -> bool:
    """True when ``user`` holds ``role`` or a higher one."""
    required = _check_role_name(role)
    return _rank(user) >= required


def highest_role(user: AnyUser) -> str | None:
    rank = _rank(user)
    return ROLES[rank - 1] if rank else None


def grant_role(user: User, role: str | None) -> None:
    """Make ``role`` the user's only role group (None removes every role)."""
    if role is not None:
        _check_role_name(role)
    with transaction.atomic():
        groups = user.groups
        groups.remove(*Group.objects.filter(name__in=ROLES))
        if role is not None:
            groups.add(Group.objects.get(name=role))
    if hasattr(user, _CACHE_ATTR):
        delattr(user, _CACHE_ATTR)


def require_role(role: str) -> Callable[[View], View]:
    """View decorator: anonymous users go to the login page, users without ``role`` get 403."""
    _check_role_name(role)

    def decorator(view: View) -> View:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not has_role(request.user, role):
                raise PermissionDenied(f"this page needs the {role} role")
            return view(request, *args, **kwargs)

        # ignores: functions take attributes at runtime; wraps() keeps the view's signature,
        # which mypy cannot see through the *args wrapper.
        wrapper.required_role = role  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorator
