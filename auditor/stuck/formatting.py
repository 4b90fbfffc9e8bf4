"""How ages and counts read on the page and in the CLI table."""

from __future__ import annotations

from datetime import datetime


def format_age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def format_moment(value: str | None) -> str:
    """An ISO timestamp as 'YYYY-MM-DD HH:MM:SS' (UTC), '' for none."""
    if not value:
        return ""
    return datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M:%S")
