"""Optional project-wide rule: logged-in users without a role see no app page.

Add ``auditor.accounts.middleware.RoleRequiredMiddleware`` after
LoginRequiredMiddleware to apply it to every view (views decorated with
``require_role`` still check their stricter role themselves). Exempt: views marked
``login_not_required`` (login, the token-authenticated API, which checks roles
itself), logout, and Django's admin (it has its own staff check).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.urls import reverse

from auditor.accounts.roles import VIEWER, has_role

NO_ROLE_MESSAGE = "Your account has no role (viewer, operator or admin); ask an admin to grant one."


class RoleRequiredMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(
        self, request: HttpRequest, view_func: Callable[..., Any], args: Any, kwargs: Any
    ) -> HttpResponse | None:
        if not getattr(view_func, "login_required", True) or not request.user.is_authenticated:
            return None
        match = request.resolver_match
        if match is not None and (match.url_name == "logout" or "admin" in match.namespaces):
            return None
        if request.path.startswith(reverse("admin:index")):
            return None
        if has_role(request.user, VIEWER):
            return None
        return HttpResponseForbidden(NO_ROLE_MESSAGE, content_type="text/plain; charset=utf-8")
