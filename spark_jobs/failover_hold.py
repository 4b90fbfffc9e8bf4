"""Rows a leader change may have delayed past the grace: judged only once their sends' outcome
bound has passed too. No Spark here: the job's driver computes the windows, find_missing
(reconcile_findings) leaves the rows in them out.

A partition whose leader fails holds the sends made to it until the producer gives up on the
old leader: a killed leader resets its connections at once, but a frozen one (SIGSTOP, a long
GC pause, a hung disk) is fenced and replaced by the controller while the producer's requests
to it wait out their timeout (request.timeout.ms, 30 s by default) on the open connection, and
only then go to the new leader. Each send is still retried until its message timeout, so its
record lands within the send outcome bound (spark_jobs.send_outcome) of the send, but it may
land well after the binding's grace: the lab's `live-leader-pauses` saw 346 rows called
`missing` whose records all landed a moment later (stop 78).

Each run reads every partition's leader epoch with its log ends (every leader change raises
it) and keeps them in state.json. An epoch that differs from the last run's means a leader
changed between the two readings: a LeaderChange, kept while it can still delay a row. A row
with no record created up to the send outcome bound after it is not `missing` until the bound
has passed beyond its grace. Rows with evidence of a loss (a record an earlier run saw, an
acked send) are not held: they are known lost, not late; nor are rows the last run reported
`missing` already (the change came after that run read the log ends: it did not delay them).

A probe writes its ledger entries through a producer of its own, to the producer ledger's
partitions: a failover there holds the entries the same way, so a run reads no entry for a
probed send still on its way (the lab's `in-flight-while-auditing`, stop 79). The producer
ledger's epochs are kept too, and a change of its leaders holds rows as one of the topic's,
where the topic's producers are probed (a probed producer's session writes the topic, and every
record the runs read carries audit headers: a plain producer's rows have no entry to wait for). Where there is no earlier reading of the
ledger (a binding's first run), the change is dated from the ledger's own records
(kafka_offsets.epochs_led_before): a partition whose current leader is not seen appending a
record old enough to put the change out of reach may have changed leader a moment ago. A ledger
change holds rows for ledger_outcome_ms (the entries' bound too), and does not hold a row whose
send's outcome the ledger gave (a `gap` of its key): that entry was not late.

What it cannot see (docs/known-gaps.md): a change of the topic's own leaders before the first
reading of a binding (its first run, a state written before the epochs were kept or unreadable,
a binding moved to another topic); a leader frozen for longer than the grace and shorter than the controller's
session timeout (not replaced: no epoch change, and its sends wait the freeze out, past the
grace); a broker that does not give epochs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from spark_jobs.send_outcome import SEND_OUTCOME_MS, UNBOUNDED, describe

# The auditor's clock (the driver's) reads the epochs; the source's clock stamps the rows.
CLOCK_MARGIN_MS = 60_000


@dataclass(frozen=True)
class LeaderChange:
    """Leaders of `partitions` changed after `after_ms` (the reading that saw the earlier
    epochs, or the dating bound: first_reading_change) and by `by_ms` (the one that saw the new
    ones), both the driver's clock. `ledger`: the producer ledger topic whose partitions they
    are; None: the binding's topic."""

    after_ms: int
    by_ms: int
    partitions: tuple[int, ...]
    ledger: str | None = None

    def to_json(self) -> list[object]:
        head: list[object] = [self.after_ms, self.by_ms, list(self.partitions)]
        return head if self.ledger is None else [*head, self.ledger]

    @classmethod
    def from_json(cls, data: object) -> LeaderChange:
        """Raises ValueError (or TypeError) where `data` is not a change's list."""
        if (
            not isinstance(data, list)
            or len(data) not in (3, 4)
            or not isinstance(data[2], list)
            or (len(data) == 4 and not isinstance(data[3], str))
        ):
            raise ValueError(f"not [after_ms, by_ms, [partitions]] or [..., ledger topic]: {data!r}")
        return cls(int(data[0]), int(data[1]), tuple(int(p) for p in data[2]), data[3] if len(data) == 4 else None)


def hold_ms(outcome_ms: int) -> int:
    """How long past its grace a row a leader change may have delayed waits: the send outcome
    bound; librdkafka's defaults' for a producer that retries without limit (it would hold the
    row for good: a record retried for longer than that is reported `missing`, then resolved)."""
    return SEND_OUTCOME_MS if outcome_ms == UNBOUNDED else outcome_ms


def epochs_changed(
    before: Mapping[int, int],
    before_ms: int | None,
    now: Mapping[int, int | None],
    now_ms: int,
    ledger: str | None = None,
) -> LeaderChange | None:
    """The change between the last reading (`before`, taken at `before_ms`) and this one: the
    partitions whose epoch differs, a partition new since then with an epoch above 0 (it has
    changed leader since it was created). None without a last reading, or without a change.
    A partition whose epoch is not known now (None) says nothing."""
    if before_ms is None or not before:
        return None
    changed = tuple(
        sorted(p for p, e in now.items() if e is not None and (before.get(p, 0) != e if p in before else e > 0))
    )
    return LeaderChange(before_ms, max(now_ms, before_ms), changed, ledger) if changed else None


