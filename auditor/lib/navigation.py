"""Navigation entries of the base template."""

from __future__ import annotations

from django.http import HttpRequest
from django.urls import reverse

NAV = [
    ("Overview", "overview"),
    ("Status", "status:index"),
    ("Stuck items", "stuck:index"),
    ("Findings", "reconcile:findings"),
    ("Runs", "reconcile:runs"),
    ("Canary", "canary:index"),
    ("Lint", "lint:index"),
    ("Pipelines", "pipelines:index"),
    ("Reports", "reports:index"),
    ("Lab", "lab:index"),
    ("Alerts", "alerts:index"),
    ("API tokens", "api:tokens"),
]


def navigation(request: HttpRequest) -> dict[str, object]:
    items = []
    for label, name in NAV:
        url = reverse(name)
        active = request.path == url if url == "/" else request.path.startswith(url)
        items.append({"label": label, "url": url, "active": active})
    return {"nav_items": items}
