"""The JSON API's endpoint registry: one declaration drives routing, input validation,
authentication, role and scope checks, and the OpenAPI description.

Adding an endpoint from any app: create ``auditor/<app>/api.py`` (imported
automatically at URL loading) and decorate a function::

    from auditor.api.registry import Param, endpoint, paginate

    @endpoint(
        "runs/",                       # under /api/; Django path syntax: "runs/<int:run_id>/"
        name="runs-list",              # unique; the OpenAPI operationId
        summary="Reconciliation runs, newest first",
        tag="reconcile",
        query=[Param("binding", description="binding name")],
        item={"type": "object", "properties": {"id": {"type": "integer"}}},  # JSON Schema
        paginated=True,                # adds ?page=&page_size= and the page envelope
    )
    def list_runs(call: ApiCall) -> dict:
        runs = Run.objects.all()
        if call.query["binding"]:
            runs = runs.filter(binding__name=call.query["binding"])
        return paginate(call, runs, lambda run: {"id": run.pk})

``method="POST"`` endpoints need a write-scope token (or a session with a CSRF
token) and declare their JSON body with ``body=[Param(...)]``; ``role`` defaults to
viewer for reads and operator for writes. A handler returns a JSON-serialisable
dict or list, or raises ``ApiError(status, message)``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from django.db.models import QuerySet

from auditor.accounts.roles import OPERATOR, VIEWER

ParamType = Literal["string", "integer", "boolean", "datetime"]
Handler = Callable[..., Any]
MAX_PAGE_SIZE = 500
DEFAULT_PAGE_SIZE = 50
_PATH_PARAM = re.compile(r"<(?:(?P<converter>\w+):)?(?P<name>\w+)>")
_CONVERTER_TYPES: dict[str, dict[str, Any]] = {
    "int": {"type": "integer", "minimum": 0},
    "str": {"type": "string"},
    "slug": {"type": "string", "pattern": "^[-a-zA-Z0-9_]+$"},
    "uuid": {"type": "string", "format": "uuid"},
}


class ApiError(Exception):
    """An error answered as ``{"error": message}`` with ``status``."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


@dataclass(frozen=True)
class Param:
    """A query parameter or a field of a JSON body: validated, and described in OpenAPI."""

    name: str
    type: ParamType = "string"
    description: str = ""
    required: bool = False
    default: Any = None
    enum: tuple[str, ...] | None = None
    minimum: int | None = None
    maximum: int | None = None
    max_length: int | None = 1000

    def parse(self, raw: Any, where: str) -> Any:
        """The typed value of ``raw`` (a query string or a JSON value); ApiError 400 if bad."""
        if raw is None or raw == "":
            if self.required:
                raise ApiError(400, f"{where} '{self.name}' is required")
            return self.default
        label = f"{where} '{self.name}'"
        if self.type == "integer":
            value = _as_int(raw, label)
            if self.minimum is not None and value < self.minimum:
                raise ApiError(400, f"{label} must be at least {self.minimum}, got {value}")
            if self.maximum is not None and value > self.maximum:
                raise ApiError(400, f"{label} must be at most {self.maximum}, got {value}")
            return value
        if self.type == "boolean":
            return _as_bool(raw, label)
        if not isinstance(raw, str):
            raise ApiError(400, f"{label} must be a string, got {type(raw).__name__}")
        if self.max_length is not None and len(raw) > self.max_length:
            raise ApiError(400, f"{label} is longer than {self.max_length} characters")
        if self.type == "datetime":
            try:
                value_dt = datetime.fromisoformat(raw.replace("Z", "+00:00"))
            except ValueError:
                raise ApiError(400, f"{label} must be an ISO 8601 date-time, got {raw!r}") from None
            if value_dt.tzinfo is None:
                raise ApiError(400, f"{label} must carry a time zone, e.g. 2030-01-01T00:00:00Z")
            return value_dt
        if self.enum is not None and raw not in self.enum:
            raise ApiError(400, f"{label} must be one of {', '.join(self.enum)}, got {raw!r}")
        return raw

    def schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": self.type}
        if self.type == "datetime":
            schema = {"type": "string", "format": "date-time"}
        if self.enum is not None:
            schema["enum"] = list(self.enum)
        if self.minimum is not None:
            schema["minimum"] = self.minimum
        if self.maximum is not None:
            schema["maximum"] = self.maximum
        if self.max_length is not None and self.type == "string":
            schema["maxLength"] = self.max_length
        if self.default is not None:
            schema["default"] = self.default
        return schema


