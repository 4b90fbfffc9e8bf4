"""`audit reconcile BINDING [--full] [--json] [--in-process]`: run one binding's reconciliation now.

Exit status: 0 the run succeeded (findings or not), 1 the run failed, 2 unknown binding,
3 a run of the binding is already in progress (nothing was started).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from auditor.pipelines.models import Binding
from auditor.reconcile import conf
from auditor.reconcile.models import FINDING_ORDER, Finding, ReconcileRun
from auditor.reconcile.service import RunInProgress, execute_run, start_run

HELP = "reconcile a binding's topic with its source table now (Spark); exit 1 when the run fails"
EXIT_FAILED, EXIT_UNKNOWN_BINDING, EXIT_BUSY = 1, 2, 3
SHOWN_FINDINGS = 50


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("binding", help="the binding's name")
    parser.add_argument("--full", action="store_true", help="ignore the incremental state and read everything")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run Spark in this process instead of through spark-submit (for debugging)",
    )


def run_json(run: ReconcileRun) -> dict[str, Any]:
    """The run and every finding it stored."""
    findings = Finding.objects.filter(run=run).select_related("binding").order_by(*FINDING_ORDER)
    return {
        "run_id": run.pk,
        **{k: v for k, v in run.as_event().items() if k != "id"},
        "findings": [
            {k: v for k, v in f.as_dict().items() if k not in ("run_id", "binding")} for f in findings.iterator()
        ],
    }


def _finding_line(finding: Finding) -> str:
    where = f"{finding.partition}@{finding.offset}" if finding.offset is not None else ""
    if finding.seq is not None:
        seq = str(finding.seq) if finding.seq_end in (None, finding.seq) else f"{finding.seq}-{finding.seq_end}"
        where = f"{where} seq {seq}".strip()
    key = "(no key)" if finding.key is None else finding.key
    return f"  {finding.kind:<12} {finding.cause or '-':<15} {key[:40]:<40} {where}"


def summary_lines(run: ReconcileRun) -> list[str]:
    duration = f" in {run.duration_seconds:.1f}s" if run.duration_seconds is not None else ""
    head = f"run #{run.pk} of binding {run.binding.name}: {run.status}{duration}"
    if run.status != ReconcileRun.OK:
        return [head, f"error: {run.error}"]
    lines = [f"{head} ({run.mode}, {run.records_read:,} records read)"]
    lines += [f"  {kind:<12} {count:>8}" for kind, count in run.kind_counts()]
    if run.unverifiable:
        lines.append(
            f"  {'unverifiable':<12} {run.unverifiable:>8}  (rows whose records were deleted before they were read)"
        )
    if run.late:
        lines.append(
            f"  {'late':<12} {run.late:>8}  (rows with no record yet after a leader change: judged once the "
            "producers' retries are over)"
        )
    headers = dict(run.header_counts())
    lines.append(
        f"  records read without audit headers: {headers['records_without_headers']}, "
        f"with malformed audit headers: {headers['records_malformed_headers']}"
    )
    lines += [f"warning: {warning}" for warning in run.warnings]
    shown = list(Finding.objects.filter(run=run).order_by(*FINDING_ORDER)[:SHOWN_FINDINGS])
    if shown:
        lines.append(f"  {'kind':<12} {'cause':<15} {'key':<40} where")
        lines += [_finding_line(finding) for finding in shown]
    if run.total_findings > len(shown):
        lines.append(f"… and {run.total_findings - len(shown)} more: /reconcile/findings/?run={run.pk} or --json")
    return lines


def run(options: dict[str, Any], out: TextIO) -> int:
    name = options["binding"]
    binding = Binding.objects.select_related("cluster", "source").filter(name=name).first()
    if binding is None:
        known = ", ".join(Binding.objects.values_list("name", flat=True)) or "none configured"
        sys.stderr.write(f"error: unknown binding {name!r} (bindings: {known})\n")
        return EXIT_UNKNOWN_BINDING
    try:
        reconcile_run = start_run(binding, ReconcileRun.CLI, full=options["full"])
    except RunInProgress as exc:
        sys.stderr.write(f"error: {exc}; nothing started\n")
        return EXIT_BUSY
    reconcile_run = execute_run(reconcile_run, conf.IN_PROCESS if options["in_process"] else conf.SUBMIT)
    if options["json"]:
        out.write(json.dumps(run_json(reconcile_run), ensure_ascii=False) + "\n")
    else:
        for line in summary_lines(reconcile_run):
            out.write(line + "\n")
    return 0 if reconcile_run.status == ReconcileRun.OK else EXIT_FAILED
