"""Delivering a report: a signed notice to a loopback webhook receiver, and e-mail with the CSV."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.core import mail

from auditor.alerts.delivery import deliver
from auditor.alerts.models import Channel, Delivery
from auditor.reports.delivery import deliver_report
from auditor.reports.models import Report, ReportSchedule
from auditor.reports.service import build_report, build_scheduled_report
from tests.support.reports import END, START, ReportData
from tests.support.webhooks import Receiver

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

NOW = END + timedelta(hours=6)  # beat's daily build for the period START..END


def deliver_pending() -> list[Delivery | None]:
    """What the Celery task does for each delivery once the transaction commits."""
    ids = Delivery.objects.filter(status=Delivery.PENDING).order_by("pk").values_list("pk", flat=True)
    return [deliver(pk) for pk in list(ids)]


@pytest.fixture
def schedule(report_data: ReportData) -> ReportSchedule:
    schedule = ReportSchedule.objects.create(
        name="ops", period="daily", all_bindings=False, email_recipients=["sre@example.com"]
    )
    schedule.bindings.set([report_data.tickets, report_data.orders])
    return schedule


def test_it_sends_a_signed_notice_with_links_to_channels_with_reports_on(
    webhook_settings: Any, make_channel: Callable[..., Channel], receiver: Receiver, schedule: ReportSchedule
) -> None:
    make_channel("ops", events={"reports": True})
    make_channel("findings-only")  # reports off: not told

    report = build_scheduled_report(schedule.pk, now=NOW)

    assert report is not None and (report.period_start, report.period_end) == (START, END)
    assert report.title == "ops: daily report for 2030-01-07"
    [delivery] = deliver_pending()
    assert delivery is not None and (delivery.status, delivery.attempts) == ("delivered", 1)
    [request] = receiver.received
    assert request.signature_valid and request.headers["X-Auditor-Event"] == "notice"
    body = request.json()
    assert (body["event"], body["kind"], body["channel"]) == ("notice", "report", "ops")
    assert body["summary"].startswith(
        "ops: daily report for 2030-01-07: 2 bindings; Reconciliation runs 4, Failed runs 2"
    )
    details = body["details"]
    assert details["report_id"] == report.pk and details["schedule"] == "ops" and details["status"] == "ok"
    assert details["links"]["page"].endswith(f"/reports/{report.pk}/")
    assert details["links"]["csv"].endswith(f"/reports/{report.pk}/findings.csv")
    assert details["totals"]["findings"] == 2 and details["totals"]["stuck"] == 2
    # orders' only run failed: the findings' total says it leaves it out
    assert details["totals"]["findings_unknown"] == 1
    assert "Findings at end 2 + unknown (1 binding)" in body["summary"]
    report.refresh_from_db()
    assert report.delivery["webhooks"] == {"channels": ["ops"], "deliveries": [delivery.pk], "suppressed": []}


def test_it_tells_only_the_channels_a_schedule_names(
    webhook_settings: Any, make_channel: Callable[..., Channel], receiver: Receiver, schedule: ReportSchedule
) -> None:
    make_channel("ops", events={"reports": True})
    chosen = make_channel("team", events={})  # chosen explicitly: told even with reports off
    schedule.channels.set([chosen])

    build_scheduled_report(schedule.pk, now=NOW)
    deliver_pending()

    assert [r.json()["channel"] for r in receiver.received] == ["team"]
    assert receiver.received[0].signature_valid


def test_it_tells_a_channel_scoped_to_bindings_only_of_reports_it_covers(
    webhook_settings: Any,
    make_channel: Callable[..., Channel],
    receiver: Receiver,
    schedule: ReportSchedule,
    report_data: ReportData,
) -> None:
    """Alerts honour a channel's binding scope; so do report notices: a channel scoped to one
    of a two-binding report's bindings is not told of the other's numbers."""
    make_channel("everything", events={"reports": True})
    make_channel("tickets-team", events={"reports": True}, bindings=[report_data.tickets])
    make_channel("both", events={"reports": True}, bindings=[report_data.tickets, report_data.orders])

    report = build_scheduled_report(schedule.pk, now=NOW)

    assert report is not None and sorted(report.binding_names) == sorted(
        [report_data.tickets.name, report_data.orders.name]
    )
    deliver_pending()
    assert sorted(r.json()["channel"] for r in receiver.wait_for(2)) == ["both", "everything"]
    assert sorted(report.delivery["webhooks"]["channels"]) == ["both", "everything"]
    assert not Delivery.objects.filter(channel__name="tickets-team").exists()


def test_a_channel_a_schedule_names_is_not_told_of_bindings_outside_its_scope(
    webhook_settings: Any,
    make_channel: Callable[..., Channel],
    receiver: Receiver,
    schedule: ReportSchedule,
    report_data: ReportData,
) -> None:
    """Choosing a channel for a schedule does not widen its binding scope: the channel scoped
    to tickets is left out of the two-binding report, and the report says so."""
    narrow = make_channel("tickets-team", events={"reports": True}, bindings=[report_data.tickets])
    wide = make_channel("both", events={}, bindings=[report_data.tickets, report_data.orders])
    schedule.channels.set([narrow, wide])

    report = build_scheduled_report(schedule.pk, now=NOW)
    deliver_pending()

    assert report is not None
    assert [r.json()["channel"] for r in receiver.wait_for(1)] == ["both"]
    assert not Delivery.objects.filter(channel__name="tickets-team").exists()
    assert report.delivery["webhooks"]["channels"] == ["both"]
    assert report.delivery["webhooks"]["out_of_scope"] == ["tickets-team"]


def test_it_builds_a_schedule_s_report_once_per_period(schedule: ReportSchedule) -> None:
    first = build_scheduled_report(schedule.pk, now=NOW)
    again = build_scheduled_report(schedule.pk, now=NOW + timedelta(minutes=5))  # beat fired twice
    assert first is not None and again is None
    assert Report.objects.filter(schedule=schedule).count() == 1
    assert build_scheduled_report(schedule.pk + 1000, now=NOW) is None  # a stale task


def test_it_emails_the_report_with_the_csv_attached(settings: Any, schedule: ReportSchedule) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.EMAIL_HOST = "smtp.example.com"
    settings.DEFAULT_FROM_EMAIL = "auditor@example.com"
    settings.AUDITOR_BASE_URL = "https://auditor.example.com/"

    report = build_scheduled_report(schedule.pk, now=NOW)

    assert report is not None
    [message] = mail.outbox
    assert message.to == ["sre@example.com"] and message.from_email == "auditor@example.com"
    assert message.subject == "[auditor] ops: daily report for 2030-01-07"
    assert "Findings at end: 2" in message.body and f"/reports/{report.pk}/" in message.body
    [(html, mimetype)] = message.alternatives
    assert mimetype == "text/html" and f'href="https://auditor.example.com/reports/{report.pk}/"' in html
    assert ">Findings at end</td><td" in html and ">tickets</td>" in html
    [(filename, content, content_type)] = message.attachments
    assert (filename, content_type) == (f"report-{report.pk}-findings.csv", "text/csv")
    assert content == report.csv and content.count("\r\n") == 5
    report.refresh_from_db()
    assert report.delivery["email"] == {"status": "sent", "detail": "via smtp.example.com", "to": ["sre@example.com"]}


def test_it_skips_email_when_smtp_is_not_configured_and_records_it(settings: Any, schedule: ReportSchedule) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    if hasattr(settings, "EMAIL_HOST"):
        del settings.EMAIL_HOST  # Django's default "localhost" does not count as configured

    report = build_scheduled_report(schedule.pk, now=NOW)

    assert report is not None and mail.outbox == []
    assert report.delivery["email"] == {
        "status": "skipped",
        "detail": "EMAIL_HOST is not set: e-mail is not configured",
        "to": ["sre@example.com"],
    }


def test_it_records_a_failing_mail_server(settings: Any, schedule: ReportSchedule) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 9, 2  # nothing listens

    report = build_scheduled_report(schedule.pk, now=NOW)

    assert report is not None and report.delivery["email"]["status"] == "failed"
    assert report.delivery["email"]["detail"].startswith("ConnectionRefusedError")


def test_it_delivers_nothing_for_a_report_without_schedule(report_data: ReportData, settings: Any) -> None:
    settings.EMAIL_HOST = "smtp.example.com"
    report = deliver_report(build_report([report_data.tickets], START, END, trigger="cli"))
    assert report.delivery["email"] == {"status": "skipped", "detail": "no recipients"}
    assert report.delivery["webhooks"] == {"channels": [], "deliveries": [], "suppressed": []}


def test_it_announces_a_failed_report_with_its_error(
    webhook_settings: Any, make_channel: Callable[..., Channel], schedule: ReportSchedule, monkeypatch: Any
) -> None:
    make_channel("ops", events={"reports": True})
    monkeypatch.setattr("auditor.reports.service.render_body", lambda *a, **k: 1 / 0)
    report = build_scheduled_report(schedule.pk, now=NOW)
    assert report is not None and report.status == "failed"
    payload = Delivery.objects.get().payload
    assert (
        payload["summary"]
        == "ops: daily report for 2030-01-07: the report could not be built (ZeroDivisionError: division by zero)"
    )
    assert isinstance(datetime.fromisoformat(payload["details"]["period_start"]), datetime)
