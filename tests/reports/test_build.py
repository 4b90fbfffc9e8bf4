"""Building a report from inserted rows: exact numbers in the summary and the CSV, escaping, charts."""

from __future__ import annotations

import csv
import io

import pytest

from auditor.pipelines.models import StuckRule
from auditor.reports.delivery import notice_summary
from auditor.reports.models import Report
from auditor.reports.render import headline, render_document
from auditor.reports.service import build_report, resolve_bindings
from tests.support.reports import (
    CANARY_TOPIC,
    END,
    FORMULA_KEY,
    HOSTILE,
    START,
    ReportData,
    canary_point,
    diagnosis,
)

pytestmark = pytest.mark.django_db


def build(data: ReportData) -> Report:
    return build_report([data.tickets, data.orders], START, END, trigger=Report.CLI)


def test_it_reports_exact_reconciliation_numbers(report_data: ReportData) -> None:
    report = build(report_data)

    assert (report.status, report.error) == ("ok", "")
    rec = report.summary["sections"]["reconcile"]
    tickets = rec["bindings"]["tickets"]
    assert (tickets["runs"], tickets["ok"], tickets["failed"]) == (3, 2, 1)
    assert tickets["latest_run"] == report_data.runs["last"].pk
    assert tickets["findings"] == {
        "missing": 1,
        "duplicate": 0,
        "orphan": 0,
        "gap": 1,
        "aborted": 0,
        "unprocessed": 0,
        "reprocessed": 0,
    }
    assert (tickets["findings_total"], tickets["new_findings"]) == (2, 4)
    assert tickets["by_cause"] == [
        {"kind": "gap", "cause": "broker-lost", "count": 1},
        {"kind": "missing", "cause": None, "count": 1},
    ]
    # orders' only run in the period failed: its findings at the end are not known, never 0
    orders = rec["bindings"]["orders"]
    assert (orders["runs"], orders["failed"], orders["latest_run"], orders["findings_total"]) == (1, 1, None, None)
    assert orders["findings"] is None
    assert "other" not in rec["bindings"]
    assert rec["totals"] == {"runs": 4, "failed_runs": 2, "findings": 2, "new_findings": 4, "findings_unknown": 1}
    assert report.binding_names == ["tickets", "orders"]
    assert "had no successful run in the period: their findings at the end are unknown, not 0." in report.html
    cards = {card["key"]: card["value"] for card in headline(report.totals)}
    assert cards["findings"] == "2 + unknown (1 binding)"


def test_it_reports_a_stuck_rule_without_a_successful_diagnosis_as_unknown(report_data: ReportData) -> None:
    rule = StuckRule.objects.create(
        name="orders-new", binding=report_data.orders, status_column="status", stuck_values=["NEW"], age_column="c"
    )
    diagnosis(rule, 2, status="failed", error="source down")
    report = build(report_data)

    stuck = report.summary["sections"]["stuck"]
    assert stuck["bindings"]["orders"]["stuck_at_end"] is None
    assert stuck["bindings"]["orders"]["unknown_rules"] == ["orders-new"]
    assert (stuck["totals"]["stuck"], stuck["totals"]["stuck_unknown"]) == (2, 1)  # tickets' 2 are known
    assert "<td>unknown for orders-new</td>" in report.html
    assert {card["key"]: card["value"] for card in headline(report.totals)}["stuck"] == "2 + unknown (1 stuck rule)"
    assert "Stuck items at end 2 + unknown (1 stuck rule)" in notice_summary(report)


