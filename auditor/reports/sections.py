"""Section providers: each concern contributes one section to a report.

A provider is a function ``(bindings, period_start, period_end) -> SectionResult``: a
plain dict of a summary (JSON-serialisable numbers, stored on the report), tables,
Plotly figures (built with auditor.reports.charts) and CSV rows (CSV_COLUMNS keys).
Providers are registered by dotted path and imported when a report is built, so a
report of an installation without, say, the stuck app still builds: that section is
listed as unavailable. A provider that raises fails its section only; the report is
then ``partial`` and says why.

Adding a section from another app::

    from auditor.reports.sections import register_section
    register_section("dlq", "Dead-letter queues", "auditor.dlq.report.dlq_section", app="auditor.dlq")
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NotRequired, TypedDict

import plotly.graph_objects as go
from django.apps import apps
from django.utils.module_loading import import_string

from auditor.pipelines.models import Binding

log = logging.getLogger(__name__)

# The report's CSV: one row per finding or stuck item, whichever section it comes from.
CSV_COLUMNS = (
    "section",
    "binding",
    "run",
    "kind",
    "cause",
    "key",
    "partition",
    "offset",
    "timestamp",
    "group",
    "detail",
)


def shown_time(when: datetime | None) -> str:
    """A time as tables show it (the summary keeps ISO 8601)."""
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if when else "—"


UNKNOWN = "unknown"


def shown_count(count: int | None) -> int | str:
    """A count as tables show it: None (no successful run or diagnosis to tell) is unknown, never 0."""
    return UNKNOWN if count is None else count


class Table(TypedDict):
    title: str
    columns: list[str]
    rows: list[list[Any]]
    empty: NotRequired[str]  # shown when there are no rows
    note: NotRequired[str]


class SectionResult(TypedDict):
    summary: dict[str, Any]  # stored in Report.summary["sections"][name]; a "totals" entry feeds the headline
    tables: NotRequired[list[Table]]
    figures: NotRequired[list[go.Figure]]
    csv_rows: NotRequired[list[dict[str, Any]]]
    notes: NotRequired[list[str]]
    csv_truncated: NotRequired[bool]


# What a section that built nothing reads as (an empty summary, no tables), typed as a result.
_NO_RESULT: SectionResult = {"summary": {}}

Provider = Callable[[Sequence[Binding], datetime, datetime], SectionResult]


@dataclass(frozen=True)
class SectionSpec:
    name: str
    title: str
    path: str  # dotted path of the provider
    app: str | None = None  # the installed app the section reads, if any


@dataclass
class BuiltSection:
    name: str
    title: str
    result: SectionResult | None = None
    unavailable: str = ""  # the app or model it reads is not there
    error: str = ""  # the provider failed

    @property
    def ok(self) -> bool:
        return self.result is not None

    @property
    def tables(self) -> list[Table]:
        return list((self.result or _NO_RESULT).get("tables") or [])

    @property
    def figures(self) -> list[go.Figure]:
        return list((self.result or _NO_RESULT).get("figures") or [])

    @property
    def notes(self) -> list[str]:
        return list((self.result or _NO_RESULT).get("notes") or [])

    @property
    def csv_rows(self) -> list[dict[str, Any]]:
        return list((self.result or _NO_RESULT).get("csv_rows") or [])

    @property
    def summary(self) -> dict[str, Any]:
        return dict((self.result or _NO_RESULT).get("summary") or {})


@dataclass
class SectionRegistry:
    specs: dict[str, SectionSpec] = field(default_factory=dict)

    def register(self, name: str, title: str, path: str, app: str | None = None) -> None:
        if name in self.specs and self.specs[name].path != path:
            raise ValueError(f"report section {name!r} is already registered to {self.specs[name].path}")
        self.specs[name] = SectionSpec(name, title, path, app)

    def build(self, bindings: Sequence[Binding], start: datetime, end: datetime) -> list[BuiltSection]:
        return [build_section(spec, bindings, start, end) for spec in self.specs.values()]


def build_section(spec: SectionSpec, bindings: Sequence[Binding], start: datetime, end: datetime) -> BuiltSection:
    built = BuiltSection(spec.name, spec.title)
    if spec.app and not apps.is_installed(spec.app):
        built.unavailable = f"the {spec.app} app is not installed"
        return built
    try:
        provider: Provider = import_string(spec.path)
    except ImportError as exc:
        built.unavailable = f"{spec.path} cannot be imported: {exc}"
        return built
    try:
        result = provider(bindings, start, end)
    except Exception as exc:  # one broken section must not cost the others
        log.exception("report section %s failed", spec.name)
        built.error = f"{type(exc).__name__}: {exc}"[:1000]
        return built
    if not isinstance(result, dict) or not isinstance(result.get("summary"), dict):
        built.error = f"{spec.path} returned {type(result).__name__}, not a dict with a 'summary' dict"
        return built
    built.result = result
    return built


registry = SectionRegistry()
register_section = registry.register

register_section(
    "reconcile", "Reconciliation", "auditor.reports.providers.reconcile.reconcile_section", "auditor.reconcile"
)
register_section("stuck", "Stuck items", "auditor.reports.providers.stuck.stuck_section", "auditor.stuck")
register_section("lint", "Config lint", "auditor.reports.providers.lint.lint_section", "auditor.lint")
register_section("canary", "Canary", "auditor.reports.providers.canary.canary_section", "auditor.canary")
