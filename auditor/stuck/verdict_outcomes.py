"""What the verdict rules (verdicts.py) share: one (record, group) outcome and how outcomes
combine into a diagnosis, completeness of a log since an instant, where an item sits, and
the evidence helpers every rule uses."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from auditor.stuck.evidence import (
    ClusterView,
    CommitRecord,
    Diagnosis,
    GroupState,
    PartitionState,
    ProcessedMark,
    ms_to_iso,
)
from spark_jobs import commit_history
from spark_jobs.group_commits import SeenCommits
from spark_jobs.kafka_cleanup import absent_keys_explained

# Producer clocks drift: a record counts as "certainly still in the log" only this long
# after the oldest remaining record.
COMPLETENESS_SLACK_MS = 60_000
MAX_LISTED = 5  # records / ledger entries listed per item

MarkIndex = Mapping[tuple[str, int, int], ProcessedMark]

# Outcomes of one (record, group) pair, most telling first.
PRIORITY = ("processed", "waiting", "unknown", "expired", "skipped")
VERDICT_OF = {
    "processed": "processed-not-updated",
    "waiting": "waiting",
    "unknown": "unknown",
    "expired": "expired",
    "skipped": "skipped",
}


@dataclass
class Outcome:
    kind: str
    reason: str
    group: dict[str, Any]


def combine(outcomes: list[Outcome], evidence: dict[str, Any]) -> Diagnosis:
    evidence["groups"] = [o.group | {"outcome": o.kind} for o in outcomes]
    best = min(outcomes, key=lambda o: PRIORITY.index(o.kind))
    return Diagnosis(VERDICT_OF[best.kind], best.reason, evidence)


def complete(since_ms: int | None, created_ms: int) -> bool:
    """Does a log (or ledger) complete since `since_ms` (0: since its start) certainly hold
    what was written at `created_ms`?"""
    return since_ms is not None and (since_ms == 0 or since_ms + COMPLETENESS_SLACK_MS <= created_ms)


def counted_mark(mark: ProcessedMark | None, unclear_until: int | None) -> ProcessedMark | None:
    """The mark at a position that is of the record there now: where marks up to
    `unclear_until` may be of a gone record that held the offset (marks_unclear_until), the
    latest mark there if it was made after that, else none."""
    if unclear_until is None or mark is None or (mark.ts_ms or 0) > unclear_until:
        return mark
    later = mark.latest()
    return later if (later.ts_ms or 0) > unclear_until else None


def group_info(group: GroupState, partition: int) -> dict[str, Any]:
    return {
        "group": group.group,
        "committed": group.committed.get(partition),
        "members": group.members,
        "group_state": group.state,
    }


@dataclass(frozen=True)
class Position:
    """Where the verdicts take a group to stand on a partition: its committed offset now, or,
    where that is gone (or, for a deleted record, not past it), the highest offset
    reconciliation runs saw it commit (GroupState.seen): it had gone past the record then."""

    committed: int | None
    seen: SeenCommits | None = None  # set when the runs' sighting stands in for the committed offset


def standing(group: GroupState, partition: int, offset: int, present: bool) -> Position:
    """The group's position for the record at `offset`. For a deleted record (not `present`),
    a committed offset gone or not past it is replaced by a run's sighting past it: the record
    cannot be read again. For a record still in the log only a committed offset that is gone
    is, and only while nobody can be reading the partition (nobody_reading): one moved back,
    or consumers replaying from auto.offset.reset, read it again."""
    committed = group.committed.get(partition)
    seen = group.seen.get(partition)
    if seen is None or not seen.passed(offset) or (committed is not None and committed > offset):
        return Position(committed)
    if present and (committed is not None or not nobody_reading(group, partition)):
        return Position(committed)
    return Position(seen.offset, seen)


def nobody_reading(group: GroupState, partition: int) -> bool:
    """No consumer of the group can be reading `partition`: a group that joins (not a simple
    one, whose consumers assign partitions themselves and never show as members) that is empty
    or gone, or stable with an assignment known to leave the partition out. A group mid-
    rebalance shows its members without their assignment (consumers starting on an empty
    group go through it)."""
    if group.simple is not False:
        return False
    if group.state in ("empty", "dead"):
        return group.members == 0
    return group.state == "stable" and group.assigned is not None and partition not in group.assigned


def judged_by(info: dict[str, Any], at: Position) -> str:
    """How a verdict that rests on the group's position names it, with the runs' sighting in
    the evidence (`seen_commits`) where it stands in for the committed offset now
    (`info["committed"]`)."""
    if at.seen is None:
        return f"committed {at.committed}"
    info["seen_commits"] = at.seen.to_json()
    latest = at.seen.latest  # (cut where the log is vouched for: the run may have read more)
    now = "it has no committed offset there now" if info.get("committed") is None else f"now {info['committed']}"
    return (
        f"committed past offset {at.seen.offset - 1} as reconciliation run {latest.last_run} read at "
        f"{ms_to_iso(latest.seen_ms)} ({now}: deleted, expired or moved back since)"
    )


def lag(group: GroupState, state: PartitionState | None, partition: int, now_ms: int) -> dict[str, Any]:
    committed = group.committed.get(partition)
    if state is None:
        return {}
    position = committed if committed is not None else state.low
    oldest_ms = group.committed_timestamp_ms.get(partition)
    if oldest_ms is None and committed is None:
        oldest_ms = state.low_timestamp_ms
    lag_records = max(0, state.stable - position)
    seconds: float | None = 0
    if lag_records:  # records behind with no known time of the oldest one: the lag in time is unknown, not 0
        seconds = None if oldest_ms is None else round(max(0, now_ms - oldest_ms) / 1000, 1)
    return {"lag_records": lag_records, "lag_seconds": seconds}


def place(
    evidence: dict[str, Any], partition: int, offset: int, state: PartitionState | None, view: ClusterView
) -> None:
    evidence["partition"] = partition
    evidence["offset"] = offset
    if state is not None:
        evidence["log"] = state.as_json()
    evidence["retention_ms"] = view.retention_ms


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "? s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def unprobed_below(group: GroupState, topic: str, partition: int, offset: int) -> str | None:
    """Why the group may have read `offset` before its consumer was probed (no processed mark
    there to expect), or None: records below the group's first processed mark on a partition
    may have been consumed by the application before it was wrapped (the auditor adopted on a
    running pipeline), and a plain consumer leaves no mark."""
    first = group.first_mark.get(partition)
    if first is None:
        return f"its consumer marked no record of {topic}/{partition} processed (it may not be probed there)"
    if offset < first:
        return (
            f"its first processed mark on {topic}/{partition} is at offset {first}: it may have read the records "
            "below that before its consumer was probed"
        )
    return None


def passing_commit(group: GroupState, partition: int, offset: int) -> CommitRecord | None:
    """The commit that last took the group past `offset` on `partition`, as `__consumer_offsets`
    still shows it (commit_history.passing_commit); None: the history does not tell."""
    return commit_history.passing_commit((group.commits or {}).get(partition), group.committed.get(partition), offset)


def committed_by(
    group: GroupState, topic: str, partition: int, offset: int, info: dict[str, Any], commit: CommitRecord | None
) -> str | None:
    """Why the group's commit past `offset` (`commit`: passing_commit's) does not show a probed
    consumer went past it, or None (with the commit and its session in `info`, or a note that
    nothing shows who committed).

    An audited consumer names its session in its commits' metadata (docs/contracts.md): a commit
    past the record naming none, in a group whose other commits name probed sessions, was a plain
    consumer's (a group only partly probed), which may have processed it. Where the history does
    not show who passed it, the group's probes write no commit metadata (older probes), or the
    commit was made while the group had no member and carries no read record's leader epoch (an
    operator's reset, CommitRecord.by_operator), the rule is as before: the marks alone."""
    if group.commits is None:
        info["committed_by"] = "unknown: __consumer_offsets could not be read"
        return None
    if commit is None:
        info["committed_by"] = "unknown: __consumer_offsets no longer shows the commit that passed it"
        return None
    info["passed_by_commit"] = commit.as_json()
    if commit.session():
        return None
    if commit.by_operator():  # an operator's reset, or a consumer outside the membership setting an offset
        info["committed_by"] = (
            "a commit naming no probed session nor a read record's leader epoch, made while the group had no "
            "member (an operator's reset, or a consumer outside the group's membership committing an offset it "
            "set): the marks alone judge"
        )
        return None
    if not group.probe_names_commits():
        info["committed_by"] = "unknown: the group's probes name no session in their commits (older probes)"
        return None
    return (
        f"the commit that took it past {topic}/{partition}@{offset} (offset {commit.offset}, "
        f"{ms_to_iso(commit.ts_ms)}) names no probed consumer session in its metadata, while the group's probed "
        "consumers name theirs: a consumer of the group without the probe committed it, and may have processed it"
    )


