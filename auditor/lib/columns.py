"""What PostgreSQL's catalog says of a source table's column."""

from __future__ import annotations

import psycopg

_NAIVE = (
    "SELECT coalesce(nullif(t.typbasetype, 0), t.oid) = 'timestamp'::regtype FROM pg_attribute a "
    "JOIN pg_type t ON t.oid = a.atttypid WHERE a.attrelid = to_regclass(%s) AND a.attname = %s"
)


def holds_wall_clock_times(conn: psycopg.Connection, table: str, column: str) -> bool:
    """Whether `column` of `table` (a quoted, possibly schema-qualified name) is a `timestamp
    without time zone`, or a domain over one. False for any other type, or no such column."""
    row = conn.execute(_NAIVE, [table, column]).fetchone()
    return bool(row and row[0])
