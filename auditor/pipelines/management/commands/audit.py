"""`python manage.py audit <subcommand>`: the auditor's CLI.

Each subcommand lives in its app as a module with HELP, add_arguments(parser) and
run(options, out) -> exit code; this command only dispatches.
"""

from __future__ import annotations

import importlib
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

SUBCOMMANDS = {
    "apply": "auditor.pipelines.cli",
    "canary": "auditor.canary.cli",
    "demo": "auditor.demo.cli",
    "reconcile": "auditor.reconcile.cli",
    "stuck": "auditor.stuck.cli",
    "lint": "auditor.lint.cli",
    "report": "auditor.reports.cli",
}


def _available() -> dict[str, Any]:
    modules = {}
    for name, path in SUBCOMMANDS.items():
        try:
            modules[name] = importlib.import_module(path)
        except ModuleNotFoundError as exc:
            if exc.name and path.startswith(exc.name):
                continue  # that app is not part of this installation
            raise
    return modules


class Command(BaseCommand):
    help = "Kafka delivery auditor: " + ", ".join(SUBCOMMANDS)

    def add_arguments(self, parser: CommandParser) -> None:
        subparsers = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
        for name, module in _available().items():
            sub = subparsers.add_parser(name, help=module.HELP, description=module.HELP)
            module.add_arguments(sub)

    def handle(self, *args: Any, **options: Any) -> None:
        module = _available()[options["subcommand"]]
        code = module.run(options, self.stdout)
        if code:
            raise CommandError(f"audit {options['subcommand']} exited with status {code}", returncode=code)