def test_it_reports_exact_stuck_lint_and_canary_numbers(report_data: ReportData) -> None:
    report = build(report_data)
    sections = report.summary["sections"]

    stuck = sections["stuck"]["bindings"]["tickets"]
    assert (stuck["diagnoses"], stuck["failed"], stuck["stuck_at_end"]) == (3, 1, 2)
    assert {v: n for v, n in stuck["verdicts"].items() if n} == {"waiting": 1, "skipped": 1}
    assert (stuck["became_stuck"], stuck["got_unstuck"], stuck["rules"]) == (3, 1, ["tickets-new"])
    assert sections["stuck"]["bindings"]["orders"]["diagnoses"] == 0

    lint = sections["lint"]
    assert lint["scan_status"] == "ok" and lint["scan_finished"] == "2030-01-07T04:00:00+00:00"
    assert lint["bindings"]["tickets"] == {"cluster": "main", "topic": "tickets", "errors": 1, "warnings": 0}
    assert lint["bindings"]["orders"] == {"cluster": "main", "topic": "orders", "errors": 0, "warnings": 1}
    assert lint["clusters"] == {"main": {"error": 2, "warning": 2, "info": 1}}

    canary = sections["canary"]["topics"]["_audit.canary"]
    assert (canary["sent"], canary["received"], canary["lost"], canary["duplicated"]) == (250, 247, 3, 1)
    assert (canary["p99_ms_max"], canary["minutes"], canary["loss_ratio"]) == (55.5, 2, 0.012)

    assert report.totals == {
        "runs": 4,
        "failed_runs": 2,
        "findings": 2,
        "new_findings": 4,
        "findings_unknown": 1,
        "diagnoses": 3,
        "failed_diagnoses": 1,
        "stuck": 2,
        "became_stuck": 3,
        "got_unstuck": 1,
        "stuck_unknown": 0,
        "lint_errors": 2,
        "lint_warnings": 2,
        "lint_scanned": True,
        "canary_sent": 250,
        "canary_lost": 3,
        "canary_truncated": 0,
        "canary_duplicated": 1,
        "canary_p99_ms_max": 55.5,
    }


def test_it_reports_canaries_on_other_clusters_apart(report_data: ReportData, settings) -> None:
    # Same topic name, another cluster (named, then by its servers) in the same minutes.
    canary_point(0.5, 0, session="e1", cluster="east", sent=100, received=90, lost=10, p99_ms=500.0)
    canary_point(0.7, 0, session="w1", bootstrap_servers="west-1:9092", sent=20, received=20)
    # The default cluster with its servers recorded: still the default canary.
    canary_point(0.6, 1, session="d1", bootstrap_servers=settings.KAFKA_BOOTSTRAP_SERVERS, sent=5, received=5)
    section = build(report_data).summary["sections"]["canary"]

    topics = section["topics"]
    assert list(topics) == [CANARY_TOPIC, f"{CANARY_TOPIC} on east", f"{CANARY_TOPIC} on servers=west-1:9092"]
    default, east, west = topics.values()
    assert (default["sent"], default["lost"], default["minutes"], default["p99_ms_max"]) == (255, 3, 2, 55.5)
    assert (east["cluster"], east["sent"], east["lost"], east["minutes"], east["p99_ms_max"]) == (
        "east",
        100,
        10,
        1,
        500.0,
    )
    assert (west["sent"], west["lost"], west["loss_ratio"]) == (20, 0, 0.0)
    assert section["totals"]["canary_lost"] == 13


def test_it_writes_the_findings_and_stuck_items_to_the_csv(report_data: ReportData) -> None:
    report = build(report_data)
    rows = list(csv.reader(io.StringIO(report.csv)))
    last = str(report_data.runs["last"].pk)

    assert rows[0] == [
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
    ]
    assert rows[1] == [
        "reconcile",
        "tickets",
        last,
        "gap",
        "broker-lost",
        "k2",
        "0",
        "5",
        "",
        "",
        "producer session p1 seq 7",
    ]
    assert rows[2] == ["reconcile", "tickets", last, "missing", "", "'" + FORMULA_KEY, "", "", "", "", ""]
    assert [r[:6] for r in rows[3:]] == [
        ["stuck", "tickets", "", "stuck", "skipped", HOSTILE],
        ["stuck", "tickets", "", "stuck", "waiting", "A"],
    ]
    assert rows[3][8] == "2030-01-07T01:00:00+00:00" and rows[3][10] == "rule tickets-new; status NEW; because skipped"
    assert report.csv_rows == 4 == len(rows) - 1
    assert report.summary["csv"] == {"rows": 4, "truncated": False}


def test_it_caps_the_csv_and_says_so(report_data: ReportData, settings) -> None:
    settings.AUDITOR_REPORT_MAX_CSV_ROWS = 1
    report = build(report_data)
    assert report.csv_rows == 1 and report.summary["csv"] == {"rows": 1, "truncated": True}
    assert len(list(csv.reader(io.StringIO(report.csv)))) == 2


