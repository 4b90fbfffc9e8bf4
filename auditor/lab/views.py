from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from auditor.lab.models import LabRun

RUNS_LISTED = 20


@require_GET
def index(request: HttpRequest) -> HttpResponse:
    """The latest lab run's table (or the one asked for with ?run=), and the runs before it."""
    runs = list(LabRun.objects.all()[:RUNS_LISTED])
    run_id = request.GET.get("run")
    if run_id is not None and not run_id.isdigit():
        return HttpResponse("run must be a lab run's number", status=400, content_type="text/plain")
    shown = get_object_or_404(LabRun, pk=int(run_id)) if run_id else (runs[0] if runs else None)
    results = list(shown.results.all()) if shown else []
    return render(
        request,
        "lab/index.html",
        {
            "runs": runs,
            "shown": shown,
            "results": results,
            "false_alarms": sum(r.false_alarms for r in results),
            "misses": sum(r.misses for r in results),
            "errors": sum(1 for r in results if r.error),
        },
    )