def still_processing(
    group: GroupState,
    commit: CommitRecord | None,
    topic: str,
    partition: int,
    offset: int,
    view: ClusterView,
    info: dict[str, Any],
) -> str | None:
    """Why the probed consumer session whose commit took the group past `offset` (`commit`:
    passing_commit's) may still be processing that record, or None.

    A consumer that commits before it processes (at-most-once, auto-commit, a worker pool behind
    its polling thread) passes a record before it is done with it. Killed (-9) there, it skipped
    the record; frozen there (a long GC pause, SIGSTOP, a throttled container) or slow, it goes
    on and processes it when it resumes, though its group moved its partitions to another member
    meanwhile (the lab's `live-consumer-pauses-at-most-once`, stop 82). Nothing a reader sees
    tells the two apart but time: a later commit of the session proves nothing (a pool's
    auto-commit goes on while a worker still holds the record; stop 86 stopped taking one as the
    end of the hold). So the session is taken to be processing it until its processing bound has
    passed since that commit (its max.poll.interval.ms, the longest its own client lets it go
    without polling: ClusterView.processing_bound_ms; spark_jobs.processing_bound), as
    reconciliation does."""
    session = commit.session() if commit is not None else None
    if commit is None or session is None:
        return None
    bound_ms, source = view.processing_bound_ms(session)
    until_ms = commit.ts_ms + bound_ms
    if view.now_ms >= until_ms:
        return None
    info["processing_until"] = ms_to_iso(until_ms)
    return (
        f"group {group.group} committed past {topic}/{partition}@{offset} at {ms_to_iso(commit.ts_ms)} by probed "
        f"consumer session {session} (offset {commit.offset}): a consumer that commits before it is done processing "
        "may still be processing it (paused, slow, or in a worker's hands) or have died after the commit (then it "
        f"skipped it). Judged once {source} has passed since the commit: at {ms_to_iso(until_ms)}"
    )


