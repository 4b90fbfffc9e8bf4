"""Selecting stuck rows and re-checking them, against the real source database: the re-check
by row address (ctid) must give exactly what a re-check by key gives."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import sql

from auditor.stuck.source import (
    CLOCK_DRIFT_MS,
    SourceClock,
    StuckQuery,
    read_source_clock,
    select_stuck_rows,
    still_stuck,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def table() -> Iterator[str]:
    url = os.environ["SOURCE_DATABASE_URL"]
    name = f"stuck_source_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (ticket_id text, status text NOT NULL, note text, created_at timestamptz NOT NULL)"
            ).format(sql.Identifier(name))
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO {} SELECT 'T-' || g, CASE WHEN g % 2 = 0 THEN 'NEW' ELSE 'DONE' END, '', "
                "now() - interval '1 hour' + g * interval '1 second' FROM generate_series(1, 20) g"
            ).format(sql.Identifier(name))
        )
    yield name
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP VIEW IF EXISTS {}").format(sql.Identifier(f"{name}_v")))
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))


def _query(table: str) -> StuckQuery:
    return StuckQuery(table, "ticket_id", "status", "created_at", ("NEW",), 0)


def _change(table: str, statement: str) -> None:
    with psycopg.connect(os.environ["SOURCE_DATABASE_URL"], autocommit=True) as conn:
        conn.execute(sql.SQL(statement).format(sql.Identifier(table)))


def test_it_rechecks_rows_at_their_address_and_moved_rows_by_key(table: str) -> None:
    url = os.environ["SOURCE_DATABASE_URL"]
    rows, truncated = select_stuck_rows(url, _query(table))
    assert not truncated and [r.key for r in rows] == [f"T-{g}" for g in range(2, 21, 2)]
    assert all(r.row_id for r in rows)

    _change(table, "UPDATE {} SET status = 'DONE' WHERE ticket_id = 'T-2'")  # processed meanwhile
    _change(table, "UPDATE {} SET note = 'touched' WHERE ticket_id = 'T-4'")  # moved, still NEW
    _change(table, "DELETE FROM {} WHERE ticket_id = 'T-6'")
    _change(table, "UPDATE {} SET ticket_id = 'T-8b' WHERE ticket_id = 'T-8'")  # its key changed
    _change(table, "INSERT INTO {} VALUES ('T-10', 'NEW', 'copy', now())")  # a second row, same key

    keys = [r.key for r in rows]
    by_address = still_stuck(url, _query(table), keys, {r.key: r.row_id for r in rows})
    by_key = still_stuck(url, _query(table), keys)

    assert by_address == by_key == set(keys) - {"T-2", "T-6", "T-8"}


def test_it_selects_and_rechecks_a_view_by_key(table: str) -> None:
    url = os.environ["SOURCE_DATABASE_URL"]
    view = f"{table}_v"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE VIEW {} AS SELECT * FROM {}").format(sql.Identifier(view), sql.Identifier(table)))

    rows, _ = select_stuck_rows(url, _query(view))

    assert len(rows) == 10 and all(r.row_id is None for r in rows)
    _change(table, "UPDATE {} SET status = 'DONE' WHERE ticket_id = 'T-2'")
    keys = [r.key for r in rows]
    assert still_stuck(url, _query(view), keys, {r.key: r.row_id for r in rows}) == set(keys) - {"T-2"}


def test_it_rechecks_a_partitioned_table_by_key(table: str) -> None:
    url = os.environ["SOURCE_DATABASE_URL"]
    parted = f"{table}_p"
    with psycopg.connect(url, autocommit=True) as conn:
        ident = sql.Identifier(parted)
        conn.execute(
            sql.SQL("CREATE TABLE {} (LIKE {}) PARTITION BY LIST (status)").format(ident, sql.Identifier(table))
        )
        for status in ("NEW", "DONE"):
            part = sql.Identifier(f"{parted}_{status.lower()}")
            conn.execute(sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES IN ({})").format(part, ident, status))
        conn.execute(sql.SQL("INSERT INTO {} SELECT * FROM {}").format(ident, sql.Identifier(table)))
    try:
        rows, _ = select_stuck_rows(url, _query(parted))
        assert len(rows) == 10 and all(r.row_id is None for r in rows)
        _change(parted, "UPDATE {} SET status = 'DONE' WHERE ticket_id = 'T-2'")  # moves to the other partition
        keys = [r.key for r in rows]
        assert still_stuck(url, _query(parted), keys, {r.key: r.row_id for r in rows}) == set(keys) - {"T-2"}
    finally:
        _change(parted, "DROP TABLE {}")


@pytest.mark.parametrize("session_zone", ["UTC", "America/New_York", "Asia/Tokyo"])
def test_an_age_column_without_a_time_zone_is_read_in_the_bindings_zone(session_zone: str) -> None:
    """The application writes Tokyo wall-clock times into a `timestamp` column. Ground truth:
    the instants it wrote (now() less 30 min and less 2 min, as the database's own clock). Read
    in Asia/Tokyo, the older row is stuck (older than 10 min) and its age is 30 min, whatever
    the database session's TimeZone; read as UTC (the default, and the only reading before),
    both rows lie nine hours in the future and neither is stuck."""
    url = os.environ["SOURCE_DATABASE_URL"]
    name = f"stuck_naive_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE TABLE {} (ticket_id text, status text, created_at timestamp(3) NOT NULL)").format(
                sql.Identifier(name)
            )
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO {} VALUES ('T-old', 'NEW', (now() - interval '30 minutes') AT TIME ZONE 'Asia/Tokyo'), "
                "('T-new', 'NEW', (now() - interval '2 minutes') AT TIME ZONE 'Asia/Tokyo')"
            ).format(sql.Identifier(name))
        )
    session_url = f"{url}{'&' if '?' in url else '?'}options=-c%20TimeZone%3D{session_zone.replace('/', '%2F')}"
    try:
        tokyo = StuckQuery(name, "ticket_id", "status", "created_at", ("NEW",), 600, timestamp_zone="Asia/Tokyo")
        rows, _ = select_stuck_rows(session_url, tokyo)
        assert [r.key for r in rows] == ["T-old"]
        assert 30 * 60 - 5 < rows[0].age_seconds < 30 * 60 + 60
        assert rows[0].since is not None and rows[0].since.tzinfo is not None
        assert abs(datetime.now(UTC) - timedelta(minutes=30) - rows[0].since) < timedelta(seconds=60)

        as_utc = StuckQuery(name, "ticket_id", "status", "created_at", ("NEW",), 600, timestamp_zone="UTC")
        assert select_stuck_rows(session_url, as_utc)[0] == []

        # A binding that names no zone reads them in the database session's TimeZone, as
        # PostgreSQL itself does (the only reading before the setting existed).
        unnamed = StuckQuery(name, "ticket_id", "status", "created_at", ("NEW",), 600)
        rows, _ = select_stuck_rows(session_url, unnamed)
        # (Tokyo wall-clock times read in UTC or New York time lie hours in the future)
        assert [r.key for r in rows] == (["T-old"] if session_zone == "Asia/Tokyo" else [])
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))


def test_the_source_clock_is_off_only_beyond_its_readings_uncertainty_and_drift() -> None:
    assert SourceClock(CLOCK_DRIFT_MS + 40, 50).ahead_ms == 0  # within a round trip and a second
    assert SourceClock(-(CLOCK_DRIFT_MS + 40), 50).ahead_ms == 0
    # beyond them: the far end of what the reading allows
    assert SourceClock(1_200_000, 50).ahead_ms == 1_200_050
    assert SourceClock(-1_200_000, 50).ahead_ms == -1_200_050
    assert "1200.1s ahead of the auditor's" in SourceClock(1_200_000, 100).describe()
    assert "1200.1s behind the auditor's" in SourceClock(-1_200_000, 100).describe()


def test_it_reads_the_source_clock_against_its_own() -> None:
    # the test database runs on this host: one clock, read within the round trip
    clock = read_source_clock(os.environ["SOURCE_DATABASE_URL"])
    assert abs(clock.offset_ms) <= clock.uncertainty_ms + 5 and clock.ahead_ms == 0, clock
