"""Evidence (findings, stuck items) as a few readable fields; pages keep the raw JSON behind a toggle."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

MAX_FIELDS = 8
MAX_LIST = 4
MAX_TEXT = 80


def _label(name: str) -> str:
    return name.replace("_", " ")


def _time_ms(value: Any) -> str:
    try:
        return datetime.fromtimestamp(int(value) / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (TypeError, ValueError, OverflowError, OSError):
        return str(value)


def _short(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        if "partition" in value and "offset" in value:
            where = f"{value['partition']}@{value['offset']}"
            extra = value.get("state") or value.get("status") or ""
            return f"{where} {extra}".strip()
        inner = ", ".join(f"{_label(k)} {_short(v)}" for k, v in list(value.items())[:MAX_LIST])
        return inner + (" …" if len(value) > MAX_LIST else "")
    if isinstance(value, list):
        shown = ", ".join(_short(v) for v in value[:MAX_LIST])
        more = f" (+{len(value) - MAX_LIST} more)" if len(value) > MAX_LIST else ""
        return f"{shown}{more}" if value else "none"
    text = str(value)
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "…"


def readable_fields(evidence: Any, skip: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(label, short value) pairs of an evidence object: times in words, positions as p@o, lists cut short.

    ``skip``: top-level fields the page already shows in a column of its own.
    """
    if evidence is None:
        return []
    if not isinstance(evidence, dict):
        return [("value", _short(evidence))]
    fields = []
    for name, value in evidence.items():
        if name in skip:
            continue
        if name.endswith("_ms") and isinstance(value, int | float) and name not in ("retention_ms",) and value > 1e11:
            shown = _time_ms(value)
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            shown = f"{len(value)}: {_short(value)}"
        else:
            shown = _short(value)
        fields.append((_label(name), shown))
    if len(fields) > MAX_FIELDS:
        fields = [*fields[:MAX_FIELDS], ("…", f"{len(fields) - MAX_FIELDS} more fields in the raw JSON")]
    return fields