def by_session(info: dict[str, Any]) -> str:
    """', by probed consumer session <sid>' where committed_by found the commit past a record
    naming its session; empty otherwise."""
    passed = info.get("passed_by_commit")
    session = passed.get("session") if isinstance(passed, dict) else None
    return f" by probed consumer session {session} (its commit past it names it)" if session else ""


def lost_mark(group: GroupState, topic: str, partition: int, offset: int) -> str | None:
    """Why the group's processed mark of `offset` may be gone, or None: its consumer's probe
    named it among the marks its ledger could not write (a marks-lost record), so processed
    or skipped cannot be told there."""
    for first, last, reason in group.lost_marks.get(partition, ()):
        if first <= offset <= last:
            because = f" ({reason})" if reason else ""
            return (
                f"its processed mark may have been lost: the probe's ledger failed to write marks for offsets "
                f"{first}-{last} of {topic}/{partition}{because}"
            )
    return None


def compacted_since(
    view: ClusterView, written_ms: int | None, evidence: dict[str, Any], unseen_until_ms: int | None = None
) -> str | None:
    """Why a record with the item's key, written at `written_ms` (None: unknown) and absent
    now, may have been delivered and then removed by log compaction; None when it cannot have.

    The log cleaner removes a record once a later record has the same record key. When the
    binding's key is not the record key, every record of an item may be gone, unless it is
    younger than min.compaction.lag.ms (kafka_cleanup). When it is, the cleaner keeps each
    record key's last record, unless that is a tombstone: it removes the tombstone too,
    delete.retention.ms after cleaning it, so a record written up to the topic's
    `emptied_horizon_ms` may have left no trace. `unseen_until_ms`: a reconciliation run
    found no record with the key up to then (it reports a row missing only when the cleaner
    cannot have emptied its key unread), so such a record was written after it."""
    keyed = not absent_keys_explained(view.record_key.split(":", 1)[0])
    if view.cleanup is None:
        if view.cleanup_error is None:
            return None
        how = (
            "a tombstone the log cleaner removed after delete.retention.ms may have taken the record with it"
            if keyed
            else f"the binding's key ({view.record_key}) is not the record key: if the topic is compacted, the log "
            "cleaner may have removed the record after it was delivered"
        )
        return f"the cleanup.policy of {view.topic} could not be read ({view.cleanup_error}) and {how}"
    if keyed:
        written = max((t for t in (written_ms, unseen_until_ms) if t is not None), default=None)
        # a tombstone removed while the diagnosis read the records went unseen too
        horizon = view.cleanup.emptied_horizon_ms(max(view.now_ms, view.read_done_ms or 0))
    else:
        written = written_ms
        horizon = view.cleanup.horizon_ms(view.now_ms)
    if horizon is None or (written is not None and written > horizon):
        return None
    evidence["compaction"] = {
        "cleanup_policy": view.cleanup.policy,
        "min_compaction_lag_ms": view.cleanup.compaction_lag_ms,
        "compactable_up_to": ms_to_iso(view.cleanup.horizon_ms(view.now_ms)),
    }
    if keyed:
        evidence["compaction"] |= {
            "delete_retention_ms": view.cleanup.delete_retention_ms,
            "emptied_up_to": ms_to_iso(horizon),
        }
        return (
            f"{view.topic} is compacted ({view.cleanup.describe()}, delete.retention.ms="
            f"{view.cleanup.delete_retention_ms}): an item deleted with a tombstone loses every record once the log "
            f"cleaner removes the tombstone, so this item's record, written up to {ms_to_iso(horizon)}, may have "
            "been delivered and cleaned away with its tombstone unread"
        )
    return (
        f"{view.topic} is compacted ({view.cleanup.describe()}) and the binding's key ({view.record_key}) is not the "
        "record key: the log cleaner removes a record once a later record has the same record key, so this item's "
        "record may have been delivered and compacted away"
    )


