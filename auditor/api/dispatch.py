"""Turn the registry into views: authenticate, check role and scope, validate, answer JSON.

Authentication: ``Authorization: Bearer <token>`` or a browser session. The views are
``login_not_required`` (LoginRequiredMiddleware would redirect API clients to the login
page) and answer 401 JSON themselves. CSRF is skipped only for token-authenticated
requests: a token in a header cannot be sent by a third-party page, a session cookie can.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib import import_module
from typing import Any

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.urls import URLPattern, path
from django.views.decorators.csrf import csrf_exempt

import auditor.api.endpoints  # noqa: F401 - registers the core endpoints
from auditor.accounts.roles import has_role
from auditor.api.models import ApiToken
from auditor.api.registry import ApiCall, ApiError, Operation, Registry, registry
from auditor.api.tokens import authenticate_token

MAX_BODY_BYTES = 1_000_000
_discovered = False


# The apps' endpoint modules, listed here rather than found by file existence: a renamed or
# broken module fails loudly instead of its endpoints silently disappearing.
API_MODULES = (
    "auditor.alerts.api",
    "auditor.canary.api",
    "auditor.lint.api",
    "auditor.reconcile.api",
    "auditor.reports.api",
    "auditor.status.api",
    "auditor.stuck.api",
)


def discover() -> None:
    """Import the apps' endpoint modules (once); the core endpoints (auditor/api/endpoints.py)
    are imported with this module."""
    global _discovered
    if _discovered:
        return
    for name in API_MODULES:
        import_module(name)
    _discovered = True


class _CsrfCheck(CsrfViewMiddleware):
    def _reject(self, request: HttpRequest, reason: str) -> str:
        return reason


def _csrf_failure(request: HttpRequest) -> str | None:
    check = _CsrfCheck(lambda r: HttpResponse())
    check.process_request(request)
    reason = check.process_view(request, lambda r: HttpResponse(), (), {})
    return reason if isinstance(reason, str) else None


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, message, {"WWW-Authenticate": 'Bearer realm="auditor"'})


def authenticate(request: HttpRequest, operation: Operation) -> tuple[Any, ApiToken | None]:
    """The calling user and token (None for a session); ApiError 401/403 otherwise."""
    header = request.headers.get("Authorization")
    if header is not None:
        scheme, _, raw = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not raw.strip():
            raise _unauthorized("the Authorization header must be 'Bearer <token>'")
        token = authenticate_token(raw.strip())
        if token is None:
            raise _unauthorized("invalid or revoked token")
        if operation.scope == ApiToken.WRITE and token.scope != ApiToken.WRITE:
            raise ApiError(403, f"{operation.method} {request.path} needs a write-scope token; this one is read-only")
        user = token.user
    elif request.user.is_authenticated:
        if request.method not in ("GET", "HEAD", "OPTIONS", "TRACE"):
            reason = _csrf_failure(request)
            if reason is not None:
                raise ApiError(403, f"CSRF check failed: {reason} (token-authenticated requests need no CSRF token)")
        user, token = request.user, None
    else:
        raise _unauthorized("authentication required: send 'Authorization: Bearer <token>' or log in")
    if not has_role(user, operation.role):
        raise ApiError(403, f"{operation.method} {request.path} needs the {operation.role} role")
    return user, token


def _parse_body(request: HttpRequest, operation: Operation) -> dict[str, Any]:
    if not operation.body:
        return {}
    if len(request.body) > MAX_BODY_BYTES:
        raise ApiError(413, f"the request body is larger than {MAX_BODY_BYTES} bytes")
    try:
        data = json.loads(request.body or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ApiError(400, "the request body must be a JSON object") from None
    if not isinstance(data, dict):
        raise ApiError(400, f"the request body must be a JSON object, got {type(data).__name__}")
    known = {p.name for p in operation.body}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ApiError(400, f"unknown field(s) {', '.join(unknown)} (expected: {', '.join(sorted(known))})")
    return {p.name: p.parse(data.get(p.name), "field") for p in operation.body}


def error_response(error: ApiError) -> JsonResponse:
    response = JsonResponse({"error": error.message}, status=error.status)
    for name, value in error.headers.items():
        response[name] = value
    return response


def _view_for(operations: dict[str, Operation]) -> Callable[..., HttpResponse]:
    @login_not_required
    @csrf_exempt
    def api_view(request: HttpRequest, **kwargs: Any) -> HttpResponse:
        method = "GET" if request.method == "HEAD" else request.method or "GET"
        any_operation = next(iter(operations.values()))
        try:
            # Authenticate before saying which methods exist: anonymous callers learn nothing.
            operation = operations.get(method)
            user, token = authenticate(request, operation or any_operation)
            if operation is None:
                response = error_response(ApiError(405, f"{method} is not allowed here"))
                response["Allow"] = ", ".join(sorted(operations))
                return response
            call = ApiCall(request=request, user=user, token=token, operation=operation)
            call.query = {p.name: p.parse(request.GET.get(p.name), "query parameter") for p in operation.all_query}
            call.body = _parse_body(request, operation)
            result = operation.handler(call, **kwargs)
        except ApiError as error:
            return error_response(error)
        if isinstance(result, HttpResponse):
            return result
        return JsonResponse(result, safe=False, json_dumps_params={"ensure_ascii": False})

    return api_view


def urlpatterns_for(reg: Registry = registry) -> list[URLPattern]:
    discover()
    patterns = []
    for route, operations in sorted(reg.operations.items()):
        first = next(iter(operations.values()))
        patterns.append(path(route, _view_for(operations), name=first.name))
    return patterns
