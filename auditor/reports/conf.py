"""Report settings: read from django.conf.settings when declared there, else the environment.

E-mail uses Django's own EMAIL_* settings (EMAIL_HOST, EMAIL_PORT, EMAIL_HOST_USER,
EMAIL_HOST_PASSWORD, EMAIL_USE_TLS, DEFAULT_FROM_EMAIL); reports are e-mailed only when
EMAIL_HOST is set explicitly (Django's default of "localhost" does not count: a server
without a mail relay would otherwise fail every delivery).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from auditor.lib.env import SettingError, envstr

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
DEFAULT_MAX_CSV_ROWS = 100_000


def _setting(name: str, default: Any) -> Any:
    value = getattr(settings, name, None)
    return envstr(name, str(default)) if value is None else value


def base_url() -> str:
    """Where the dashboard is reached, for the links sent in webhooks and e-mails."""
    return str(_setting("AUDITOR_BASE_URL", DEFAULT_BASE_URL)).rstrip("/")


def max_csv_rows() -> int:
    """Rows of a report's CSV at most (a binding with a million findings must not fill the database)."""
    raw = _setting("AUDITOR_REPORT_MAX_CSV_ROWS", DEFAULT_MAX_CSV_ROWS)
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise SettingError(f"AUDITOR_REPORT_MAX_CSV_ROWS={raw!r} is not an integer") from None
    if value < 1:
        raise SettingError(f"AUDITOR_REPORT_MAX_CSV_ROWS must be at least 1, got {value}")
    return value


def email_host() -> str:
    """EMAIL_HOST when the settings set it on purpose (not Django's default); else the empty string."""
    # LazySettings forwards is_overridden to Settings; django-stubs' plugin types settings without it.
    if settings.is_overridden("EMAIL_HOST"):  # type: ignore[misc]
        return str(getattr(settings, "EMAIL_HOST", "") or "")
    return ""


def from_email() -> str:
    return str(getattr(settings, "DEFAULT_FROM_EMAIL", "") or "auditor@localhost")
