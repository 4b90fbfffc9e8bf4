"""`python manage.py audit <subcommand>`: the auditor's CLI.

Each subcommand lives in its app as a module with HELP, add_arguments(parser) and
run(options, out) -> exit code; this command only dispatches.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from auditor.canary import cli as canary_cli
from auditor.demo import cli as demo_cli
from auditor.lab import cli as lab_cli
from auditor.lint import cli as lint_cli
from auditor.pipelines import cli as apply_cli
from auditor.reconcile import cli as reconcile_cli
from auditor.reports import cli as report_cli
from auditor.stuck import cli as stuck_cli

SUBCOMMANDS: dict[str, ModuleType] = {
    "apply": apply_cli,
    "canary": canary_cli,
    "demo": demo_cli,
    "reconcile": reconcile_cli,
    "stuck": stuck_cli,
    "lint": lint_cli,
    "report": report_cli,
    "lab": lab_cli,
}


class Command(BaseCommand):
    help = "Kafka delivery auditor: " + ", ".join(SUBCOMMANDS)

    def add_arguments(self, parser: CommandParser) -> None:
        subparsers = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
        for name, module in SUBCOMMANDS.items():
            sub = subparsers.add_parser(name, help=module.HELP, description=module.HELP)
            module.add_arguments(sub)

    def handle(self, *args: Any, **options: Any) -> None:
        module = SUBCOMMANDS[options["subcommand"]]
        code = module.run(options, self.stdout)
        if code:
            raise CommandError(f"audit {options['subcommand']} exited with status {code}", returncode=code)
