"""state.json's `unprobed_record_ms` (docs/contracts.md), read by reconciliation and by the
stuck diagnosis alike (pure Python: the web and worker processes read it without Spark)."""

from __future__ import annotations

from datetime import datetime
from typing import Any


def unprobed_of(data: dict[str, Any]) -> int | None:
    """The latest timestamp (ms) of a record without any audit header that a run read (a
    producer that is not probed writes to the topic); None when none was, or no run has.

    A state written before it was kept says nothing of the records its runs read: as if one
    without audit headers was written at its last read (read_at_ms, else its window's upper
    bound). ValueError when malformed."""
    if "unprobed_record_ms" in data:
        found = data["unprobed_record_ms"]
        if found is not None and (isinstance(found, bool) or not isinstance(found, int)):
            raise ValueError(f"state.json's unprobed_record_ms is not a timestamp: {found!r}")
        return found
    if not data.get("run_id"):
        return None
    try:
        if data.get("read_at_ms") is not None:
            return int(data["read_at_ms"])
        upper = data.get("window_upper")
        return int(datetime.fromisoformat(upper).timestamp() * 1000) if upper else None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"state.json's read_at_ms or window_upper is malformed ({exc!r})") from exc
