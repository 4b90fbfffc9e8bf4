"""Whether a run's reads may have been read again, with records missing, after an executor
was lost.

A run caches what it read (the topic, the ledgers) on the executors. An executor lost during
the run (killed, out of memory, a preempted node) takes its cached blocks with it, and Spark
reads those parts again from Kafka when a later phase needs them. The Kafka source skips what
retention or `delete_records` removed since, and what a truncation cut (failOnDataLoss=false,
see common.extract_topic), so a part read again can hold fewer records than the part the run
checked (reconcile_extract.check_nothing_deleted_while_read): rows would be reported missing
whose records the run had read. In local mode the executors are the driver: one lost ends
the run.

`ExecutorWatch` asks the driver's status store (AppStatusStore.executorList, kept with the UI
disabled too) for every executor of the application, the removed ones included, with why and
holding how many cached blocks each was removed. An executor removed since the run began is
lost, whichever phase it came and went in, unless the driver removed it on purpose (dynamic
allocation's idle timeout, `SparkContext.killExecutor`) while it held no cached block: its
removal took nothing the run read. Everything else (a killed process, a lost worker, a
decommission, an unknown reason, cached blocks held or not known) is a loss, and before the
run may publish `check_reads_unchanged` reads the log starts and ends again and fails the run
if any read range lost records since. Where the status store cannot be read, the watch falls
back to the ids it saw at each phase (any gone is lost; one started and lost between two
phases is not seen) and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from spark_jobs.kafka_offsets import partition_offsets, starts_passed

# ExecutorKilled's message (core/.../scheduler/ExecutorLossReason.scala): the reason
# CoarseGrainedSchedulerBackend posts for an executor it was asked to kill
# (executorsPendingToRemove), whichever way its process then ended. Seen on the standalone
# cluster of tests/reconcile/test_cluster.py; a SIGKILLed executor reads "Command exited with
# code 137" there, a decommissioned one "Executor decommission…".
KILLED_BY_DRIVER = "Executor killed by driver."
# How long the watch waits for the driver's listener bus to hand the status store the
# removals already made, before it judges them: a removal not recorded yet counts as a loss.
LISTENER_WAIT_MS = 10_000


@dataclass(frozen=True)
class ExecutorState:
    """One executor as the driver's status store lists it."""

    executor_id: str
    active: bool
    rdd_blocks: int  # cached blocks it held; when removed, the count at its removal
    remove_reason: str | None


def removed_on_purpose(state: ExecutorState) -> bool:
    """Removed by the driver (a kill it asked for) holding no cached block: nothing the run
    read was on it. A kill by the driver of an executor holding blocks loses them like any
    other removal."""
    return not state.active and state.remove_reason == KILLED_BY_DRIVER and state.rdd_blocks == 0


def executors_lost(
    seen: set[str], removed_before: set[str], active_now: set[str], states: dict[str, ExecutorState] | None
) -> list[str]:
    """The executors lost during a run, each with why, sorted by id.

    `seen`: ids the run saw at its phases; `removed_before`: ids the status store listed as
    removed when the run began; `active_now`: the scheduler's executors now; `states`: the
    status store now by id (None: not reachable; then every seen id gone is lost). An
    executor the store lists as removed and not in `removed_before`, or seen (or listed active)
    and no longer the scheduler's, is lost unless `removed_on_purpose`."""
    if states is None:
        return [f"executor {i} (why it was removed is not known)" for i in _by_id(seen - active_now)]
    listed_active = {i for i, state in states.items() if state.active}
    removed = {i for i, state in states.items() if not state.active} - removed_before
    lost = []
    for i in _by_id((removed | ((seen | listed_active) - active_now)) - {"driver"}):
        state = states.get(i)
        if state is None:
            lost.append(f"executor {i} (no longer in the driver's status store: why it was removed is not known)")
        elif state.active:
            lost.append(f"executor {i} (its removal is not in the driver's status store yet)")
        elif not removed_on_purpose(state):
            blocks = f"; it held {state.rdd_blocks} cached block(s)" if state.rdd_blocks else ""
            lost.append(f"executor {i} ({state.remove_reason or 'no reason given'}{blocks})")
    return lost


