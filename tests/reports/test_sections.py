"""Section providers: one failing or missing section leaves the others and says why."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from auditor.reports.models import Report
from auditor.reports.sections import SectionRegistry, SectionSpec, registry
from auditor.reports.service import build_report
from tests.support.reports import END, START, ReportData

pytestmark = pytest.mark.django_db


def broken_section(bindings: Any, start: datetime, end: datetime) -> dict[str, Any]:
    raise RuntimeError("the dlq table is gone")


def extra_section(bindings: Any, start: datetime, end: datetime) -> dict[str, Any]:
    return {
        "summary": {"totals": {"dlq": 3}, "names": [b.name for b in bindings]},
        "tables": [{"title": "DLQ <x>", "columns": ["Binding"], "rows": [["<b>t</b>"]]}],
        "csv_rows": [{"section": "dlq", "binding": "tickets", "key": "@SUM(A1)"}],
    }


@pytest.fixture
def extra_specs() -> Iterator[dict[str, SectionSpec]]:
    saved = dict(registry.specs)
    yield registry.specs
    registry.specs.clear()
    registry.specs.update(saved)


def test_it_keeps_the_other_sections_when_one_fails(report_data: ReportData, extra_specs) -> None:
    registry.register("broken", "Broken", f"{__name__}.broken_section")
    registry.register("missing", "Missing", "auditor.nowhere.section")
    registry.register("absent", "Absent app", f"{__name__}.extra_section", app="auditor.absent")
    registry.register("dlq", "Dead letters", f"{__name__}.extra_section")

    report = build_report([report_data.tickets], START, END, trigger="cli")

    assert report.status == "partial"
    assert report.error == "section broken: RuntimeError: the dlq table is gone"
    assert report.summary["errors"] == {"broken": "RuntimeError: the dlq table is gone"}
    assert report.summary["unavailable"]["absent"] == "the auditor.absent app is not installed"
    assert report.summary["unavailable"]["missing"].startswith("auditor.nowhere.section cannot be imported")
    assert report.summary["sections"]["dlq"]["names"] == ["tickets"]
    assert report.totals["dlq"] == 3 and report.totals["findings"] == 2  # the others are intact
    assert "This section could not be built: RuntimeError: the dlq table is gone" in report.html
    assert "DLQ &lt;x&gt;" in report.html and "&lt;b&gt;t&lt;/b&gt;" in report.html
    assert "'@SUM(A1)" in report.csv


def test_it_fails_the_report_when_it_cannot_be_rendered(report_data: ReportData, monkeypatch) -> None:
    def boom(*args: Any, **kwargs: Any) -> str:
        raise ValueError("template exploded")

    monkeypatch.setattr("auditor.reports.service.render_body", boom)
    report = build_report([report_data.tickets], START, END, trigger="cli")
    report.refresh_from_db()
    assert (report.status, report.error) == ("failed", "ValueError: template exploded")
    assert report.finished_at is not None and report.html == ""


def test_it_refuses_to_register_a_name_twice_for_another_provider() -> None:
    local = SectionRegistry()
    local.register("a", "A", "x.y")
    local.register("a", "A", "x.y")  # the same registration again is harmless
    with pytest.raises(ValueError, match="already registered"):
        local.register("a", "A", "x.z")


def test_it_returns_the_sections_in_registration_order() -> None:
    assert list(registry.specs)[:4] == ["reconcile", "stuck", "lint", "canary"]
    assert Report._meta.get_field("status").default == "building"
