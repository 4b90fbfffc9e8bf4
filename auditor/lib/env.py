"""Strict readers of environment variables: a bad value fails loudly at start-up."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit


class SettingError(ValueError):
    """An environment variable holds a value the auditor cannot use."""


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def envstr(name: str, default: str | None = None) -> str:
    value = os.environ.get(name, default)
    if value is None:
        raise SettingError(f"environment variable {name} is required")
    return value


def envbool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise SettingError(f"{name}={raw!r} is not a boolean (use true/false)")


def envint(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise SettingError(f"{name}={raw!r} is not an integer") from None


def envchoice(name: str, choices: tuple[str, ...], default: str) -> str:
    """One of `choices` (surrounding blanks ignored); unset or empty: `default`."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    if raw.strip() not in choices:
        raise SettingError(f"{name}={raw!r} is not one of {', '.join(choices)}")
    return raw.strip()


def envlist(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [part.strip() for part in raw.split(",") if part.strip()]


def envsecret(name: str, default: str | None = None) -> str:
    """A secret: required unless a default is given; never echoed in errors."""
    value = os.environ.get(name, default)
    if not value:
        raise SettingError(f"environment variable {name} (a secret) is required")
    return value


def database_from_url(url: str, name: str = "DATABASE_URL") -> dict[str, object]:
    """Django DATABASES entry from a postgresql:// URL."""
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql"}:
        raise SettingError(f"{name} must be a postgresql:// URL, got scheme {parts.scheme!r}")
    if not parts.path.strip("/"):
        raise SettingError(f"{name} names no database")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "127.0.0.1",
        "PORT": str(parts.port or 5432),
        "CONN_MAX_AGE": 0,
    }


def load_env_file(path: Path) -> None:
    """Fill os.environ from a KEY=VALUE file (as written by stack.sh), without overriding."""
    if not path.exists():
        return
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        # A value quoted for the shell that sources the same file (e.g. a URL with &).
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        os.environ.setdefault(key.strip(), value)