def dating_bound_ms(now_ms: int, grace_ms: int, outcome_ms: int, appended_within_ms: int) -> int:
    """How old a record the current leader appended must be for a change before it to hold no
    row any more: a change is kept for its hold and the clock margin twice and the grace
    (changes_kept, with this `outcome_ms`), and a record appended by the new leader may have
    been created up to its producer's send outcome bound (`appended_within_ms`) before it was
    appended, by a clock up to the margin off the driver's."""
    hold = hold_ms(outcome_ms)
    return now_ms - grace_ms - 2 * (hold + CLOCK_MARGIN_MS) - appended_within_ms - CLOCK_MARGIN_MS


def first_reading_change(
    now: Mapping[int, int | None], led_before: set[int], since_ms: int, now_ms: int, ledger: str | None = None
) -> LeaderChange | None:
    """At a first reading of the epochs (no earlier one to compare with): the partitions that
    may have changed leader since `since_ms` (dating_bound_ms). A partition still led by the
    leader it was created with (epoch 0) has not; nor has one whose current leader appended a
    record stamped before `since_ms` (`led_before`: kafka_offsets.epochs_led_before). Any other,
    an empty one too, is a change between `since_ms` and `now_ms`. An unknown epoch says nothing."""
    undated = tuple(sorted(p for p, e in now.items() if e is not None and e > 0 and p not in led_before))
    return LeaderChange(since_ms, max(now_ms, since_ms), undated, ledger) if undated else None


def epochs_after(before: Mapping[int, int], now: Mapping[int, int | None]) -> dict[int, int]:
    """state.json's epochs after this run: the ones read now, the last known where not read."""
    return {**before, **{p: e for p, e in now.items() if e is not None}}


def changes_kept(changes: list[LeaderChange], now_ms: int, grace_ms: int, outcome_ms: int) -> list[LeaderChange]:
    """The changes that may still hold a row at a run `now_ms` or later: a row created up to
    a change's `by_ms` plus the hold (and the clock margin) is judged once its grace and the
    hold have passed."""
    hold = hold_ms(outcome_ms)
    return [c for c in changes if c.by_ms + 2 * (hold + CLOCK_MARGIN_MS) + grace_ms > now_ms]


def follow_epochs(
    before: Mapping[int, int] | None,
    before_ms: int | None,
    kept: list[LeaderChange],
    now: Mapping[int, int | None],
    now_ms: int,
    grace_ms: int,
    outcome_ms: int,
    first: LeaderChange | None = None,
    ledger: str | None = None,
) -> tuple[dict[int, int], list[LeaderChange], LeaderChange | None]:
    """After a reading of the epochs (`now`, at `now_ms`) of the topic or of the producer ledger
    (`ledger`): the epochs and changes state.json keeps, and the change seen since the last
    reading (`before`, at `before_ms`; None: none to compare with, a topic read for the first
    time or created again: then `first`, first_reading_change's answer, where it was dated)."""
    change = epochs_changed(before, before_ms, now, now_ms, ledger) if before is not None else first
    changes = changes_kept([*kept, *([change] if change else [])], now_ms, grace_ms, outcome_ms)
    return epochs_after(before or {}, now), changes, change


def ledger_outcome_ms(outcome_ms: int) -> int:
    """The bound a change of the producer ledger's leaders holds rows for: the later of the
    topic's producers' (their records) and the probes' ledger producer's (their entries: it sets
    no delivery timeout of its own, auditor.probes.config.ledger_producer_config, so librdkafka's
    defaults' bound)."""
    return max(hold_ms(outcome_ms), SEND_OUTCOME_MS)


def held_window(changes: list[LeaderChange], cutoff: datetime, outcome_ms: int) -> tuple[datetime, datetime] | None:
    """The (start, end] of `created` whose rows a run with this `cutoff` (the source's upper
    bound less the grace) does not judge: created after the cutoff less the hold (their grace and
    the hold have not passed yet) and up to the hold after the latest change (widened by the clock
    margin: the driver's clock dates the changes). A row created before a change is held as one
    created after it: the change may have come while its send was on its way. None: none held."""
    if not changes:
        return None
    hold = hold_ms(outcome_ms)
    start = int(cutoff.timestamp() * 1000) - hold
    end = max(c.by_ms for c in changes) + hold + CLOCK_MARGIN_MS
    return (_instant(start), _instant(end)) if end > start else None


def describe_hold(change: LeaderChange, topic: str, outcome_ms: int, first_reading: bool = False) -> str:
    """The run's warning for a change it saw (`first_reading`: one first_reading_change could
    not date)."""
    parts = ", ".join(str(p) for p in change.partitions)
    between = f"{_instant(change.after_ms).isoformat()} and {_instant(change.by_ms).isoformat()}"
    if change.ledger is not None:
        changed = (
            f"the current leaders of partition(s) {parts} appended no record old enough to show they led them "
            f"before {_instant(change.after_ms).isoformat()} (no earlier run read its epochs): taken as changed "
            f"between {between}"
            if first_reading
            else f"partition(s) {parts} changed leader between {between}"
        )
        return (
            f"the producer ledger {change.ledger}: {changed}; a failover can "
            f"hold a probe's ledger entries until its ledger producer's retries end, so where {topic}'s producers "
            f"are probed, rows without a record created up to {describe(hold_ms(outcome_ms))} after it are "
            "reported missing only once that long past their grace"
        )
    return (
        f"{topic}: partition(s) {parts} changed leader between {_instant(change.after_ms).isoformat()} and "
        f"{_instant(change.by_ms).isoformat()}; a failover can hold sends until the producer's retries end, so "
        f"rows without a record created up to {describe(hold_ms(outcome_ms))} after it are reported missing only "
        "once that long past their grace"
    )


def _instant(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)
