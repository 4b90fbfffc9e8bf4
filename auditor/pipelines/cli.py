"""`audit apply FILE`: load the declarative config into the database."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from auditor.pipelines.config import ConfigError, apply_config, config_file_name, parse_config_file

HELP = "load clusters, sources, bindings and stuck rules from a YAML file (all or nothing)"
EPILOG = (
    "--prune also removes what this file declared before and declares no more (bindings, sources, "
    "clusters, stuck rules, webhooks), in the same transaction; without --yes it only lists what it "
    "would create, update and remove, and changes nothing."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the YAML config file")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--prune", action="store_true", help="remove objects this file declared before and no longer declares"
    )
    parser.add_argument("--yes", action="store_true", help="with --prune: do it (without: list only, change nothing)")
    parser.epilog = EPILOG


def run(options: dict[str, Any], out: TextIO) -> int:
    try:
        prune = bool(options.get("prune"))
        result = apply_config(
            parse_config_file(options["file"]),
            config_file=config_file_name(options["file"]),
            prune=prune,
            dry_run=prune and not options.get("yes"),
        )
    except ConfigError as exc:
        if options["json"]:
            problems = [vars(p) for p in exc.problems]
            out.write(json.dumps({"status": "invalid", "problems": problems}) + "\n")
        for problem in exc.problems:
            sys.stderr.write(f"error: {problem}\n")
        sys.stderr.write(f"{options['file']}: not applied, nothing in the database changed\n")
        return 2
    if options["json"]:
        status = "dry-run" if result.dry_run else "applied"
        body: dict[str, Any] = {
            "status": status,
            "created": result.created,
            "updated": result.updated,
            "removed": result.removed,
        }
        if result.warnings:
            body["warnings"] = [vars(w) for w in result.warnings]
        out.write(json.dumps(body) + "\n")
        return 0
    for warning in result.warnings:
        out.write(f"warning: {warning}\n")
    would = "would " if result.dry_run else ""
    for verb, items in (("create", result.created), ("update", result.updated), ("remove", result.removed)):
        past = {"create": "created", "update": "updated", "remove": "removed"}[verb]
        for item in items:
            out.write(f"{would + verb if would else past} {item}\n")
    if result.dry_run:
        if not result.removed:
            out.write("nothing to remove\n")
        out.write("dry run: nothing changed; run again with --prune --yes to apply and remove\n")
    return 0
