"""Which executors a run lost (spark_jobs/executor_loss.py): the classification of the driver's
status-store rows, pure. The real cluster's rows and reasons are tests/reconcile/test_cluster.py's."""

from __future__ import annotations

from spark_jobs.executor_loss import KILLED_BY_DRIVER, ExecutorState, executors_lost, removed_on_purpose


def removed(executor_id: str, reason: str | None, blocks: int = 0) -> ExecutorState:
    return ExecutorState(executor_id, active=False, rdd_blocks=blocks, remove_reason=reason)


def running(executor_id: str, blocks: int = 0) -> ExecutorState:
    return ExecutorState(executor_id, active=True, rdd_blocks=blocks, remove_reason=None)


def by_id(*states: ExecutorState) -> dict[str, ExecutorState]:
    return {state.executor_id: state for state in states}


def test_only_a_kill_by_the_driver_of_an_executor_holding_no_cached_block_is_on_purpose() -> None:
    assert removed_on_purpose(removed("1", KILLED_BY_DRIVER))
    assert not removed_on_purpose(removed("1", KILLED_BY_DRIVER, blocks=3))  # its cached reads went with it
    assert not removed_on_purpose(removed("1", "Command exited with code 137"))
    assert not removed_on_purpose(removed("1", "Executor decommission: worker decommissioned"))
    assert not removed_on_purpose(removed("1", None))
    assert not removed_on_purpose(running("1"))


def test_it_ignores_an_idle_executor_the_driver_removed_and_names_every_other_removal() -> None:
    states = by_id(
        running("driver"),
        removed("0", "Command exited with code 137", blocks=4),
        removed("1", KILLED_BY_DRIVER),  # dynamic allocation's idle removal
        removed("2", KILLED_BY_DRIVER, blocks=2),
        removed("3", "Remote RPC client disassociated."),
        running("4"),
    )
    assert executors_lost({"0", "4"}, set(), {"4"}, states) == [
        "executor 0 (Command exited with code 137; it held 4 cached block(s))",
        "executor 2 (Executor killed by driver.; it held 2 cached block(s))",
        "executor 3 (Remote RPC client disassociated.)",
    ]


def test_an_executor_started_and_lost_between_two_phases_is_lost() -> None:
    """Never seen at a phase: the status store still lists it, removed."""
    states = by_id(running("0"), removed("1", "Command exited with code 137"))
    assert executors_lost({"0"}, set(), {"0"}, states) == ["executor 1 (Command exited with code 137)"]


def test_executors_removed_before_the_run_are_not_its_losses() -> None:
    states = by_id(removed("0", "Command exited with code 137", blocks=4), running("1"))
    assert executors_lost({"1"}, {"0"}, {"1"}, states) == []


def test_a_removal_the_status_store_does_not_know_is_a_loss() -> None:
    # evicted (spark.ui.retainedDeadExecutors), or not recorded yet (the listener bus lags)
    states = by_id(running("1"), running("2"))
    assert executors_lost({"0", "1", "2"}, set(), {"2"}, states) == [
        "executor 0 (no longer in the driver's status store: why it was removed is not known)",
        "executor 1 (its removal is not in the driver's status store yet)",
    ]


def test_without_the_status_store_every_seen_executor_gone_is_lost() -> None:
    assert executors_lost({"0", "1", "10", "2"}, set(), {"1"}, None) == [
        "executor 0 (why it was removed is not known)",
        "executor 2 (why it was removed is not known)",
        "executor 10 (why it was removed is not known)",
    ]
