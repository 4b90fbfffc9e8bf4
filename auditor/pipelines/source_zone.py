"""The zone a binding's created column is read in when it holds no time zone: the binding's
own `timestamp_zone`, or the source database's TimeZone setting when it names none (what the
database itself takes such values in, as `now()` and comparisons with instants do)."""

from __future__ import annotations

import psycopg

from auditor.lib.columns import holds_wall_clock_times
from auditor.lib.identifiers import IdentifierError, validate_identifier, validate_table_name
from auditor.lib.secrets import mask_db_error
from auditor.pipelines.models import Binding
from spark_jobs.binding import BindingError, check_zone

# The zone a created column with a time zone is "read in": none matters, one fixed name keeps
# the reconciliation state from starting over when the database's setting changes.
NOT_NEEDED = "UTC"


class SourceZoneError(RuntimeError):
    """The zone the created column's wall-clock times hold cannot be told."""


def source_zone(binding: Binding, timeout_s: float = 10.0) -> str:
    """The IANA zone reconciliation reads the binding's created column in. Raises
    SourceZoneError when the column holds no time zone, the binding names none, and the
    database's cannot be read or is no IANA name: reading it as UTC would shift every row."""
    try:
        schema, table = validate_table_name(binding.table)
        column = validate_identifier(binding.created_column, "created_column")
    except IdentifierError:
        return binding.timestamp_zone or NOT_NEEDED  # the job names what is wrong with them
    url = binding.source.resolved_url()
    try:
        with psycopg.connect(url, connect_timeout=max(1, int(timeout_s)), application_name="auditor-zone") as conn:
            if not holds_wall_clock_times(conn, f'"{schema}"."{table}"' if schema else f'"{table}"', column):
                return NOT_NEEDED  # an instant, or a column the job will find missing
            if binding.timestamp_zone:
                return binding.timestamp_zone
            row = conn.execute("SHOW TimeZone").fetchone()
    except psycopg.Error as exc:
        detail = mask_db_error(exc, url)
        raise SourceZoneError(
            f"binding {binding.name!r}: whether {binding.created_column} holds wall-clock times, and in which zone, "
            f"could not be read from source {binding.source.name}: {detail}"
        ) from None
    name = str(row[0]) if row else ""
    try:
        return check_zone(name, f"binding {binding.name!r}")
    except BindingError:
        raise SourceZoneError(
            f"binding {binding.name!r}: {binding.created_column} holds wall-clock times and the source database's "
            f"TimeZone {name!r} is no IANA zone name: set the binding's timestamp_zone"
        ) from None
