"""The demo's source-of-truth tables (PostgreSQL via psycopg 3).

``tickets`` holds one row per ticket (status NEW -> DONE); ``processed_keys`` is
the exactly-once mode's idempotency table, written in the same transaction as
the status update. Table names are parameters (tests use their own) and are
validated before they reach SQL, where they are always quoted.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Self

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from auditor.lib.identifiers import validate_table_name

STATUS_NEW = "NEW"
STATUS_DONE = "DONE"
TICKET_ID_PREFIX = "TCK-"


class ApplyOutcome(StrEnum):
    APPLIED = "applied"  # the status update committed
    DUPLICATE = "duplicate"  # the idempotency key was already there: skipped
    LOST = "lost"  # the update ran but was rolled back (the processed-not-updated fault)
    UNKNOWN = "unknown"  # no ticket row has this ticket_id


@dataclass(frozen=True)
class Ticket:
    id: int
    ticket_id: str
    created_at: datetime
    payload: dict[str, Any]


def _table_identifier(name: str) -> tuple[sql.Identifier, str]:
    """The quoted identifier of 'table' or 'schema.table', and a bare name for constraints."""
    schema, table = validate_table_name(name)
    if schema:
        return sql.Identifier(schema, table), table
    return sql.Identifier(table), table


class TicketStore:
    """One connection to the source database and the demo's two tables.

    Each client (producer, consumer) opens its own store; statements run in
    autocommit mode unless they need a transaction of their own.
    """

    def __init__(self, conninfo: str, table: str = "tickets", processed_table: str = "processed_keys") -> None:
        self.table = table
        self.processed_table = processed_table
        self._tickets, self._tickets_bare = _table_identifier(table)
        self._processed, self._processed_bare = _table_identifier(processed_table)
        self._conninfo = conninfo
        self._conn: psycopg.Connection[Any] | None = None

    @property
    def conn(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self._conninfo, autocommit=True, application_name="auditor-demo")
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- schema ---------------------------------------------------------------------
    def ensure_schema(self) -> None:
        """Create both tables and the stuck-query index if missing (idempotent)."""
        tickets, processed = self._tickets, self._processed
        statements = [
            sql.SQL(
                """CREATE TABLE IF NOT EXISTS {tickets} (
                    id bigserial PRIMARY KEY,
                    ticket_id text NOT NULL UNIQUE,
                    status text NOT NULL DEFAULT 'NEW' CONSTRAINT {status_check} CHECK (status IN ('NEW', 'DONE')),
                    created_at timestamptz NOT NULL DEFAULT now(),
                    updated_at timestamptz NOT NULL DEFAULT now(),
                    payload jsonb NOT NULL DEFAULT '{{}}'::jsonb
                )"""
            ).format(tickets=tickets, status_check=sql.Identifier(f"{self._tickets_bare}_status_check")),
            sql.SQL("CREATE INDEX IF NOT EXISTS {index} ON {tickets} (status, created_at)").format(
                index=sql.Identifier(f"{self._tickets_bare}_status_created_idx"), tickets=tickets
            ),
            sql.SQL(
                """CREATE TABLE IF NOT EXISTS {processed} (
                    consumer_group text NOT NULL,
                    idempotency_key text NOT NULL,
                    topic text NOT NULL,
                    "partition" integer NOT NULL,
                    "offset" bigint NOT NULL,
                    processed_at timestamptz NOT NULL DEFAULT now(),
                    PRIMARY KEY (consumer_group, idempotency_key)
                )"""
            ).format(processed=processed),
        ]
        with self.conn.transaction():
            for statement in statements:
                self.conn.execute(statement)

    def drop_tables(self) -> None:
        """Drop both tables (tests clean up with it; the demo never calls it)."""
        with self.conn.transaction():
            self.conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(self._tickets))
            self.conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(self._processed))

    # --- the producer's side ----------------------------------------------------------
    def insert_ticket(self, payload: dict[str, Any]) -> Ticket:
        """Insert one NEW ticket; its ticket_id is TCK-<id>. Committed on return."""
        sequence = self._tickets.as_string(self.conn)
        row = self.conn.execute(
            sql.SQL(
                """WITH next AS (SELECT nextval(pg_get_serial_sequence(%s, 'id')) AS id)
                INSERT INTO {tickets} (id, ticket_id, payload)
                SELECT id, %s || id, %s FROM next
                RETURNING id, ticket_id, created_at, payload"""
            ).format(tickets=self._tickets),
            (sequence, TICKET_ID_PREFIX, Jsonb(payload)),
        ).fetchone()
        assert row is not None  # INSERT ... RETURNING always returns the row
        return Ticket(id=row[0], ticket_id=row[1], created_at=row[2], payload=row[3])

    # --- the consumer's side ----------------------------------------------------------
    def mark_done(self, ticket_id: str, *, lose_update: bool = False) -> ApplyOutcome:
        """Set the ticket DONE in its own transaction; ``lose_update`` rolls it back."""
        with self.conn.transaction():
            if not self._update_status(ticket_id):
                return ApplyOutcome.UNKNOWN
            if lose_update:
                raise psycopg.Rollback()  # leaves the block without committing, no error
        return ApplyOutcome.LOST if lose_update else ApplyOutcome.APPLIED

    def apply_once(
        self,
        group: str,
        ticket_id: str,
        topic: str,
        partition: int,
        offset: int,
        *,
        lose_update: bool = False,
    ) -> ApplyOutcome:
        """Record the idempotency key and set DONE in one transaction; a known key is skipped."""
        unknown = False
        with self.conn.transaction():
            inserted = self.conn.execute(
                sql.SQL(
                    """INSERT INTO {processed} (consumer_group, idempotency_key, topic, "partition", "offset")
                    VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1"""
                ).format(processed=self._processed),
                (group, ticket_id, topic, partition, offset),
            ).fetchone()
            if inserted is None:
                return ApplyOutcome.DUPLICATE
            if not self._update_status(ticket_id):
                unknown = True
                raise psycopg.Rollback()  # no ticket: do not remember its key either
            if lose_update:
                raise psycopg.Rollback()
        if unknown:
            return ApplyOutcome.UNKNOWN
        return ApplyOutcome.LOST if lose_update else ApplyOutcome.APPLIED

    def _update_status(self, ticket_id: str) -> bool:
        cursor = self.conn.execute(
            sql.SQL("UPDATE {tickets} SET status = %s, updated_at = now() WHERE ticket_id = %s").format(
                tickets=self._tickets
            ),
            (STATUS_DONE, ticket_id),
        )
        return cursor.rowcount > 0

    # --- reading back ---------------------------------------------------------------
    def statuses(self) -> dict[str, str]:
        """ticket_id -> status for every ticket."""
        rows = self.conn.execute(sql.SQL("SELECT ticket_id, status FROM {} ORDER BY id").format(self._tickets))
        return {ticket_id: status for ticket_id, status in rows}

    def processed_keys(self, group: str) -> dict[str, tuple[str, int, int]]:
        """idempotency key -> (topic, partition, offset) that applied it, for one consumer group."""
        rows = self.conn.execute(
            sql.SQL('SELECT idempotency_key, topic, "partition", "offset" FROM {} WHERE consumer_group = %s').format(
                self._processed
            ),
            (group,),
        )
        return {key: (topic, partition, offset) for key, topic, partition, offset in rows}
