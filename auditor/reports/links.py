"""Absolute links to a report, for webhooks, e-mails, the CLI and the API."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.urls import reverse

from auditor.reports import conf

if TYPE_CHECKING:
    from auditor.reports.models import Report


def report_links(report: Report) -> dict[str, str]:
    base = conf.base_url()
    return {
        "page": base + reverse("reports:report", args=[report.pk]),
        "html": base + reverse("reports:download-html", args=[report.pk]),
        "csv": base + reverse("reports:download-csv", args=[report.pk]),
    }
