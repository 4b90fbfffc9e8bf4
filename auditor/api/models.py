"""Per-user API tokens, hashed at rest.

The raw token (``kda_`` + 32 random bytes, URL-safe base64) is shown once, when it
is created. The database keeps its SHA-256 and a short prefix that lets people tell
their tokens apart; a leaked database dump therefore holds no usable token.
"""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.db import models


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiToken(models.Model):
    READ = "read"
    WRITE = "write"
    SCOPES = [(READ, "read"), (WRITE, "read and write")]

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, help_text="what the token is for")
    prefix = models.CharField(max_length=16, help_text="the first characters of the token, to recognise it")
    token_hash = models.CharField(max_length=64, unique=True)
    scope = models.CharField(max_length=10, choices=SCOPES, default=READ)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name}, {self.scope})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def as_dict(self) -> dict[str, object]:
        return {
            "id": self.pk,
            "name": self.name,
            "prefix": self.prefix,
            "scope": self.scope,
            "created_at": self.created_at.isoformat(),
            "last_used_at": self.last_used_at.isoformat() if self.last_used_at else None,
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
        }