def _by_id(ids: set[str]) -> list[str]:
    return sorted(ids, key=lambda i: (len(i), i))  # "2" before "10"


class ExecutorWatch:
    """The executors of one run: the ids seen at each phase (never reused within an
    application: an executor started again on the same host and port, as with a fixed
    spark.blockManager.port, is another id) and the driver's status store; inert in local
    mode (no JVM call at any phase)."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        self.active = not runs_locally(spark)
        self.seen: set[str] = set()
        self.store_error: str | None = None  # why the status store could not be read: the fallback
        self._removed_before: set[str] = set()
        if self.active:
            self._wait_for_listeners()  # an executor removed just before the run is not lost during it
            states = self._states()
            if states is not None:
                self._removed_before = {i for i, state in states.items() if not state.active}
        self.look()

    def _sc(self) -> Any:
        return self._spark.sparkContext._jsc.sc()

    def _now(self) -> set[str]:
        ids = str(self._sc().getExecutorIds().mkString(","))
        return {i for i in ids.split(",") if i}

    def _states(self) -> dict[str, ExecutorState] | None:
        """The status store's executors, or None (and `store_error`) when it cannot be read."""
        try:
            listed = self._sc().statusStore().executorList(False)
            states = {}
            for n in range(listed.size()):
                row = listed.apply(n)
                reason = row.removeReason()
                state = ExecutorState(
                    executor_id=str(row.id()),
                    active=bool(row.isActive()),
                    rdd_blocks=int(row.rddBlocks()),
                    remove_reason=str(reason.get()) if reason.isDefined() else None,
                )
                states[state.executor_id] = state
            return states
        except Exception as exc:  # noqa: BLE001 - private[spark]: another Spark may not have it
            first_line = str(exc).strip().splitlines()[:1]
            self.store_error = f"{type(exc).__name__}: {''.join(first_line)}"
            return None

    def _wait_for_listeners(self) -> None:
        try:
            self._sc().listenerBus().waitUntilEmpty(LISTENER_WAIT_MS)
        except Exception:  # noqa: BLE001 - not drained in time: a removal not recorded is a loss
            pass

    def look(self) -> None:
        if self.active:
            self.seen |= self._now()

    def lost(self) -> list[str]:
        """The executors lost during the run so far, each with why (executors_lost)."""
        if not self.active:
            return []
        states = None
        if self.store_error is None:
            self._wait_for_listeners()
            states = self._states()
        # the scheduler's ids after the store: one added in between is in neither set as lost
        return executors_lost(self.seen, self._removed_before, self._now(), states)


def runs_locally(spark: SparkSession) -> bool:
    """Whether the executors are this process (a local master): no executor can be lost, nor
    see another disk, without the driver."""
    return (spark.sparkContext.master or "local").startswith("local")


def reads_shortened(admin: object, reads: list[tuple[str, dict[int, tuple[int, int]]]]) -> list[str]:
    """Per range read (topic, {partition: (start, end)}), where its log now starts past its start
    (kafka_offsets.starts_passed) or ends before its end."""
    where = []
    for topic, ranges in reads:
        wanted = sorted(p for p, (start, end) in ranges.items() if end > start)
        if not wanted:
            continue
        now = partition_offsets(admin, topic, wanted)  # type: ignore[arg-type]
        passed = starts_passed(ranges, now)
        for p in wanted:
            start, end = ranges[p]
            if p in passed:
                where.append(f"{topic}/{p} now starts at offset {now[p].low}, past {start} where this run read from")
            elif now[p].high < end:
                where.append(f"{topic}/{p} now ends at offset {now[p].high}, before {end} where this run read to")
    return where
