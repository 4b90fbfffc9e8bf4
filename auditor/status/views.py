from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from auditor.status.service import current_snapshot, refresh_status


@require_GET
def index(request: HttpRequest) -> HttpResponse:
    snapshot = current_snapshot() or refresh_status()
    return render(request, "status/index.html", {"snapshot": snapshot})


@require_GET
def snapshot_json(request: HttpRequest) -> JsonResponse:
    return JsonResponse(current_snapshot() or refresh_status())
