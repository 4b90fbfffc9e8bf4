"""`audit report`: build now from a schedule or for bindings; --json; bad input exits 2."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from auditor.reports.models import Report, ReportSchedule
from tests.support.reports import ReportData

pytestmark = pytest.mark.django_db


def audit_report(*args: str) -> str:
    out = io.StringIO()
    call_command("audit", "report", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def recent(report_data: ReportData) -> ReportData:
    """The fixture's day moved to end 30 minutes from now: --since 1d covers exactly its rows."""
    from datetime import timedelta

    from django.db.models import F

    from auditor.canary.models import CanaryPoint
    from auditor.lint.models import LintScan
    from auditor.reconcile.models import ReconcileRun
    from auditor.stuck.models import DiagnosisRun, StuckItem
    from tests.support.reports import START

    shift = timezone.now() - timedelta(hours=23, minutes=30) - START
    ReconcileRun.objects.update(created_at=F("created_at") + shift, finished_at=F("finished_at") + shift)
    DiagnosisRun.objects.update(started_at=F("started_at") + shift)
    StuckItem.objects.update(
        first_seen=F("first_seen") + shift, last_seen=F("last_seen") + shift, resolved_at=F("resolved_at") + shift
    )
    LintScan.objects.update(finished_at=F("finished_at") + shift)
    CanaryPoint.objects.update(minute=F("minute") + shift)
    return report_data


def test_it_builds_a_report_of_bindings_as_json(recent: ReportData) -> None:
    data = json.loads(audit_report("--binding", "tickets", "--binding", "orders", "--since", "1d", "--json"))
    assert (data["status"], data["trigger"], data["bindings"]) == ("ok", "cli", ["orders", "tickets"])
    assert data["totals"]["runs"] == 4 and data["totals"]["stuck"] == 2 and data["csv_rows"] == 4
    assert data["summary"]["sections"]["reconcile"]["bindings"]["tickets"]["findings_total"] == 2
    assert data["links"]["page"].endswith(f"/reports/{data['id']}/") and data["delivery"] == {}


def test_it_prints_a_table_for_people(recent: ReportData, settings: Any) -> None:
    settings.AUDITOR_BASE_URL = "https://auditor.example.com"
    text = audit_report("--since", "1d")
    report = Report.objects.get()
    assert text.startswith(f"report {report.pk} (ok): Report on all bindings: ")
    lines = text.splitlines()
    assert lines[2].split() == ["binding", "runs", "failed", "findings", "new", "stuck", "lint-err", "lint-warn"]
    assert lines[5].split() == ["tickets", "3", "1", "2", "4", "2", "1", "0"]
    assert "canary _audit.canary: sent 250, lost 3, duplicated 1, worst minute p99 55.5 ms" in text
    assert text.endswith(f"csv  https://auditor.example.com/reports/{report.pk}/findings.csv (5 rows)\n")


def test_it_builds_a_schedule_s_last_period_and_delivers_it(report_data: ReportData, settings: Any) -> None:
    settings.EMAIL_HOST = "smtp.example.com"
    ReportSchedule.objects.create(name="ops", period="weekly", email_recipients=["sre@example.com"])
    data = json.loads(audit_report("--schedule", "ops", "--json"))
    assert data["schedule"] == "ops" and data["delivery"]["email"]["status"] == "sent"
    start, end = data["period_start"], data["period_end"]
    assert (timezone.datetime.fromisoformat(end) - timezone.datetime.fromisoformat(start)).days == 7

    quiet = json.loads(audit_report("--schedule", "ops", "--no-deliver", "--json"))
    assert quiet["delivery"] == {}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--schedule", "nope"), "no report schedule named 'nope' (known: none)"),
        (("--binding", "nope"), "unknown binding(s) nope (known: none)"),
        (("--since", "soon"), "--since: 'soon' is not a duration"),
    ],
)
def test_it_exits_2_on_bad_input(
    db: None, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    with pytest.raises(CommandError) as raised:
        audit_report(*args)
    assert raised.value.returncode == 2
    assert message in capsys.readouterr().err
    assert not Report.objects.exists()


def test_it_syncs_the_schedules(db: None) -> None:
    ReportSchedule.objects.create(name="ops")
    assert audit_report("--sync-schedules") == "1 report schedule(s) in step with beat\n"
