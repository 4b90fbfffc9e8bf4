"""Select a rule's stuck rows from the source-of-truth table (psycopg, quoted identifiers).

Identifiers come from the rule and its binding; each is validated and quoted before it
reaches SQL, and the stuck values and the threshold travel as parameters.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import psycopg
from psycopg import sql

from auditor.lib.columns import holds_wall_clock_times
from auditor.lib.identifiers import IdentifierError, validate_identifier, validate_table_name
from auditor.lib.secrets import mask_db_error
from auditor.stuck.evidence import StuckRow
from spark_jobs.binding import ZONE_SHIFT
from spark_jobs.kafka_security import explain

DEFAULT_MAX_ITEMS = 200_000
CHECK_CHUNK = 50_000
# The stuck rows are few but spread over most of a big table's pages: with PostgreSQL's
# default 4MB the bitmap of those pages turns lossy (every row of them is checked again) and
# the sort spills to disk, several times slower. Set for the selecting statement only.
SELECT_WORK_MEM = "64MB"
# Tables whose rows keep their physical address (ctid) until updated: ordinary tables. (A
# partitioned table's ctids repeat across partitions: each partition would be probed for all.)
_ROW_ID_KINDS = ("r",)
_PLAIN_TYPE = re.compile(r"[A-Za-z_][A-Za-z0-9_ ]*(\(\d+(,\d+)?\))?")


class SourceError(RuntimeError):
    """The source table cannot be queried (unreachable, unknown table or column, bad identifier)."""


@dataclass(frozen=True)
class StuckQuery:
    """A rule's stuck condition on its binding's table."""

    table: str
    key_column: str
    status_column: str
    age_column: str
    stuck_values: tuple[str, ...]
    older_than_seconds: int
    # the zone an age column without a time zone holds (Binding.timestamp_zone); "": the
    # database session's TimeZone
    timestamp_zone: str = ""
    # the binding's created column (when each row was created); "": none. The age column may
    # be another (updated_at, a status-since column): it says how long the row has been
    # stuck, not when it was created.
    created_column: str = ""

    def created_identifier(self) -> sql.Identifier | None:
        if not self.created_column:
            return None
        try:
            return sql.Identifier(validate_identifier(self.created_column, "created_column"))
        except IdentifierError as exc:
            raise SourceError(str(exc)) from None

    def identifiers(self) -> tuple[sql.Identifier, sql.Identifier, sql.Identifier, sql.Identifier]:
        try:
            schema, table = validate_table_name(self.table)
            columns = [
                validate_identifier(self.key_column, "key_column"),
                validate_identifier(self.status_column, "status_column"),
                validate_identifier(self.age_column, "age_column"),
            ]
        except IdentifierError as exc:
            raise SourceError(str(exc)) from None
        table_id = sql.Identifier(schema, table) if schema else sql.Identifier(table)
        # ignore: the three validated columns make four; mypy cannot count a starred generator.
        return table_id, *(sql.Identifier(c) for c in columns)  # type: ignore[return-value]

    def status_list(self) -> sql.Composed:
        if not self.stuck_values:
            raise SourceError("the rule has no stuck_values")
        # Untyped parameters: PostgreSQL reads them as the status column's type (text, enum, int).
        return sql.SQL(", ").join(sql.Placeholder() for _ in self.stuck_values)


def _connect(url: str) -> psycopg.Connection:
    try:
        return psycopg.connect(url, autocommit=True, application_name="auditor-stuck", connect_timeout=10)
    except psycopg.ProgrammingError as exc:  # libpq could not parse the URL or an option in it
        raise SourceError(f"its URL is not valid: {mask_db_error(exc, url)}") from None
    except psycopg.Error as exc:
        raise SourceError(f"the source database cannot be reached: {explain(mask_db_error(exc, url))}") from None


def select_stuck_rows(url: str, query: StuckQuery, max_items: int = DEFAULT_MAX_ITEMS) -> tuple[list[StuckRow], bool]:
    """The stuck rows, oldest first, at most ``max_items``; and whether there were more.

    Each row carries its physical address (``row_id``, the ctid) where the table has one, so
    that still_stuck() can look it up there first."""
    table, key, status, age = query.identifiers()
    with _connect(url) as conn:
        try:
            row_id = sql.SQL("ctid::text") if _has_row_ids(conn, table) else sql.SQL("NULL::text")
            since, older = _age_terms(conn, table, age, query)
            created_column = query.created_identifier()
            created = (
                sql.SQL("NULL::timestamptz")
                if created_column is None
                else since
                if query.created_column == query.age_column
                else _instant(conn, table, created_column, query.created_column, query.timestamp_zone)
            )
            statement = sql.SQL(
                "SELECT {key}::text, {status}::text, EXTRACT(EPOCH FROM (now() - {since}))::float8, {since}, {row_id}, "
                "{created} FROM {table} WHERE {status} IN ({values}) AND {older} "
                "AND {key} IS NOT NULL ORDER BY {age}, {key} LIMIT %s"
            ).format(
                key=key,
                status=status,
                age=age,
                since=since,
                older=older,
                table=table,
                values=query.status_list(),
                row_id=row_id,
                created=created,
            )
            params = [*query.stuck_values, max_items + 1]
            with conn.transaction():  # SET LOCAL: this statement only, also behind a pooler
                conn.execute(sql.SQL("SET LOCAL work_mem = {}").format(sql.Literal(SELECT_WORK_MEM)))
                rows = conn.execute(statement, params).fetchall()
        except psycopg.Error as exc:
            raise SourceError(f"selecting stuck rows from {query.table} failed: {mask_db_error(exc, url)}") from None
    items = [
        StuckRow(str(k), str(s), float(a), since, rid, created) for k, s, a, since, rid, created in rows[:max_items]
    ]
    return items, len(rows) > max_items


# A source clock off the auditor's by less than this (beyond the reading's uncertainty) is
# ordinary drift, left to the verdicts' clock margin.
CLOCK_DRIFT_MS = 1000


@dataclass(frozen=True)
class SourceClock:
    """The source database's clock against the auditor's, read once (read_source_clock)."""

    offset_ms: int  # the source's clock minus the auditor's, at the middle of the reading
    uncertainty_ms: int  # half the reading's round trip: the offset is right within it

    @property
    def ahead_ms(self) -> int:
        """How far the source's clock is ahead of the auditor's (negative: behind), at the far
        end of the reading's uncertainty; 0 within it and ordinary drift."""
        if abs(self.offset_ms) <= self.uncertainty_ms + CLOCK_DRIFT_MS:
            return 0
        return self.offset_ms + (self.uncertainty_ms if self.offset_ms > 0 else -self.uncertainty_ms)

    def describe(self) -> str:
        ahead = self.ahead_ms
        if ahead > 0:
            return (
                f"the source database's clock is {ahead / 1000:.1f}s ahead of the auditor's: its rows are judged as "
                "created that much earlier"
            )
        return (
            f"the source database's clock is {-ahead / 1000:.1f}s behind the auditor's: a row's send is judged as "
            "possibly that much younger"
        )


