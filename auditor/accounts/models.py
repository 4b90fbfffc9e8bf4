"""Acknowledgements: who acknowledged or muted what, when and why.

Keyed by (kind, key) rather than a foreign key so that any app can acknowledge
anything it can name: a finding row written by Spark, a stuck item, an alerting
problem's fingerprint. Rows are history: a new acknowledgement supersedes the
previous one, withdrawing one keeps it (with who withdrew it and when).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


class Acknowledgement(models.Model):
    ACK = "ack"
    MUTE = "mute"
    ACTIONS = [(ACK, "acknowledged"), (MUTE, "muted")]

    kind = models.SlugField(max_length=50, help_text="what is acknowledged, e.g. problem, finding, stuck-item")
    key = models.CharField(max_length=300, help_text="which one, within the kind")
    action = models.CharField(max_length=10, choices=ACTIONS)
    reason = models.TextField()
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="acknowledgements"
    )
    username = models.CharField(max_length=150, help_text="kept when the user is deleted")
    created_at = models.DateTimeField(auto_now_add=True)
    mute_until = models.DateTimeField(null=True, blank=True, help_text="a mute without an end lasts until withdrawn")
    withdrawn_at = models.DateTimeField(null=True, blank=True)
    withdrawn_by = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["kind", "key", "-created_at"], name="ack_kind_key_created")]

    def __str__(self) -> str:
        return f"{self.get_action_display()} {self.kind}:{self.key} by {self.username}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.pk,
            "kind": self.kind,
            "key": self.key,
            "action": self.action,
            "reason": self.reason,
            "by": self.username,
            "at": self.created_at.isoformat(),
            "mute_until": self.mute_until.isoformat() if self.mute_until else None,
        }
