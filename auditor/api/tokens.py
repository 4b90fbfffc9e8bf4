"""Create, authenticate and revoke API tokens."""

from __future__ import annotations

import secrets
from datetime import timedelta

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from auditor.api.models import ApiToken, hash_token

TOKEN_PREFIX = "kda_"
VISIBLE_CHARS = 12  # "kda_" and 8 random characters
# last_used_at is a hint for people, not an audit log: write it at most once a minute.
LAST_USED_RESOLUTION = timedelta(seconds=60)


class TokenError(ValueError):
    pass


def create_token(user: User, name: str, scope: str) -> tuple[ApiToken, str]:
    """A new token for ``user``: the stored row and the raw token (returned only here)."""
    name = (name or "").strip()
    if not name:
        raise TokenError("name is required (what is the token for?)")
    if len(name) > 100:
        raise TokenError("name is longer than 100 characters")
    if scope not in (ApiToken.READ, ApiToken.WRITE):
        raise TokenError(f"scope {scope!r} must be 'read' or 'write'")
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user, name=name, scope=scope, prefix=raw[:VISIBLE_CHARS], token_hash=hash_token(raw)
        )
    return token, raw


def authenticate_token(raw: str) -> ApiToken | None:
    """The active token whose hash matches ``raw`` (its user loaded), or None."""
    if not raw or len(raw) > 200:
        return None
    token = (
        ApiToken.objects.select_related("user")
        .filter(token_hash=hash_token(raw), revoked_at=None, user__is_active=True)
        .first()
    )
    if token is None:
        return None
    now = timezone.now()
    ApiToken.objects.filter(pk=token.pk).filter(
        Q(last_used_at=None) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
    ).update(last_used_at=now)
    return token


def revoke_token(token: ApiToken) -> bool:
    """Revoke ``token``; False when it was already revoked."""
    updated = ApiToken.objects.filter(pk=token.pk, revoked_at=None).update(revoked_at=timezone.now())
    token.refresh_from_db()
    return updated == 1
