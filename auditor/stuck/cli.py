"""`audit stuck RULE [--json]`: diagnose a stuck rule now and show each item's verdict.

Exit status: 0 diagnosed (stuck items or not), 1 the diagnosis failed or another one of the
rule is running, 2 bad usage (unknown rule, bad option).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from auditor.pipelines.connectivity import ConnectivityError
from auditor.pipelines.models import StuckRule
from auditor.stuck.formatting import format_age
from auditor.stuck.locate import ENGINES
from auditor.stuck.models import DiagnosisRun, StuckItem
from auditor.stuck.runlock import DiagnosisBusy
from auditor.stuck.schedules import sync_all_schedules
from auditor.stuck.service import (
    DiagnosisOptions,
    diagnose_rule,
    run_diagnosis,
)
from auditor.stuck.source import DEFAULT_MAX_ITEMS, SourceError
from auditor.vocabulary import STUCK_VERDICTS

HELP = "diagnose the items stuck in a status (e.g. NEW tickets): where did each one's delivery break?"


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rule", nargs="?", help="the stuck rule's name (stuck_rules: in the config file)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--engine", choices=ENGINES, default="auto", help="how records are located (auto)")
    parser.add_argument("--no-store", action="store_true", help="diagnose only: store no run, items or alerts")
    parser.add_argument("--max-items", type=_positive_int, default=DEFAULT_MAX_ITEMS, help="oldest N stuck rows")
    parser.add_argument(
        "--producer-ledger-topic",
        help="default: the binding's, $AUDITOR_PRODUCER_LEDGER_TOPIC or _audit.producer-ledger",
    )
    parser.add_argument(
        "--consumer-ledger-topic",
        help="default: the binding's, $AUDITOR_CONSUMER_LEDGER_TOPIC or _audit.consumer-ledger",
    )
    parser.add_argument(
        "--sync-schedules", action="store_true", help="repair the beat schedules of all rules (no RULE needed)"
    )


def run(options: dict[str, Any], out: TextIO) -> int:
    if options.get("sync_schedules"):
        count = sync_all_schedules()
        out.write(f"beat schedules in step for {count} stuck rule(s)\n")
        if not options.get("rule"):
            return 0
    name = options.get("rule")
    if not name:
        sys.stderr.write("audit stuck: name a stuck rule (or pass --sync-schedules)\n")
        return 2
    rule = StuckRule.objects.select_related("binding", "binding__cluster", "binding__source").filter(name=name).first()
    if rule is None:
        known = ", ".join(StuckRule.objects.values_list("name", flat=True)) or "none configured"
        sys.stderr.write(f"audit stuck: unknown stuck rule {name!r} (known: {known})\n")
        return 2
    diagnosis_options = DiagnosisOptions(
        engine=options.get("engine") or "auto",
        max_items=options.get("max_items") or DEFAULT_MAX_ITEMS,
        producer_ledger_topic=options.get("producer_ledger_topic"),
        consumer_ledger_topic=options.get("consumer_ledger_topic"),
    )
    if options.get("no_store"):
        try:
            result = diagnose_rule(rule, diagnosis_options)
        except (SourceError, ConnectivityError) as exc:
            sys.stderr.write(f"audit stuck {name}: {exc}\n")
            return 1
        report = {
            "rule": rule.name,
            "binding": rule.binding.name,
            "run": None,
            "counts": result.counts(),
            "items": [item.as_dict() for item in result.items],
            "risks": result.risks,
            "notes": result.notes,
        }
        return _write(report, options, out)
    try:
        diagnosis = run_diagnosis(rule, DiagnosisRun.CLI, options=diagnosis_options)
    except DiagnosisBusy as exc:
        sys.stderr.write(f"audit stuck {name}: {exc}\n")
        return 1
    if diagnosis.status != DiagnosisRun.OK:
        sys.stderr.write(f"audit stuck {name}: the diagnosis failed: {diagnosis.error}\n")
        if options.get("json"):
            out.write(json.dumps({"rule": rule.name, "run": diagnosis.as_event(), "items": []}) + "\n")
        return 1
    items = StuckItem.objects.open().filter(rule=rule).select_related("rule").order_by("-age_seconds", "key")
    report = {
        "rule": rule.name,
        "binding": rule.binding.name,
        "run": diagnosis.as_event(),
        "counts": diagnosis.as_event()["counts"],
        "items": [item.as_dict() for item in items],
        "risks": diagnosis.risks,
        "notes": diagnosis.notes,
    }
    return _write(report, options, out)


def _write(report: dict[str, Any], options: dict[str, Any], out: TextIO) -> int:
    if options.get("json"):
        out.write(json.dumps(report, default=str) + "\n")
        return 0
    counts = report["counts"]
    total = sum(counts.values())
    out.write(f"stuck rule {report['rule']} (binding {report['binding']}): {total} stuck item(s)\n")
    shown = [f"{v} {counts[v]}" for v in STUCK_VERDICTS if counts.get(v)]
    if shown:
        out.write("  " + " · ".join(shown) + "\n")
    if report["items"]:
        width = min(40, max(len("KEY"), *(len(_printable(i["key"])) for i in report["items"])))
        out.write(f"\n{'KEY':<{width}}  {'STATUS':<10} {'AGE':>8}  {'VERDICT':<22} WHY\n")
        for item in report["items"]:
            key = _printable(item["key"])
            key = key if len(key) <= width else key[: width - 1] + "…"
            out.write(
                f"{key:<{width}}  {_printable(item['status'])[:10]:<10} {format_age(item['age_seconds']):>8}  "
                f"{item['verdict']:<22} {_printable(item['reason'])}\n"
            )
    if report["risks"]:
        out.write("\ncluster-side risks:\n")
        for risk in report["risks"]:
            out.write(f"  [{risk['severity']}] {risk['message']}\n")
    for note in report["notes"]:
        out.write(f"note: {note}\n")
    return 0


def _printable(text: str) -> str:
    """Keys and reasons come from data: control characters (terminal escapes, newlines) are shown escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
