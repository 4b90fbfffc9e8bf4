"""The source-of-truth tables: created idempotently, names validated before they reach SQL."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from auditor.demo.store import ApplyOutcome, TicketStore
from auditor.lib.identifiers import IdentifierError


@pytest.mark.integration
def test_it_creates_the_schema_idempotently(source_url: str) -> None:
    suffix = uuid.uuid4().hex[:10]
    with TicketStore(source_url, f"public.tickets_{suffix}", f"processed_{suffix}") as store:
        try:
            store.ensure_schema()
            ticket = store.insert_ticket({"subject": "a"})
            store.ensure_schema()  # again: nothing lost
            assert store.statuses() == {ticket.ticket_id: "NEW"}
            assert ticket.ticket_id == f"TCK-{ticket.id}"
            assert store.apply_once("g", ticket.ticket_id, "t", 0, 0) is ApplyOutcome.APPLIED
            assert store.apply_once("g", ticket.ticket_id, "t", 0, 1) is ApplyOutcome.DUPLICATE
            assert store.mark_done("TCK-0") is ApplyOutcome.UNKNOWN
            assert store.processed_keys("g") == {ticket.ticket_id: ("t", 0, 0)}
            with pytest.raises(psycopg.errors.CheckViolation):
                store.conn.execute(f"UPDATE tickets_{suffix} SET status = 'LOST'")
        finally:
            store.drop_tables()


@pytest.mark.parametrize("name", ["tickets; DROP TABLE x", "a.b.c", "1tickets", ""])
def test_it_rejects_invalid_table_names(name: str) -> None:
    with pytest.raises(IdentifierError):
        TicketStore("postgresql://nowhere.invalid/db", name)  # refused before any connection
    with pytest.raises(IdentifierError):
        TicketStore("postgresql://nowhere.invalid/db", "tickets", name)
