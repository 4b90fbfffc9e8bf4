"""`audit lint`: lint a client config file (for app teams' CI), or scan the configured clusters.

Exit codes: 0 no error-severity result, 1 at least one, 2 the input could not be linted
(malformed file, bad option, unreachable cluster).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from django.utils import timezone

from auditor.lint.engine.defaults import CLIENTS, KINDS
from auditor.lint.engine.errors import LintInputError
from auditor.lint.engine.evidence import explains
from auditor.lint.engine.linter import client_version_option, exit_code
from auditor.lint.engine.parsers import FORMATS, guess_format
from auditor.lint.models import LintScan
from auditor.lint.service import DEFAULT_GUARANTEE, ScanResult, lint_pasted, scan_all
from auditor.vocabulary import GUARANTEES

HELP = (
    "lint client, topic and broker configs against the declared delivery guarantee; "
    "with --config a file (exit 1 on an error-severity result, 2 on bad input), "
    "without it the configured clusters and the probes' clients"
)
EXIT_UNUSABLE = 2
FILE_ONLY_OPTIONS = ("client", "client_version", "kind", "format", "guarantee", "profile")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="a client config: librdkafka JSON, .properties, Spring YAML")
    parser.add_argument(
        "--client", choices=CLIENTS, default=None, help="whose defaults apply to unset keys (default librdkafka)"
    )
    parser.add_argument(
        "--client-version",
        metavar="VERSION",
        default=None,
        help="the Java client's version (kafka-clients, e.g. 3.9.2): its defaults and start-up checks "
        "(default 4.0); with --client java or a Spring Boot file only",
    )
    parser.add_argument(
        "--kind",
        choices=KINDS,
        default=None,
        help="what the file configures (needed for JSON and .properties; Spring YAML holds several)",
    )
    parser.add_argument(
        "--guarantee", choices=GUARANTEES, default=None, help=f"the declared guarantee (default {DEFAULT_GUARANTEE})"
    )
    parser.add_argument(
        "--format", choices=FORMATS, default=None, help="the file's format (default: from its extension or content)"
    )
    parser.add_argument(
        "--profile",
        metavar="NAME[,NAME]",
        default=None,
        help="a Spring Boot file's active profiles: its documents for them are linted too "
        "(default: the file's spring.profiles.active, else none)",
    )
    parser.add_argument("--json", action="store_true", help='machine-readable output: {"results": [...]}')


def _error(message: str) -> int:
    sys.stderr.write(f"error: {message}\n")
    return EXIT_UNUSABLE


def run(options: dict[str, Any], out: TextIO) -> int:
    if options.get("config"):
        return _lint_file(options, out)
    given = [f"--{name.replace('_', '-')}" for name in FILE_ONLY_OPTIONS if options.get(name)]
    if given:
        return _error(f"{', '.join(given)} only apply with --config FILE")
    return _scan(options, out)


def _lint_file(options: dict[str, Any], out: TextIO) -> int:
    path = Path(options["config"])
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return _error(f"{path}: no such file")
    except UnicodeDecodeError:
        return _error(f"{path}: not UTF-8 text (expected JSON, .properties or YAML)")
    except OSError as exc:
        return _error(f"{path}: cannot read it ({exc.strerror})")
    fmt = options.get("format") or guess_format(text, path.name)
    client = options.get("client") or "librdkafka"
    guarantee = options.get("guarantee") or DEFAULT_GUARANTEE
    try:
        pasted = lint_pasted(
            text,
            fmt=fmt,
            client=client,
            guarantee=guarantee,
            kind=options.get("kind"),
            client_version=client_version_option(options.get("client_version")),
            source=str(path),
            profiles=_profiles_option(options.get("profile")),
        )
    except LintInputError as exc:
        return _error(str(exc))
    results = pasted.results
    if options["json"]:
        document: dict[str, Any] = {
            "java_version": pasted.java_version,
            "results": [_as_json(item) for item in results],
        }
        if pasted.notes:  # what was not linted: a Spring document for a profile not active
            document["notes"] = list(pasted.notes)
        out.write(json.dumps(document, indent=2, default=str) + "\n")
    else:
        out.write(f"{path}: {fmt}, {pasted.linted_as}, guarantee {guarantee}\n")
        for note in pasted.notes:
            out.write(f"note: {note}\n")
        _write_table(results, out)
    return exit_code(item.result for item in results)


def _profiles_option(text: str | None) -> list[str] | None:
    """`--profile local,eu` as Spring Boot reads spring.profiles.active: comma-separated names."""
    if text is None:
        return None
    return [name.strip() for name in text.split(",") if name.strip()] or None


def _as_json(item: ScanResult) -> dict[str, Any]:
    return {**item.as_dict(), "explains": [[kind, cause] for kind, cause in explains(item.result.rule)]}


def _scan(options: dict[str, Any], out: TextIO) -> int:
    scan = scan_all(LintScan.CLI)
    rows = list(scan.results.in_report_order())
    if options["json"]:
        out.write(json.dumps({"scan": scan.as_event(), "results": [row.as_dict() for row in rows]}, indent=2) + "\n")
    else:
        finished = timezone.localtime(scan.finished_at).strftime("%Y-%m-%d %H:%M:%S %Z")
        out.write(f"lint scan {scan.pk} finished {finished}: {scan.summary}\n")
        for note in scan.notes:
            out.write(f"note: {note}\n")
        _write_rows(
            [
                (
                    row.severity,
                    row.rule,
                    _target(row.cluster, row.subject),
                    row.config_key,
                    row.shown_value,
                    row.expected,
                )
                for row in rows
            ],
            [row.message for row in rows],
            out,
        )
    if scan.error:
        for line in scan.error.splitlines():
            sys.stderr.write(f"error: {line}\n")
        return EXIT_UNUSABLE
    return 1 if scan.error_count else 0


def _target(cluster: str, subject: str) -> str:
    return f"{subject} [{cluster}]" if cluster else subject


def _shown(value: Any) -> str:
    if value is None:
        return ""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _write_table(results: list[ScanResult], out: TextIO) -> None:
    _write_rows(
        [
            (
                item.result.severity,
                item.result.rule,
                item.result.subject or item.result.target,
                item.result.config,
                _shown(item.result.value),
                item.result.expected,
            )
            for item in results
        ],
        [item.result.message for item in results],
        out,
    )


def _write_rows(rows: list[tuple[str, ...]], messages: list[str], out: TextIO) -> None:
    """One line per result (severity, rule, target, setting, value, expected), its message below."""
    if not rows:
        out.write("no findings\n")
        return
    header = ("SEVERITY", "RULE", "TARGET", "SETTING", "VALUE", "EXPECTED")
    widths = [min(max(len(str(row[i])) for row in [header, *rows]), 60) for i in range(len(header) - 1)]
    for row, message in zip([header, *rows], [None, *messages], strict=True):
        cells = [str(cell)[:60].ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        out.write("  ".join([*cells, str(row[-1])]).rstrip() + "\n")
        if message:
            out.write(f"    {message}\n")
    counts = {severity: sum(1 for row in rows if row[0] == severity) for severity in ("error", "warning", "info")}
    out.write(f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} info(s)\n")