def test_it_renders_tables_and_charts_with_every_value_escaped(report_data: ReportData) -> None:
    report = build(report_data)
    html = report.html

    for chart in ("chart-reconcile-1", "chart-stuck-1", "chart-canary-1"):
        assert f'id="{chart}"' in html
    assert "Plotly.newPlot" in html
    assert "<script src" not in html and "cdn" not in html.lower()  # plotly.js comes from the page
    assert HOSTILE not in html and "&lt;img src=x onerror=" in html  # the lint subject, as text
    assert 'data-total="findings"' in html
    assert "gap</td><td>broker-lost</td><td>1</td>" in html.replace("\n", "")


def test_it_embeds_plotly_js_in_the_download_so_it_opens_offline(report_data: ReportData) -> None:
    from plotly.offline import get_plotlyjs

    document = render_document(build(report_data))
    assert document.startswith("<!doctype html>")
    plotly_js = get_plotlyjs()
    assert f"<script>{plotly_js}</script>" in document  # the installed package's plotly.min.js, inline
    rest = document.replace(plotly_js, "")
    assert "<script src" not in rest and "cdn" not in rest.lower()
    assert 'id="chart-canary-1"' in rest and "Plotly.newPlot" in rest


def test_it_reports_a_period_without_data_as_zeros_and_what_is_at_its_end_as_unknown(report_data: ReportData) -> None:
    from datetime import timedelta

    report = build_report([report_data.tickets], END + timedelta(days=5), END + timedelta(days=6), trigger="cli")
    assert report.status == "ok"
    assert report.totals["runs"] == report.totals["canary_sent"] == 0
    # no lint scan, no canary point in the period: their counts are not known either, never 0
    assert report.totals["lint_errors"] is None and report.totals["canary_lost"] is None
    # no run or diagnosis in the period: what was wrong at its end is not known, never 0
    assert report.totals["findings"] is None and report.totals["stuck"] is None
    cards = {card["key"]: card["value"] for card in headline(report.totals)}
    assert (cards["findings"], cards["stuck"]) == ("unknown (1 binding)", "unknown (1 stuck rule)")
    assert report.totals["lint_scanned"] is False and report.totals["canary_p99_ms_max"] is None
    assert report.csv_rows == 0 and 'id="chart-' not in report.html
    assert "No lint scan of the live system finished in this period." in report.html


def test_it_says_lint_and_canary_counts_are_unknown_when_nothing_measured_them(report_data: ReportData) -> None:
    from datetime import timedelta

    from auditor.reports.render import render_email

    empty = build_report([report_data.tickets], END + timedelta(days=5), END + timedelta(days=6), trigger="cli")
    cards = {card["key"]: card["value"] for card in headline(empty.totals)}
    assert (cards["lint_errors"], cards["lint_warnings"]) == ("unknown (no scan in the period)",) * 2
    assert (cards["canary_lost"], cards["canary_truncated"], cards["canary_duplicated"]) == (
        "unknown (no canary in the period)",
    ) * 3
    notice = notice_summary(empty)
    text, html = render_email(empty)
    for shown in (notice, text, html, empty.html):
        for zero in ("Lint errors 0", "Lint errors: 0", "Lint warnings 0", "Canary lost 0", "Canary lost: 0"):
            assert zero not in shown
    assert "Lint errors unknown (no scan in the period)" in notice
    assert "Canary lost unknown (no canary in the period), Canary truncated unknown (no canary" in notice
    assert "Lint warnings: unknown (no scan in the period)" in text
    assert '<div class="n">unknown (no canary in the period)</div><div class="muted">Canary lost</div>' in empty.html
    assert '<div class="n">unknown (no scan in the period)</div><div class="muted">Lint errors</div>' in empty.html

    measured = notice_summary(build(report_data))  # a scan and canary points in the period: their numbers
    assert "Lint errors 2, Lint warnings 2, Canary lost 3, Canary truncated 0, Canary duplicated 1" in measured
    assert "unknown (no" not in measured


def test_it_names_unknown_bindings(db: None) -> None:
    with pytest.raises(ValueError, match=r"unknown binding\(s\) nope \(known: none\)"):
        resolve_bindings(["nope"])


def test_it_refuses_a_period_that_ends_before_it_starts(report_data: ReportData) -> None:
    with pytest.raises(ValueError, match="must end after it starts"):
        build_report([report_data.tickets], END, START, trigger="cli")
    assert not Report.objects.exists()
