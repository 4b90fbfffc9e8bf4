from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from auditor.pipelines.models import Binding, Cluster, SourceDatabase, StuckRule


@require_GET
def index(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "pipelines/index.html",
        {
            "clusters": Cluster.objects.all(),
            "sources": SourceDatabase.objects.all(),
            "bindings": Binding.objects.select_related("cluster", "source"),
            "stuck_rules": StuckRule.objects.select_related("binding"),
        },
    )
