"""The zone a binding's timestamp-without-time-zone columns are read in: its own
`timestamp_zone`, or the source database's TimeZone setting when it names none (what the
database itself takes such values in, as `now()` and comparisons with instants do)."""

from __future__ import annotations

import psycopg

from auditor.pipelines.models import Binding
from spark_jobs.binding import BindingError, check_zone


def source_zone(binding: Binding, timeout_s: float = 5.0) -> tuple[str, str | None]:
    """(an IANA zone name, a note when the database's could not be taken)."""
    if binding.timestamp_zone:
        return binding.timestamp_zone, None
    try:
        with psycopg.connect(
            binding.source.resolved_url(), connect_timeout=max(1, int(timeout_s)), application_name="auditor-zone"
        ) as conn:
            row = conn.execute("SHOW TimeZone").fetchone()
    except psycopg.Error as exc:
        return "UTC", f"the source database's TimeZone could not be read ({type(exc).__name__}): UTC assumed"
    name = str(row[0]) if row else ""
    try:
        return check_zone(name, f"binding {binding.name!r}"), None
    except BindingError:
        return "UTC", (
            f"the source database's TimeZone {name!r} is no IANA zone name: timestamps without a time zone are read "
            "as UTC (set the binding's timestamp_zone)"
        )
