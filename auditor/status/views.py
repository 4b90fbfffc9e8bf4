from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from auditor.accounts.roles import VIEWER, require_role
from auditor.status.overview import BROKEN, KEPT, UNKNOWN, build_overview
from auditor.status.service import current_snapshot, refresh_status


@require_GET
def index(request: HttpRequest) -> HttpResponse:
    snapshot = current_snapshot() or refresh_status()
    return render(request, "status/index.html", {"snapshot": snapshot})


@require_GET
def snapshot_json(request: HttpRequest) -> JsonResponse:
    return JsonResponse(current_snapshot() or refresh_status())


@require_role(VIEWER)
@require_GET
def overview(request: HttpRequest) -> HttpResponse:
    """The first screen: a row per pipeline with its verdict; ``?part=pipelines`` is the live refresh."""
    pipelines = build_overview()
    verdicts = [p.verdict for p in pipelines]
    context = {
        "pipelines": pipelines,
        "totals": {v: verdicts.count(v) for v in (BROKEN, UNKNOWN, KEPT)},
        "snapshot": current_snapshot(),
    }
    if request.GET.get("part") == "pipelines":
        return render(request, "status/_pipelines.html", context)
    return render(request, "status/overview.html", context)
