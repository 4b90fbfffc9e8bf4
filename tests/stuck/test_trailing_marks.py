"""The consumer ledger's tail read before a `skipped` verdict (pure parts)."""

from __future__ import annotations

from auditor.stuck.kafka_view import LedgerRange
from auditor.stuck.trailing_marks import ledger_tail


def test_the_tail_is_what_was_written_past_the_first_reads_ends() -> None:
    first = LedgerRange("ledger", {0: (0, 40), 1: (5, 5), 2: (0, 12)})
    now = LedgerRange("ledger", {0: (0, 43), 1: (5, 5), 2: (0, 12), 3: (0, 2)})
    # partition 0 grew, 1 and 2 did not, 3 is new (read from its start)
    assert ledger_tail(first, now) == {0: (40, 43), 3: (0, 2)}


def test_a_tail_whose_start_retention_deleted_starts_at_the_log_start() -> None:
    assert ledger_tail(LedgerRange("ledger", {0: (0, 10)}), LedgerRange("ledger", {0: (15, 20)})) == {0: (15, 20)}
