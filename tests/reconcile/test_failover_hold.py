"""The leader-change hold's rules (spark_jobs.failover_hold): pure functions, no services."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from spark_jobs.failover_hold import (
    CLOCK_MARGIN_MS,
    LeaderChange,
    changes_kept,
    dating_bound_ms,
    describe_hold,
    epochs_changed,
    first_reading_change,
    follow_epochs,
    held_window,
    ledger_outcome_ms,
)
from spark_jobs.reconcile_plan import ledger_reading_before
from spark_jobs.reconcile_state import StateError, StateMeta
from spark_jobs.send_outcome import SEND_OUTCOME_MS, UNBOUNDED

T0 = 1_800_000_000_000  # an instant, epoch ms
MIN = 60_000


def at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def test_an_epoch_that_moved_is_a_change_between_the_two_readings() -> None:
    change = epochs_changed({0: 3, 1: 5}, T0, {0: 4, 1: 5}, T0 + MIN)
    assert change == LeaderChange(T0, T0 + MIN, (0,))


def test_the_same_epochs_an_unknown_one_or_no_last_reading_are_no_change() -> None:
    assert epochs_changed({0: 3}, T0, {0: 3}, T0 + MIN) is None
    assert epochs_changed({0: 3}, T0, {0: None}, T0 + MIN) is None
    assert epochs_changed({}, None, {0: 7}, T0 + MIN) is None


def test_a_partition_added_since_counts_only_once_its_leader_changed() -> None:
    assert epochs_changed({0: 3}, T0, {0: 3, 1: 0}, T0 + MIN) is None
    assert epochs_changed({0: 3}, T0, {0: 3, 1: 2}, T0 + MIN) == LeaderChange(T0, T0 + MIN, (1,))


def test_the_epochs_kept_are_the_last_known_where_one_was_not_read() -> None:
    epochs, changes, change = follow_epochs({0: 3, 1: 5}, T0, [], {0: 4, 1: None}, T0 + MIN, 1000, SEND_OUTCOME_MS)
    assert epochs == {0: 4, 1: 5}
    assert change == LeaderChange(T0, T0 + MIN, (0,)) and changes == [change]


def test_a_change_is_kept_while_it_can_hold_a_row_and_forgotten_after() -> None:
    change = LeaderChange(T0, T0 + MIN, (0,))
    grace = 10_000
    # a row created at by_ms + hold + margin is judged once its grace and the hold passed
    last = T0 + MIN + 2 * (SEND_OUTCOME_MS + CLOCK_MARGIN_MS) + grace
    assert changes_kept([change], last - 1, grace, SEND_OUTCOME_MS) == [change]
    assert changes_kept([change], last, grace, SEND_OUTCOME_MS) == []


def test_rows_after_a_change_are_held_until_the_bound_has_passed_beyond_their_grace() -> None:
    hold = SEND_OUTCOME_MS
    change = LeaderChange(T0, T0 + MIN, (0,))
    cutoff = at(T0 + MIN + 20_000)  # a run right after the change
    # held: the rows past the cutoff less the hold, up to the hold (and the margin) after the change
    assert held_window([change], cutoff, SEND_OUTCOME_MS) == (
        at(T0 + MIN + 20_000 - hold),
        at(T0 + MIN + hold + CLOCK_MARGIN_MS),
    )
    # a run once the last of them is judged: nothing held
    assert held_window([change], at(T0 + MIN + 2 * hold + CLOCK_MARGIN_MS), SEND_OUTCOME_MS) is None
    assert held_window([change], at(T0 + MIN + 2 * hold + CLOCK_MARGIN_MS - 1), SEND_OUTCOME_MS) is not None
    assert held_window([], cutoff, SEND_OUTCOME_MS) is None


def test_the_latest_change_bounds_the_window() -> None:
    changes = [LeaderChange(T0, T0 + MIN, (0,)), LeaderChange(T0 + 2 * MIN, T0 + 3 * MIN, (1,))]
    window = held_window(changes, at(T0 + 3 * MIN), SEND_OUTCOME_MS)
    assert window is not None and window[1] == at(T0 + 3 * MIN + SEND_OUTCOME_MS + CLOCK_MARGIN_MS)


@pytest.mark.parametrize(
    ("outcome", "hold"), [(UNBOUNDED, SEND_OUTCOME_MS), (SEND_OUTCOME_MS, SEND_OUTCOME_MS), (600_000, 600_000)]
)
def test_the_hold_is_the_send_outcome_bound_and_the_defaults_for_a_producer_retrying_without_limit(
    outcome: int, hold: int
) -> None:
    change = LeaderChange(T0, T0 + MIN, (0,))
    window = held_window([change], at(T0 + MIN), outcome)
    assert window is not None
    start, end = window
    # from the cutoff less the hold to the hold (and the margin) after the change
    assert (start, end) == (at(T0 + MIN - hold), at(T0 + MIN + hold + CLOCK_MARGIN_MS))


def test_a_change_round_trips_through_state_json_and_a_malformed_one_is_refused() -> None:
    change = LeaderChange(T0, T0 + MIN, (0, 2))
    assert LeaderChange.from_json(change.to_json()) == change
    with pytest.raises(ValueError):
        LeaderChange.from_json([T0, T0])
    meta = StateMeta(leader_epochs={0: 3, 2: 1}, leader_epochs_at_ms=T0, leader_changes=[change])
    again = StateMeta.from_json(json.loads(json.dumps(meta.to_json())))
    assert (again.leader_epochs, again.leader_epochs_at_ms, again.leader_changes) == ({0: 3, 2: 1}, T0, [change])
    # a state written before stop 79 has none: no reading to compare with
    older = {k: v for k, v in meta.to_json().items() if not k.startswith("leader_")}
    assert StateMeta.from_json(older).leader_epochs == {} and StateMeta.from_json(older).leader_epochs_at_ms is None
    with pytest.raises(StateError, match="leader_changes"):
        StateMeta.from_json(meta.to_json() | {"leader_changes": [[T0]]})


def test_a_ledger_change_round_trips_with_its_topic_and_a_state_keeps_the_ledger_epochs() -> None:
    change = LeaderChange(T0, T0 + MIN, (1,), "_audit.producer-ledger")
    assert change.to_json() == [T0, T0 + MIN, [1], "_audit.producer-ledger"]
    assert LeaderChange.from_json(change.to_json()) == change
    with pytest.raises(ValueError):
        LeaderChange.from_json([T0, T0 + MIN, [1], 7])
    meta = StateMeta(ledger_epochs={"_audit.producer-ledger": {0: 2, 1: 5}}, leader_changes=[change])
    again = StateMeta.from_json(json.loads(json.dumps(meta.to_json())))
    assert (again.ledger_epochs, again.leader_changes) == ({"_audit.producer-ledger": {0: 2, 1: 5}}, [change])
    older = {k: v for k, v in meta.to_json().items() if k != "ledger_epochs"}
    assert StateMeta.from_json(older).ledger_epochs == {}


def test_at_a_first_reading_only_a_leader_not_seen_appending_an_old_record_is_a_change() -> None:
    since = T0 - 20 * MIN
    # 0: never changed leader; 1: its leader appended a record stamped before `since`;
    # 2: not seen doing so (or empty); 3: epoch unknown
    change = first_reading_change({0: 0, 1: 4, 2: 3, 3: None}, {1}, since, T0, "ledger")
    assert change == LeaderChange(since, T0, (2,), "ledger")
    assert first_reading_change({0: 0, 1: 4}, {1}, since, T0) is None


def test_a_first_reading_gives_its_dated_change_and_a_later_one_compares() -> None:
    first = LeaderChange(T0 - 20 * MIN, T0, (0,), "ledger")
    epochs, changes, change = follow_epochs(
        None, None, [], {0: 2}, T0, 1000, SEND_OUTCOME_MS, first=first, ledger="ledger"
    )
    assert (epochs, changes, change) == ({0: 2}, [first], first)
    # the next reading compares with this one; the first change stays kept while it can hold rows
    epochs, changes, change = follow_epochs(
        {0: 2}, T0, [first], {0: 3}, T0 + MIN, 1000, SEND_OUTCOME_MS, ledger="ledger"
    )
    assert change == LeaderChange(T0, T0 + MIN, (0,), "ledger") and changes == [first, change]


def test_the_dating_bound_puts_a_change_before_an_old_records_append_out_of_reach() -> None:
    grace, appended_within = 10_000, 300_000
    outcome = ledger_outcome_ms(30_000)  # a topic producer's 30 s bound: the ledger's own counts
    since = dating_bound_ms(T0, grace, outcome, appended_within)
    # A record stamped just before `since` by a clock the margin behind the driver's, appended by
    # the new leader as late as its send allows: the change came before that append, and holds
    # no row at T0 any more.
    appended = since - 1 + CLOCK_MARGIN_MS + appended_within
    assert changes_kept([LeaderChange(since - 1, appended, (0,))], T0, grace, outcome) == []
    # one a moment later is still kept: the bound is as late as it can be
    later = LeaderChange(since, appended + 2, (0,))
    assert changes_kept([later], T0, grace, outcome) == [later]


def test_a_ledger_change_holds_for_the_ledger_producers_bound_too() -> None:
    # the probes' ledger producer keeps librdkafka's defaults: its entries may come that late
    assert ledger_outcome_ms(30_000) == SEND_OUTCOME_MS
    assert ledger_outcome_ms(UNBOUNDED) == SEND_OUTCOME_MS
    assert ledger_outcome_ms(900_000) == 900_000
    change = LeaderChange(T0, T0 + MIN, (0,), "ledger")
    first = describe_hold(change, "tickets", ledger_outcome_ms(30_000), first_reading=True)
    assert "producer ledger ledger" in first and "no earlier run read its epochs" in first and "probed" in first


def test_the_ledger_is_compared_with_the_last_reading_of_the_same_ledger_only() -> None:
    change = LeaderChange(T0 - MIN, T0, (0,), "ledger")
    other = LeaderChange(T0 - MIN, T0, (1,))  # the topic's: not the ledger's to keep
    earlier = StateMeta(
        leader_epochs_at_ms=T0,
        ledger_epochs={"ledger": {0: 2}},
        leader_changes=[change, other],
        ledger_ids={"producer": {"ledger": "id-1"}},
    )
    assert ledger_reading_before(earlier, "ledger", "id-1", False) == ({0: 2}, T0, [change])
    assert ledger_reading_before(earlier, "ledger", None, False) == ({0: 2}, T0, [change])  # id not read now
    # deleted and created again: seen by an incremental run, or by its id on a full run
    assert ledger_reading_before(earlier, "ledger", "id-1", True) == (None, None, [])
    assert ledger_reading_before(earlier, "ledger", "id-2", False) == (None, None, [])
    # another ledger, no earlier state, a state from before the ledger's epochs were kept
    assert ledger_reading_before(earlier, "other-ledger", None, False) == (None, None, [])
    assert ledger_reading_before(None, "ledger", None, False) == (None, None, [])
    assert ledger_reading_before(StateMeta(leader_epochs_at_ms=T0), "ledger", None, False) == (None, None, [])