def no_commit(
    group: GroupState, partition: int | None, written_ms: int | None, view: ClusterView, info: dict[str, Any]
) -> str | None:
    """Why a group without a committed offset on `partition` (None: on any partition of the
    topic) may have read a record written at `written_ms` all the same; None when it cannot
    have. Adds the removal it saw to `info`.

    Kafka deletes an empty group's committed offsets offsets.retention.minutes after it
    became empty, and it became empty after any commit past the record, so after the
    record was written: a record younger than that retention was never committed past.
    Unless the offsets were deleted by hand, which no setting bounds: __consumer_offsets
    shows a removal by its tombstone (offsets_history), whatever its cause.
    """
    where = "the topic" if partition is None else f"partition {partition}"
    # A removal before the record was written took no commit past it: the group has not
    # committed there since (the tombstone is the key's last record).
    removals = [r for p, r in sorted(group.removed.items()) if partition is None or p == partition]
    removed = next(
        (r for r in removals if written_ms is None or r.removed_ms + COMPLETENESS_SLACK_MS >= written_ms), None
    )
    if removed is not None:
        info["offsets_removed"] = removed.to_json()
        return (
            f"group {group.group} has no committed offset on {where}, but {removed.describe()}: it may have gone "
            "past the record before, which cannot be told"
        )
    minutes = view.offsets_retention_minutes
    if written_ms is not None and minutes is not None:
        if view.now_ms - written_ms + COMPLETENESS_SLACK_MS < minutes * 60_000:
            return None
    retention = "unknown" if minutes is None else f"{minutes} min"
    return (
        f"group {group.group} has no committed offset on {where}: it never read that far, or the offsets it "
        f"committed expired since (offsets.retention.minutes: {retention}) or are kept outside Kafka; which "
        "cannot be told"
    )


def leader_changed_since(
    view: ClusterView, since_ms: int, evidence: dict[str, Any], since: str = "the row was created"
) -> str | None:
    """Why "no record with this key" does not prove that no record of the row was produced
    after `since_ms` (`since` says what that instant is), or None.

    A leader change can lose acknowledged records without a trace in the log: those a leader
    acked alone (acks=1) before its followers fetched them, or all since the new leader fell
    out of sync (an unclean election). The new leader then writes over their offsets, and
    whether the row's record was among them cannot be told. So never-produced needs every
    partition to have kept its leader since then: leader epoch 0, or a first record of the
    current leader older than that instant (every leader change came before it)."""
    for p in sorted(view.partitions):
        state = view.partitions[p]
        if state.leader_epoch == 0:
            continue
        if state.leader_since_ms is not None and state.leader_since_ms + COMPLETENESS_SLACK_MS <= since_ms:
            continue
        evidence["leader_change"] = {
            "partition": p,
            "leader_epoch": state.leader_epoch,
            "current_leader_first_record_at": ms_to_iso(state.leader_since_ms),
        }
        if state.leader_epoch is None:
            return (
                f"the leader epoch of {view.topic}/{p} could not be read, so whether a leader change since {since} "
                "lost its record (acked by a leader alone with acks=1, or written before an unclean election) cannot "
                "be told: never-produced and broker-lost cannot be told apart"
            )
        when = (
            "its current leader has appended no record yet"
            if state.leader_since_ms is None
            else f"its current leader's first record is from {ms_to_iso(state.leader_since_ms)}"
        )
        return (
            f"{view.topic}/{p} has changed leader (leader epoch {state.leader_epoch}) and may have done so after "
            f"{since} ({when}): a leader change loses records a leader acked alone (acks=1) or wrote before an "
            "unclean election, without a trace, so never-produced and broker-lost cannot be told apart"
        )
    return None
