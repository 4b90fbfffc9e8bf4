"""Data migrations of the alerts app, run on rows the old code wrote."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.utils import timezone

from auditor.alerts.models import Alert, Channel, Delivery

pytestmark = pytest.mark.django_db


def test_it_counts_as_notified_only_the_alerts_whose_opening_was_delivered():
    migration = importlib.import_module("auditor.alerts.migrations.0003_notified_when_delivered")
    channel = Channel.objects.create(name="ops", url="https://example.com/hook", secret="${X}")
    now = timezone.now()
    for status in ("delivered", "failed", "pending"):
        alert = Alert.objects.create(
            channel=channel,
            fingerprint=status,
            kind="finding:missing",
            summary="x",
            first_seen=now,
            last_seen=now,
            notified=True,  # the old code: set when the opening was queued
        )
        Delivery.objects.create(channel=channel, alert=alert, event="opened", payload={}, status=status)
    migration.notified_when_delivered(apps, None)
    assert dict(Alert.objects.values_list("fingerprint", "notified")) == {
        "delivered": True,
        "failed": False,
        "pending": False,
    }
