"""Deliver a report: a notice through the webhook channels, and e-mail where SMTP is set up.

Webhooks: a ``notice`` of kind ``report`` with the headline numbers and links (the
report itself stays in the app). A schedule that selects channels notifies those of them
whose binding scope (if any) covers the report's bindings, and names the others as left out;
otherwise ``send_notice`` reaches every enabled channel with ``reports`` on whose binding
scope covers them.

E-mail: to the schedule's recipients, only when EMAIL_HOST is set (auditor.reports.conf):
a plain-text body, the headline as an HTML alternative, and the CSV attached. What was
sent, skipped or failed is recorded in ``Report.delivery``.
"""

from __future__ import annotations

import logging
import smtplib
from typing import Any

from django.core.mail import EmailMultiAlternatives
from django.db import transaction
from django.utils import timezone

from auditor.alerts.formats import Message
from auditor.alerts.models import Channel, Delivery
from auditor.alerts.outbox import covers, schedule, send_notice
from auditor.reports import conf
from auditor.reports.links import report_links
from auditor.reports.models import Report
from auditor.reports.render import headline, render_email

log = logging.getLogger(__name__)

NOTICE_KIND = "report"


def notice_summary(report: Report) -> str:
    if report.status == Report.FAILED:
        return f"{report.title}: the report could not be built ({report.error[:200]})"
    parts = [f"{card['label']} {card['value']}" for card in headline(report.totals)]
    bindings = len(report.binding_names)
    text = f"{report.title}: {bindings} binding{'s' if bindings != 1 else ''}"
    if parts:
        text += "; " + ", ".join(parts)
    if report.status == Report.PARTIAL:
        text += " (partial: " + ", ".join(report.summary.get("errors", {})) + " failed)"
    return text


def notice_details(report: Report) -> dict[str, Any]:
    return {
        "report_id": report.pk,
        "schedule": report.schedule.name if report.schedule else None,
        "status": report.status,
        "period_start": report.period_start.isoformat(),
        "period_end": report.period_end.isoformat(),
        "bindings": list(report.binding_names),
        "totals": report.totals,
        "links": report_links(report),
    }


def _notify_chosen(channels: list[Channel], summary: str, details: dict[str, Any]) -> list[Delivery]:
    # The alerts app's own scheduling (rate limit, delivery log, queued after commit);
    # send_notice offers no way to name channels.
    with transaction.atomic():
        return [
            schedule(
                channel,
                Delivery.NOTICE,
                Message(
                    event=Delivery.NOTICE, channel=channel.name, kind=NOTICE_KIND, summary=summary, details=details
                ),
            )
            for channel in channels
        ]


def notify_webhooks(report: Report) -> dict[str, Any]:
    summary, details = notice_summary(report), notice_details(report)
    out_of_scope: list[str] = []
    if report.schedule and report.schedule.channels.exists():
        # A channel scoped to some bindings hears of those only, whoever chose it (as alerts and
        # send_notice honour the scope): told of the others it would leak them to its receiver.
        chosen = list(report.schedule.channels.filter(enabled=True).prefetch_related("bindings"))
        out_of_scope = [c.name for c in chosen if not covers(c, report.binding_names)]
        deliveries = _notify_chosen([c for c in chosen if c.name not in out_of_scope], summary, details)
    else:
        deliveries = send_notice(NOTICE_KIND, summary, details, binding_names=report.binding_names)
    outcome: dict[str, Any] = {
        "channels": [d.channel.name for d in deliveries],
        "deliveries": [d.pk for d in deliveries],
        "suppressed": [d.channel.name for d in deliveries if d.status == Delivery.SUPPRESSED],
    }
    if out_of_scope:
        outcome["out_of_scope"] = out_of_scope
        log.warning(
            "report %s: not told to channel(s) %s, scoped to fewer bindings than the report covers",
            report.pk,
            ", ".join(out_of_scope),
        )
    return outcome


def send_email(report: Report, recipients: list[str]) -> dict[str, Any]:
    if not recipients:
        return {"status": "skipped", "detail": "no recipients"}
    host = conf.email_host()
    if not host:
        return {"status": "skipped", "detail": "EMAIL_HOST is not set: e-mail is not configured", "to": recipients}
    text, html = render_email(report)
    message = EmailMultiAlternatives(
        subject=f"[auditor] {report.title}"[:200], body=text, from_email=conf.from_email(), to=recipients
    )
    message.attach_alternative(html, "text/html")
    message.attach(f"report-{report.pk}-findings.csv", report.csv, "text/csv")
    try:
        message.send(fail_silently=False)
    except (smtplib.SMTPException, OSError) as exc:
        log.warning("report %s: e-mail to %s failed: %s", report.pk, ", ".join(recipients), exc)
        return {"status": "failed", "detail": f"{type(exc).__name__}: {exc}"[:500], "to": recipients}
    return {"status": "sent", "detail": f"via {host}", "to": recipients}


def deliver_report(report: Report) -> Report:
    """Send the report's notice and e-mail; record the outcome on the report."""
    recipients = list(report.schedule.email_recipients) if report.schedule else []
    outcome: dict[str, Any] = {"at": timezone.now().isoformat()}
    try:
        outcome["webhooks"] = notify_webhooks(report)
    except Exception as exc:  # the e-mail still goes out; the failure is shown on the report
        log.exception("report %s: webhook notice failed", report.pk)
        outcome["webhooks"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    outcome["email"] = send_email(report, recipients)
    report.delivery = outcome
    report.save(update_fields=["delivery"])
    return report
