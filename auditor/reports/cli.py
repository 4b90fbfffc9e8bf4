"""`audit report`: build a report now, from a schedule or for bindings over a recent window.

Exit codes: 0 built, 1 built partially or failed (the sections that failed are named),
2 bad input (unknown schedule or binding, bad duration).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from auditor.lib.durations import parse_duration
from auditor.reports.links import report_links
from auditor.reports.models import Report, ReportSchedule
from auditor.reports.schedules import sync_all_schedules
from auditor.reports.service import build_now

HELP = (
    "build a reconciliation report now: a schedule's (its last whole period, delivered to its channels "
    "and recipients unless --no-deliver), or for bindings over the last --since (default 1d)"
)
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--schedule", metavar="NAME", help="a report schedule's bindings and period")
    which.add_argument(
        "--binding", metavar="B", action="append", help="a binding to report on (repeatable; default all)"
    )
    parser.add_argument("--since", metavar="DURATION", help="the period: the last 6h, 1d, 7d ... (default 1d)")
    parser.add_argument("--no-deliver", action="store_true", help="with --schedule: build only, send nothing")
    parser.add_argument(
        "--sync-schedules", action="store_true", help="repair beat's tasks of the report schedules, then exit"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output: the report with its summary")


def _error(message: str) -> int:
    sys.stderr.write(f"error: {message}\n")
    return EXIT_BAD_INPUT


def _cell(section: dict[str, Any], key: str) -> str:
    """A binding's figure: "-" where the section has none, "unknown" where it is not known."""
    if key not in section:
        return "-"
    return "unknown" if section[key] is None else str(section[key])


def _print_table(report: Report, out: TextIO) -> None:
    out.write(f"report {report.pk} ({report.status}): {report.title}\n")
    out.write(f"period {report.period_start.isoformat()} .. {report.period_end.isoformat()}\n")
    summary = report.summary or {}
    sections = summary.get("sections", {})
    reconcile = sections.get("reconcile", {}).get("bindings", {})
    stuck = sections.get("stuck", {}).get("bindings", {})
    lint = sections.get("lint", {}).get("bindings", {})
    header = ("binding", "runs", "failed", "findings", "new", "stuck", "lint-err", "lint-warn")
    rows = [header]
    for name in report.binding_names:
        r, s, lt = reconcile.get(name, {}), stuck.get(name, {}), lint.get(name, {})
        rows.append(
            (
                name,
                *(_cell(r, k) for k in ("runs", "failed", "findings_total", "new_findings")),
                _cell(s, "stuck_at_end"),
                str(lt.get("errors", "-")),
                str(lt.get("warnings", "-")),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        out.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() + "\n")
    for topic, t in sections.get("canary", {}).get("topics", {}).items():
        out.write(
            f"canary {topic}: sent {t['sent']}, lost {t['lost']}, duplicated {t['duplicated']}, "
            f"worst minute p99 {t['p99_ms_max'] if t['p99_ms_max'] is not None else '-'} ms\n"
        )
    for name, reason in {**summary.get("unavailable", {}), **summary.get("errors", {})}.items():
        out.write(f"section {name}: {reason}\n")
    if report.error and report.status == Report.FAILED:
        out.write(f"error: {report.error}\n")
    if report.delivery:
        hooks, email = report.delivery.get("webhooks", {}), report.delivery.get("email", {})
        out.write(f"webhooks: {', '.join(hooks.get('channels', [])) or hooks.get('error') or 'none'}\n")
        out.write(f"e-mail: {email.get('status', '-')} ({email.get('detail', '')})\n")
    links = report_links(report)
    out.write(f"page {links['page']}\nhtml {links['html']}\ncsv  {links['csv']} ({report.csv_rows} rows)\n")


def run(options: dict[str, Any], out: TextIO) -> int:
    if options.get("sync_schedules"):
        count = sync_all_schedules()
        out.write(f"{count} report schedule(s) in step with beat\n")
        return 0
    since = None
    if options.get("since"):
        try:
            since = parse_duration(options["since"])
        except ValueError as exc:
            return _error(f"--since: {exc}")
        if since <= 0:
            return _error("--since must be longer than 0s")
    schedule = None
    if options.get("schedule"):
        schedule = ReportSchedule.objects.filter(name=options["schedule"]).first()
        if schedule is None:
            known = ", ".join(ReportSchedule.objects.values_list("name", flat=True)) or "none"
            return _error(f"no report schedule named {options['schedule']!r} (known: {known})")
    try:
        report = build_now(
            trigger=Report.CLI,
            schedule=schedule,
            binding_names=options.get("binding") or None,
            since_seconds=since,
            deliver=schedule is not None and not options.get("no_deliver"),
        )
    except ValueError as exc:
        return _error(str(exc))
    if options.get("json"):
        out.write(json.dumps(report.as_dict(with_summary=True), indent=2, ensure_ascii=False) + "\n")
    else:
        _print_table(report, out)
    return 0 if report.status == Report.OK else EXIT_FAILED
