"""Selecting stuck rows and re-checking them, against the real source database: the re-check
by row address (ctid) must give exactly what a re-check by key gives."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from auditor.stuck.source import StuckQuery, select_stuck_rows, still_stuck

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
