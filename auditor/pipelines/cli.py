"""`audit apply FILE`: load the declarative config into the database."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from auditor.pipelines.config import ConfigError, apply_config, parse_config_file

HELP = "load clusters, sources, bindings and stuck rules from a YAML file (all or nothing)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the YAML config file")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(options: dict[str, Any], out: TextIO) -> int:
    try:
        result = apply_config(parse_config_file(options["file"]))
    except ConfigError as exc:
        if options["json"]:
            problems = [vars(p) for p in exc.problems]
            out.write(json.dumps({"status": "invalid", "problems": problems}) + "\n")
        for problem in exc.problems:
            sys.stderr.write(f"error: {problem}\n")
        sys.stderr.write(f"{options['file']}: not applied, nothing in the database changed\n")
        return 2
    if options["json"]:
        out.write(json.dumps({"status": "applied", "created": result.created, "updated": result.updated}) + "\n")
    else:
        for item in result.created:
            out.write(f"created {item}\n")
        for item in result.updated:
            out.write(f"updated {item}\n")
    return 0
