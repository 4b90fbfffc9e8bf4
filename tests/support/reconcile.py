"""Reconciliation test data: fixed instants and committed runs with their findings."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from auditor.pipelines.models import Binding
from auditor.reconcile.models import Finding, ReconcileRun


def ok_run(binding: Binding, findings: list[dict[str, Any]], **fields: Any) -> ReconcileRun:
    counts: dict[str, int] = dict(fields.pop("counts", {}))
    for f in findings:
        counts[f["kind"]] = counts.get(f["kind"], 0) + 1
    run = ReconcileRun.objects.create(
        binding=binding,
        trigger=ReconcileRun.SCHEDULE,
        status=ReconcileRun.OK,
        mode="incremental",
        started_at=timezone.now(),
        finished_at=timezone.now(),
        duration_seconds=12.5,
        records_read=1234,
        counts=counts,
        **fields,
    )
    Finding.objects.bulk_create(Finding(run=run, binding=binding, **f) for f in findings)
    return run


def reconcile_cli(name: str, *args: str) -> tuple[int, dict[str, Any]]:
    """`audit reconcile NAME --json ARGS`: its exit code and the result it printed."""
    import io
    import json

    from django.core.management import call_command
    from django.core.management.base import CommandError

    out = io.StringIO()
    try:
        call_command("audit", "reconcile", name, "--json", *args, stdout=out)
        code = 0
    except CommandError as exc:
        code = exc.returncode
    return code, json.loads(out.getvalue())