def _as_int(raw: Any, label: str) -> int:
    if isinstance(raw, bool):
        raise ApiError(400, f"{label} must be an integer, got {raw!r}")
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str) and re.fullmatch(r"-?\d{1,18}", raw.strip()):
        return int(raw)
    raise ApiError(400, f"{label} must be an integer, got {raw!r}")


def _as_bool(raw: Any, label: str) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.lower() in ("true", "1", "yes", "false", "0", "no"):
        return raw.lower() in ("true", "1", "yes")
    raise ApiError(400, f"{label} must be true or false, got {raw!r}")


PAGE_PARAMS = (
    Param("page", "integer", "page number, from 1", default=1, minimum=1),
    Param(
        "page_size",
        "integer",
        f"items per page (max {MAX_PAGE_SIZE})",
        default=DEFAULT_PAGE_SIZE,
        minimum=1,
        maximum=MAX_PAGE_SIZE,
    ),
)


@dataclass(frozen=True)
class Operation:
    path: str
    method: str
    name: str
    summary: str
    handler: Handler
    role: str
    scope: str
    tag: str
    query: tuple[Param, ...]
    body: tuple[Param, ...]
    item: dict[str, Any] | None
    paginated: bool
    description: str = ""

    @property
    def all_query(self) -> tuple[Param, ...]:
        return self.query + PAGE_PARAMS if self.paginated else self.query


@dataclass
class ApiCall:
    """What a handler gets: the request, who is calling, and the validated inputs."""

    request: Any
    user: Any
    token: Any | None
    operation: Operation
    query: dict[str, Any] = field(default_factory=dict)
    body: dict[str, Any] = field(default_factory=dict)


class Registry:
    def __init__(self) -> None:
        self.operations: dict[str, dict[str, Operation]] = {}

    def add(self, operation: Operation) -> None:
        methods = self.operations.setdefault(operation.path, {})
        if operation.method in methods:
            raise ValueError(f"API endpoint {operation.method} /api/{operation.path} is registered twice")
        for existing in self.all():
            if existing.name == operation.name:
                raise ValueError(f"API endpoint name {operation.name!r} is registered twice")
        methods[operation.method] = operation

    def all(self) -> list[Operation]:
        return [op for methods in self.operations.values() for op in methods.values()]

    def endpoint(
        self,
        path: str,
        *,
        name: str,
        summary: str,
        tag: str,
        method: str = "GET",
        role: str | None = None,
        query: Sequence[Param] = (),
        body: Sequence[Param] = (),
        item: dict[str, Any] | None = None,
        paginated: bool = False,
        description: str = "",
    ) -> Callable[[Handler], Handler]:
        method = method.upper()
        if method not in ("GET", "POST", "PUT", "PATCH", "DELETE"):
            raise ValueError(f"unsupported method {method}")
        if path.startswith("/") or not path.endswith(("/", ".json")):
            raise ValueError(f"API path {path!r} must be relative (no leading /) and end with / or .json")
        read_only = method == "GET"

        def register(handler: Handler) -> Handler:
            self.add(
                Operation(
                    path=path,
                    method=method,
                    name=name,
                    summary=summary,
                    handler=handler,
                    role=role or (VIEWER if read_only else OPERATOR),
                    scope="read" if read_only else "write",
                    tag=tag,
                    query=tuple(query),
                    body=tuple(body),
                    item=item,
                    paginated=paginated,
                    description=description or (handler.__doc__ or "").strip(),
                )
            )
            return handler

        return register


registry = Registry()
endpoint = registry.endpoint


