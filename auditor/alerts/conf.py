"""Alerting settings.

Each is read from django.conf.settings when settings.py declares it; until then the
same-named environment variable is read with the strict helpers of auditor.lib.env,
so the Celery worker and the web server see the same value as the process that
started them.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from auditor.lib.env import SettingError, envbool, envstr


def _setting(name: str, default: Any, read_env: Any) -> Any:
    value = getattr(settings, name, None)
    return read_env(name, default) if value is None else value


def _envfloat(name: str, default: float) -> float:
    raw = envstr(name, str(default))
    try:
        return float(raw)
    except ValueError:
        raise SettingError(f"{name}={raw!r} is not a number") from None


def _envint(name: str, default: int) -> int:
    raw = envstr(name, str(default))
    try:
        return int(raw)
    except ValueError:
        raise SettingError(f"{name}={raw!r} is not an integer") from None


def allow_private() -> bool:
    """Whether webhooks may reach loopback, private, link-local and other non-public addresses."""
    return bool(_setting("AUDITOR_WEBHOOK_ALLOW_PRIVATE", False, envbool))


def rate_limit_per_minute() -> int:
    """Deliveries a channel may send per minute (opened and notice events; resolved are exempt)."""
    return int(_setting("AUDITOR_WEBHOOK_RATE_LIMIT_PER_MINUTE", 20, _envint))


def max_attempts() -> int:
    return max(1, int(_setting("AUDITOR_WEBHOOK_MAX_ATTEMPTS", 4, _envint)))


def backoff_seconds() -> float:
    """First retry delay; doubled for each further retry, capped at 60 s."""
    return float(_setting("AUDITOR_WEBHOOK_BACKOFF_SECONDS", 2.0, _envfloat))


def timeout_seconds() -> float:
    return float(_setting("AUDITOR_WEBHOOK_TIMEOUT_SECONDS", 10.0, _envfloat))
