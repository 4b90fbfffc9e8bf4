"""Webhook channels, the alerts they hold open, and the log of every delivery.

A channel's secret is stored as a ``${ENV}`` reference, never as the secret itself
(like every other secret of the auditor); pages show it masked anyway. Its URL may
also be a ``${ENV}`` reference (a Slack webhook URL is itself a credential).
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import Q

from auditor.alerts.events import EventFilter, event_filter_from_json
from auditor.lib.secrets import MASK, MissingEnvError, mask_webhook_url, resolve_env
from auditor.pipelines.models import Binding


class Channel(models.Model):
    GENERIC = "generic"
    SLACK = "slack"
    FORMATS = [(GENERIC, "generic JSON"), (SLACK, "Slack-compatible")]

    name = models.SlugField(max_length=100, unique=True)
    url = models.CharField(max_length=2000, help_text="http(s) URL, or a ${ENV} reference to one")
    secret = models.CharField(max_length=200, help_text="a ${ENV} reference to the signing secret")
    format = models.CharField(max_length=10, choices=FORMATS, default=GENERIC)
    enabled = models.BooleanField(default=True)
    events = models.JSONField(default=dict, blank=True)
    bindings = models.ManyToManyField(
        Binding, blank=True, related_name="alert_channels", help_text="none selected: every binding"
    )
    config_file = models.CharField(
        max_length=1000, blank=True, help_text="the YAML file that declares it (audit apply); empty: made here"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    last_delivery_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def event_filter(self) -> EventFilter:
        return event_filter_from_json(self.events)

    def masked_url(self) -> str:
        """The URL as pages and the API show it: a literal one without its path and query."""
        return mask_webhook_url(self.url)

    def masked_secret(self) -> str:
        return MASK if self.secret else ""

    def secret_state(self) -> str:
        """'set', 'missing' (the referenced variable is not set) or 'none'; never the value."""
        if not self.secret:
            return "none"
        try:
            resolve_env(self.secret)
        except MissingEnvError:
            return "missing"
        return "set"

    def resolved_url(self) -> str:
        return resolve_env(self.url)

    def resolved_secret(self) -> str:
        return resolve_env(self.secret)


class Alert(models.Model):
    """An open (or past) problem on one channel; repeated detections fold into ``count``."""

    OPEN = "open"
    RESOLVED = "resolved"
    STATES = [(OPEN, "open"), (RESOLVED, "resolved")]

    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="alerts")
    fingerprint = models.CharField(max_length=200)
    kind = models.CharField(max_length=60)
    binding = models.ForeignKey(Binding, null=True, blank=True, on_delete=models.SET_NULL, related_name="alerts")
    summary = models.CharField(max_length=500)
    details = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=10, choices=STATES, default=OPEN)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    count = models.PositiveIntegerField(default=1)
    notified = models.BooleanField(default=False, help_text="whether the opening was delivered")

    class Meta:
        ordering = ["-last_seen", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["channel", "fingerprint"], condition=Q(state="open"), name="alerts_one_open_per_fingerprint"
            )
        ]
        indexes = [models.Index(fields=["fingerprint", "state"], name="alerts_fingerprint_state")]

    def __str__(self) -> str:
        return f"{self.fingerprint} on {self.channel_id} ({self.state})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.pk,
            "fingerprint": self.fingerprint,
            "kind": self.kind,
            "binding": self.binding.name if self.binding_id and self.binding else None,
            "summary": self.summary,
            "details": self.details,
            "state": self.state,
            "first_seen": self.first_seen.isoformat(),
            "last_seen": self.last_seen.isoformat(),
            "resolved_at": self.resolved_at.isoformat() if self.resolved_at else None,
            "count": self.count,
        }


class Delivery(models.Model):
    OPENED = "opened"
    RESOLVED = "resolved"
    TEST = "test"
    NOTICE = "notice"
    EVENTS = [(OPENED, "opened"), (RESOLVED, "resolved"), (TEST, "test"), (NOTICE, "notice")]

    PENDING = "pending"
    SENDING = "sending"
    DELIVERED = "delivered"
    FAILED = "failed"
    SUPPRESSED = "suppressed"
    STATUSES = [
        (PENDING, "pending"),
        (SENDING, "sending"),
        (DELIVERED, "delivered"),
        (FAILED, "failed"),
        (SUPPRESSED, "suppressed"),
    ]

    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="deliveries")
    alert = models.ForeignKey(Alert, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=10, choices=EVENTS)
    payload = models.JSONField(help_text="the body sent on every attempt")
    status = models.CharField(max_length=12, choices=STATUSES, default=PENDING)
    attempts = models.PositiveIntegerField(default=0)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    permanent_error = models.BooleanField(default=False)
    duration_ms = models.PositiveIntegerField(null=True, blank=True, help_text="of the last attempt")
    created_at = models.DateTimeField(auto_now_add=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["channel", "-created_at"], name="deliveries_channel_created")]
        verbose_name_plural = "deliveries"

    def __str__(self) -> str:
        return f"{self.event} to {self.channel_id}: {self.status}"