def paginate(call: ApiCall, queryset: QuerySet[Any], serialize: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    """The page asked for by ?page=&page_size= as ``{count, page, page_size, num_pages, next, previous, results}``."""
    page, size = call.query["page"], call.query["page_size"]
    count = queryset.count()
    num_pages = max(1, -(-count // size))
    if page > num_pages:
        raise ApiError(404, f"page {page} does not exist: there are {num_pages} page(s) of {size}")
    rows = queryset[(page - 1) * size : page * size]

    def link(number: int) -> str:
        params = call.request.GET.copy()
        params["page"] = str(number)
        params["page_size"] = str(size)
        return call.request.build_absolute_uri(f"{call.request.path}?{params.urlencode()}")

    return {
        "count": count,
        "page": page,
        "page_size": size,
        "num_pages": num_pages,
        "next": link(page + 1) if page < num_pages else None,
        "previous": link(page - 1) if page > 1 else None,
        "results": [serialize(row) for row in rows],
    }


def path_parameters(path: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (m.group("name"), _CONVERTER_TYPES.get(m.group("converter") or "str", {"type": "string"}))
        for m in _PATH_PARAM.finditer(path)
    ]


def openapi_path(path: str) -> str:
    return "/api/" + _PATH_PARAM.sub(lambda m: "{" + m.group("name") + "}", path)


ERROR_SCHEMA = {
    "type": "object",
    "properties": {"error": {"type": "string"}},
    "required": ["error"],
}


def _page_schema(item: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "count": {"type": "integer"},
            "page": {"type": "integer"},
            "page_size": {"type": "integer"},
            "num_pages": {"type": "integer"},
            "next": {"type": ["string", "null"]},
            "previous": {"type": ["string", "null"]},
            "results": {"type": "array", "items": item},
        },
        "required": ["count", "page", "page_size", "num_pages", "next", "previous", "results"],
    }


def _operation_spec(op: Operation) -> dict[str, Any]:
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    item = op.item or {"type": "object"}
    parameters: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": schema} for name, schema in path_parameters(op.path)
    ]
    parameters += [
        {"name": p.name, "in": "query", "required": p.required, "description": p.description, "schema": p.schema()}
        for p in op.all_query
    ]
    spec: dict[str, Any] = {
        "operationId": op.name,
        "summary": op.summary,
        "tags": [op.tag],
        "parameters": parameters,
        "responses": {
            "200": {
                "description": "OK",
                "content": {"application/json": {"schema": _page_schema(item) if op.paginated else item}},
            },
            "400": {"description": "invalid input", "content": error},
            "401": {"description": "no valid session or token", "content": error},
            "403": {"description": f"needs the {op.role} role or a {op.scope}-scope token", "content": error},
        },
        "x-required-role": op.role,
        "x-token-scope": op.scope,
    }
    if op.description:
        spec["description"] = op.description
    if op.paginated or path_parameters(op.path):
        spec["responses"]["404"] = {"description": "not found", "content": error}
    if op.body:
        spec["requestBody"] = {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "properties": {p.name: {**p.schema(), "description": p.description} for p in op.body},
                        "required": [p.name for p in op.body if p.required],
                        "additionalProperties": False,
                    }
                }
            },
        }
    return spec


def build_openapi(operations: Iterable[Operation], *, title: str, version: str) -> dict[str, Any]:
    """An OpenAPI 3.1 document describing ``operations``."""
    paths: dict[str, dict[str, Any]] = {}
    for op in sorted(operations, key=lambda o: (o.path, o.method)):
        paths.setdefault(openapi_path(op.path), {})[op.method.lower()] = _operation_spec(op)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": title,
            "version": version,
            "description": "Authenticate with `Authorization: Bearer <token>` (tokens are created on /api/tokens/) "
            "or a browser session (unsafe methods then need the CSRF token).",
        },
        "paths": paths,
        "components": {
            "schemas": {"Error": ERROR_SCHEMA},
            "securitySchemes": {
                "bearerAuth": {"type": "http", "scheme": "bearer"},
                "sessionAuth": {"type": "apiKey", "in": "cookie", "name": "sessionid"},
            },
        },
        "security": [{"bearerAuth": []}, {"sessionAuth": []}],
    }
