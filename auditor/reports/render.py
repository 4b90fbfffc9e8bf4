"""HTML of a report: the stored body, the in-app page's wrapper, the offline download, the e-mail.

The body (templates/reports/_body.html) is rendered once, when the report is built,
and stored; it holds the tables and each chart's Plotly div, and no plotly.js. The
app's page loads plotly.js from the static files; the downloaded file embeds the
plotly.js of the installed plotly package inline, so it opens offline.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from django.template.loader import render_to_string
from django.utils.safestring import SafeString, mark_safe
from plotly.offline import get_plotlyjs

from auditor.reports.charts import figure_div
from auditor.reports.links import report_links
from auditor.reports.models import Report
from auditor.reports.sections import BuiltSection

# (summary total key, label) in the order of the report's headline cards.
HEADLINE = (
    ("runs", "Reconciliation runs"),
    ("failed_runs", "Failed runs"),
    ("findings", "Findings at end"),
    ("new_findings", "New findings"),
    ("stuck", "Stuck items at end"),
    ("lint_errors", "Lint errors"),
    ("lint_warnings", "Lint warnings"),
    ("canary_lost", "Canary lost"),
    ("canary_truncated", "Canary truncated"),
    ("canary_duplicated", "Canary duplicated"),
    ("canary_p99_ms_max", "Canary p99 (ms, worst minute)"),
)


# Totals that leave out what is unknown: the total counting what was left out, and what it counts.
UNKNOWN_IN = {"findings": ("findings_unknown", "binding"), "stuck": ("stuck_unknown", "stuck rule")}
# Totals that are None when nothing measured them in the period, and why: shown as unknown, never
# as 0 or a bare dash (the canary's p99 stays "—": None there can also mean nothing was received).
NOT_MEASURED = {
    "lint_errors": "no scan in the period",
    "lint_warnings": "no scan in the period",
    "canary_lost": "no canary in the period",
    "canary_truncated": "no canary in the period",
    "canary_duplicated": "no canary in the period",
}


def headline(totals: dict[str, Any]) -> list[dict[str, Any]]:
    cards = []
    for key, title in HEADLINE:
        if key in totals:
            value = totals[key]
            if isinstance(value, float):
                value = round(value, 1)
            shown = "—" if value is None else value
            if value is None and key in NOT_MEASURED:
                shown = f"unknown ({NOT_MEASURED[key]})"
            unknown_key, what = UNKNOWN_IN.get(key, ("", ""))
            unknown = int(totals.get(unknown_key) or 0)
            if unknown:  # a sum over what is known, never one that reads as complete
                left_out = f"{unknown} {what}{'s' if unknown != 1 else ''}"
                shown = f"unknown ({left_out})" if value is None else f"{value} + unknown ({left_out})"
            cards.append({"key": key, "label": title, "value": shown})
    return cards


def _section_context(section: BuiltSection) -> dict[str, Any]:
    return {
        "name": section.name,
        "title": section.title,
        "tables": section.tables,
        # The only HTML not produced by the template: our own figures (numbers, escaped labels).
        "figures": [
            mark_safe(figure_div(fig, f"chart-{section.name}-{n}")) for n, fig in enumerate(section.figures, start=1)
        ],
        "notes": section.notes,
        "unavailable": section.unavailable,
        "error": section.error,
    }


def render_body(
    title: str,
    start: datetime,
    end: datetime,
    binding_names: Sequence[str],
    totals: dict[str, Any],
    sections: Sequence[BuiltSection],
) -> str:
    return render_to_string(
        "reports/_body.html",
        {
            "title": title,
            "period_start": start,
            "period_end": end,
            "binding_names": binding_names,
            "cards": headline(totals),
            "sections": [_section_context(s) for s in sections],
        },
    )


@cache
def plotly_js() -> SafeString:
    """plotly.min.js of the installed plotly package (the same file the app serves)."""
    return mark_safe(get_plotlyjs())  # the vendored library, not data


def render_document(report: Report) -> str:
    """A standalone HTML file of the report, with plotly.js inline: it opens offline."""
    return render_to_string("reports/document.html", {"report": report, "plotly_js": plotly_js()})


def render_email(report: Report) -> tuple[str, str]:
    """(text, html) of the e-mail: the headline numbers and links; the CSV goes as an attachment."""
    context = {
        "report": report,
        "cards": headline(report.totals),
        "links": report_links(report),
        "bindings": (report.summary or {}).get("sections", {}).get("reconcile", {}).get("bindings", {}),
        "stuck": (report.summary or {}).get("sections", {}).get("stuck", {}).get("bindings", {}),
        "problems": {**report.summary.get("unavailable", {}), **report.summary.get("errors", {})},
    }
    return render_to_string("reports/email.txt", context), render_to_string("reports/email.html", context)
