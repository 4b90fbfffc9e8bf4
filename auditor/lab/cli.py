"""`audit lab [SCENARIO ...] [--json] [--keep] [--in-process] [--list]`: the fault lab.

Runs each scenario on the stack's three brokers (a real fault, the real auditor, ground truth
from the clients and a plain read) and prints a table: scenario, injected, expected, got, false
alarms, misses, detect_s. Exit status: 0 every scenario ran with no false alarm and no miss,
1 otherwise, 2 bad usage or fewer than three brokers.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Any, TextIO

from auditor.lab.cluster import LabError
from auditor.lab.models import LabResult, LabRun
from auditor.lab.registry import all_scenarios, select
from auditor.lab.runner import run_lab
from auditor.lab.world import Options

HELP = "fault lab: inject real broker and client faults, run the auditor, compare with ground truth"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="scenarios to run (default: all)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--keep", action="store_true", help="keep each scenario's topic, table and binding")
    parser.add_argument("--in-process", action="store_true", help="run Spark in this process, not spark-submit")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{verdict} {n}" for verdict, n in counts.items()) or "nothing"


def table_lines(results: list[LabResult]) -> list[str]:
    rows = [("scenario", "expected", "got", "false alarms", "misses", "detect_s")]
    for r in results:
        got = f"ERROR: {r.error}" if r.error else _counts(r.got)
        detect = "-" if r.detect_seconds is None else f"{r.detect_seconds:.1f}"
        rows.append((r.name, _counts(r.expected), got, str(r.false_alarms), str(r.misses), detect))
    widths = [min(60, max(len(row[i]) for row in rows)) for i in range(len(rows[0]))]
    return ["  ".join(cell[:60].ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def run(options: dict[str, Any], out: TextIO) -> int:
    if options.get("list"):
        for scenario in all_scenarios().values():
            out.write(f"{scenario.name:<32} {scenario.summary}\n")
        return 0
    try:
        scenarios = select(list(options.get("scenarios") or []))
    except ValueError as exc:
        sys.stderr.write(f"audit lab: {exc}\n")
        return 2
    command = "python manage.py audit lab " + shlex.join(
        [*(options.get("scenarios") or []), *(["--in-process"] if options.get("in_process") else [])]
    )
    lab_options = Options(in_process=bool(options.get("in_process")), keep=bool(options.get("keep")))

    def progress(result: LabResult) -> None:
        if not options.get("json"):
            state = "ERROR" if result.error else ("ok" if result.passed else "WRONG")
            sys.stderr.write(f"[lab] {result.name}: {state} in {result.duration_seconds or 0:.0f}s\n")

    try:
        lab_run = run_lab(scenarios, lab_options, command.strip(), progress)
    except LabError as exc:
        sys.stderr.write(f"audit lab: {exc}\n")
        return 2
    results = list(lab_run.results.all())
    if options.get("json"):
        out.write(json.dumps(report(lab_run, results)) + "\n")
    else:
        for line in table_lines(results):
            out.write(line + "\n")
        out.write(f"lab run #{lab_run.pk}: {len(results)} scenario(s) in {lab_run.duration_seconds or 0:.0f}s\n")
        for r in results:
            for wrong in r.wrong[:10]:
                out.write(f"  {r.name}: key {wrong['key']} expected {wrong['expected']} got {wrong['got']}\n")
    return 0 if all(r.passed for r in results) else 1


def report(lab_run: LabRun, results: list[LabResult]) -> dict[str, Any]:
    return {
        "run": lab_run.pk,
        "duration_s": round(lab_run.duration_seconds or 0, 1),
        "scenarios": [r.as_dict() for r in results],
    }
