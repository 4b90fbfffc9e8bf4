"""late_rows.LookedUp: how far the deleted-row lookup reached, and what the next run looks up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from spark_jobs.late_rows import LookedUp

T = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def test_a_state_that_never_looked_up_looks_up_the_whole_backlog() -> None:
    assert LookedUp().since(T, 3600) is None
    assert LookedUp(until=T.isoformat()).since(T, 3600) is None  # no time of the last backlog lookup


def test_within_the_recheck_only_the_rows_due_since_are_looked_up() -> None:
    looked = LookedUp(until=(T - timedelta(minutes=1)).isoformat(), at=(T - timedelta(minutes=59)).isoformat())
    assert looked.since(T, 3600) == T - timedelta(minutes=1)
    assert looked.since(T + timedelta(minutes=1), 3600) is None  # an hour since the backlog: all of it


def test_a_clock_behind_the_last_backlog_lookup_looks_up_the_whole_backlog() -> None:
    looked = LookedUp(until=T.isoformat(), at=T.isoformat())
    assert looked.since(T - timedelta(seconds=1), 3600) is None


def test_after_a_lookup_the_bound_moves_and_the_backlog_time_only_on_a_whole_lookup() -> None:
    looked = LookedUp(until=T.isoformat(), at=(T - timedelta(minutes=30)).isoformat())
    later = T + timedelta(minutes=5)
    assert looked.after(T, later - timedelta(seconds=30), later) == LookedUp(
        (later - timedelta(seconds=30)).isoformat(), looked.at
    )
    assert looked.after(T, T - timedelta(minutes=10), later).until == T.isoformat()  # never moves back
    assert looked.after(None, later - timedelta(seconds=30), later) == LookedUp(
        (later - timedelta(seconds=30)).isoformat(), later.isoformat()
    )