def read_source_clock(url: str) -> SourceClock:
    """The source database's clock (clock_timestamp(), the time it stamps rows by with now()
    or a default) against this host's, which reads Kafka's timestamps."""
    with _connect(url) as conn:
        try:
            before = time.time()
            row = conn.execute("SELECT clock_timestamp()").fetchone()
            after = time.time()
        except psycopg.Error as exc:
            raise SourceError(f"reading the source database's clock failed: {mask_db_error(exc, url)}") from None
    assert row is not None  # a SELECT without FROM returns one row
    middle_ms = (before + after) * 500
    return SourceClock(round(row[0].timestamp() * 1000 - middle_ms), round((after - before) * 500))


SHIFT = sql.SQL("interval {}").format(sql.Literal(ZONE_SHIFT))


def _age_terms(
    conn: psycopg.Connection, table: sql.Identifier, age: sql.Identifier, query: StuckQuery
) -> tuple[sql.Composable, sql.Composable]:
    """(the age column as an instant, the condition that the row is older than the rule's
    threshold). A column without a time zone (or a domain over one) holds wall-clock times in
    the binding's timestamp_zone, or the database session's TimeZone when it names none: it
    is read, and judged, as instants there. The bare column is also held to the threshold as
    a wall-clock time there, widened by more than any clock change, so that an index on it
    serves; the instant decides."""
    threshold = sql.SQL("(now() - make_interval(secs => {}))").format(sql.Literal(int(query.older_than_seconds)))
    if not holds_wall_clock_times(conn, table.as_string(conn), query.age_column):
        return age, sql.SQL("{} < {}").format(age, threshold)
    zone = sql.Literal(query.timestamp_zone) if query.timestamp_zone else sql.SQL("current_setting('TimeZone')")
    since = sql.SQL("({} AT TIME ZONE {})").format(age, zone)
    return since, sql.SQL("{since} < {threshold} AND {age} < ({threshold} AT TIME ZONE {zone}) + {shift}").format(
        since=since, threshold=threshold, age=age, zone=zone, shift=SHIFT
    )


def _instant(
    conn: psycopg.Connection, table: sql.Identifier, column: sql.Identifier, name: str, timestamp_zone: str
) -> sql.Composable:
    """The column as an instant: one without a time zone read as wall-clock times in the
    binding's timestamp_zone (else the database session's TimeZone), as _age_terms does."""
    if not holds_wall_clock_times(conn, table.as_string(conn), name):
        return column
    zone = sql.Literal(timestamp_zone) if timestamp_zone else sql.SQL("current_setting('TimeZone')")
    return sql.SQL("({} AT TIME ZONE {})").format(column, zone)


def _has_row_ids(conn: psycopg.Connection, table: sql.Identifier) -> bool:
    """Whether ``table`` is an ordinary table (views and foreign tables have no ctid)."""
    row = conn.execute(
        "SELECT relkind::text FROM pg_class WHERE oid = %s::regclass", [table.as_string(conn)]
    ).fetchone()
    return row is not None and row[0] in _ROW_ID_KINDS


def _column_type(conn: psycopg.Connection, table: sql.Identifier, column: str) -> str | None:
    """The column's type as PostgreSQL spells it (e.g. bigint, text), from the catalog."""
    row = conn.execute(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass AND attname = %s",
        [table.as_string(conn), column],
    ).fetchone()
    name = row[0] if row else None
    # Only plain type names reach the SQL below; anything else compares as text.
    return name if name and _PLAIN_TYPE.fullmatch(name) else None


def still_stuck(
    url: str, query: StuckQuery, keys: Iterable[str], row_ids: Mapping[str, str | None] | None = None
) -> set[str]:
    """Of ``keys``, those whose row is still in a stuck status (a re-check after the evidence
    was gathered: a ticket processed meanwhile is not reported).

    ``row_ids`` (key -> the ctid select_stuck_rows() read it at): a row still there, with the
    same key and a stuck status, is confirmed without its key's index; an updated row has
    moved (a new version, a new ctid) and is looked up by key like the rest."""
    table, key, status, _ = query.identifiers()
    wanted = list(keys)
    found: set[str] = set()
    with _connect(url) as conn:
        try:
            if row_ids:
                found = _still_at_row_ids(conn, query, table, {k: row_ids.get(k) for k in wanted})
                wanted = [k for k in wanted if k not in found]
            key_type = _column_type(conn, table, query.key_column)
            # Keys came out of the column as text; cast back to its type so its index is used.
            joined = sql.SQL("t.{key} = u.k::{type}").format(key=key, type=sql.SQL(key_type)) if key_type else None
            statement = sql.SQL(
                "SELECT u.k FROM unnest(%s::text[]) AS u(k) JOIN {table} AS t ON {join} WHERE t.{status} IN ({values})"
            ).format(
                table=table,
                join=joined or sql.SQL("t.{key}::text = u.k").format(key=key),
                status=status,
                values=query.status_list(),
            )
            for start in range(0, len(wanted), CHECK_CHUNK):
                chunk = wanted[start : start + CHECK_CHUNK]
                found.update(r[0] for r in conn.execute(statement, [chunk, *query.stuck_values]).fetchall())
        except psycopg.Error as exc:
            raise SourceError(f"re-checking stuck rows in {query.table} failed: {mask_db_error(exc, url)}") from None
    return found


def _still_at_row_ids(
    conn: psycopg.Connection, query: StuckQuery, table: sql.Identifier, row_ids: dict[str, str | None]
) -> set[str]:
    """Keys whose row is still at its ctid with that key and a stuck status (a TID scan)."""
    _, key, status, _ = query.identifiers()
    by_key = {k: rid for k, rid in row_ids.items() if rid}
    if not by_key:
        return set()
    # The addresses go through a scalar subquery: shown the array itself, the planner prices
    # that many TID look-ups above a scan of the whole table (or of the status index). They
    # travel in binary (%b): no quoting of each one.
    statement = sql.SQL(
        "SELECT t.ctid::text, t.{key}::text FROM {table} AS t WHERE t.ctid = ANY((SELECT %b::text[]::tid[])::tid[]) "
        "AND t.{status} IN ({values})"
    ).format(key=key, table=table, status=status, values=query.status_list())
    addresses = list(by_key.values())
    found: set[str] = set()
    for start in range(0, len(addresses), CHECK_CHUNK):
        chunk = addresses[start : start + CHECK_CHUNK]
        for rid, k in conn.execute(statement, [chunk, *query.stuck_values], binary=True).fetchall():
            if by_key.get(k) == rid:
                found.add(k)
    return found
