"""What a diagnosis reads, as plain values: the stuck rows, the records and ledger entries
found for their keys, and the cluster as the admin API showed it at diagnosis time.

Nothing here does I/O; kafka_view.py and locate.py fill these in, verdicts.py judges them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal, NamedTuple

from auditor.lint.engine.terms import Overtaken
from auditor.lint.observed import DEFAULT_MAX_POLL_INTERVAL_MS

# CommitRecord, RemovedOffsets and ms_to_iso are spark_jobs.commit_history's, named here for the diagnosis
from spark_jobs.commit_history import CommitRecord as CommitRecord
from spark_jobs.commit_history import RemovedOffsets as RemovedOffsets
from spark_jobs.commit_history import ms_to_iso as ms_to_iso
from spark_jobs.commit_history import names_sessions
from spark_jobs.group_commits import SeenCommits
from spark_jobs.kafka_cleanup import TopicCleanup
from spark_jobs.mark_rules import MarkRule, covering
from spark_jobs.send_outcome import SEND_OUTCOME_MS
from spark_jobs.watermark_hold import DEFAULT_REPLICA_LAG_MAX_MS

RecordState = Literal["committed", "aborted", "open"]


class UntracedSession(NamedTuple):
    """A producer session of the ledger read that never wrote its `closed` session-end
    (auditor/stuck/untraced.py): killed, it may have sent records no ledger record names."""

    session: str
    last_ms: int  # the Kafka timestamp of its last ledger record (epoch ms)
    alive_ms: int | None  # the liveness it declared (None: none, probes before stops 64/65)
    # True when it wrote contract-v2 records (ranges, keys, failures): each ledger flush
    # ledgers everything it sent until then. False (contract v1, or nothing sent): it ledgers
    # delivery reports, so a record it sent at any time may still lack one.
    ledgers_sends: bool


@dataclass(frozen=True)
class StuckRow:
    """A source row in a stuck status, older than the rule's threshold."""

    key: str
    status: str
    age_seconds: float
    since: datetime | None = None  # the age column's value
    # where the row was read (PostgreSQL's ctid), for the re-check; None: no such address
    row_id: str | None = None
    # when the row was created (the binding's created column; the age column may be another,
    # e.g. updated_at); None: not known
    created: datetime | None = None


@dataclass(frozen=True)
class LocatedRecord:
    """A record of the topic whose business key is a stuck key.

    state: committed (visible to read_committed readers), aborted (only in an aborted
    transaction), open (at or past the last stable offset: its transaction is still open).
    run_id: the reconciliation run that read it, for an aborted record recalled from the
    auditor's memory (the state's `aborted` dataset; None in state written before the dataset
    named its runs).
    """

    key: str
    partition: int
    offset: int
    timestamp_ms: int | None
    state: RecordState = "committed"
    session: str | None = None
    seq: int | None = None
    run_id: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "offset": self.offset,
            "timestamp": ms_to_iso(self.timestamp_ms),
            "state": self.state,
            "session": self.session,
            "seq": self.seq,
        }

    def aborted_json(self) -> dict[str, Any]:
        """As a run read it only in an aborted transaction (the auditor's memory)."""
        shown = self.as_json()
        del shown["state"]
        return {**shown, "seen_by_run": self.run_id, "aborted": True}

    def is_of(self, entry: LedgerEntry) -> bool:
        """Whether `entry`'s ack is of this record: the same position and, where both say,
        the same producer session and sequence (an offset rewritten since held another)."""
        if (entry.partition, entry.offset) != (self.partition, self.offset):
            return False
        return self.session is None or (entry.session == self.session and (self.seq is None or entry.seq == self.seq))


@dataclass(frozen=True)
class LedgerEntry:
    """A producer-ledger entry of the binding's topic whose audit-id is a stuck key."""

    audit_id: str
    session: str
    seq: int
    # acked | unconfirmed | failed (v1, docs/contracts.md); v2: failed, acked-range (acked,
    # position unknown), sent (sent, never confirmed), from a `keys` record and the ranges
    status: str
    partition: int
    offset: int
    error: str | None
    persisted: str | None
    ts_ms: int | None
    to_ms: int | None = None  # v2: produced between ts_ms and to_ms
    # v2 acked ranges: when the ledger record saying so was written (its producer's clock). The
    # ack came no later; a send retried long after to_ms (a leader failover) was acked well after.
    acked_by_ms: int | None = None

    @property
    def produced_by_ms(self) -> int | None:
        """The latest it was produced (its producer's clock): the end of its v2 produce window,
        else its time."""
        return self.to_ms if self.to_ms is not None else self.ts_ms

    @property
    def acked_no_later_ms(self) -> int | None:
        """The latest the broker can have acked it (its producer's clock): the v2 ledger record
        that says so, else the end of its produce window, else its time (a v1 entry's: when its
        delivery report came)."""
        times = [t for t in (self.acked_by_ms, self.to_ms, self.ts_ms) if t is not None]
        return max(times) if times else None

    def as_json(self) -> dict[str, Any]:
        data = {
            "session": self.session,
            "seq": self.seq,
            "status": self.status,
            "partition": self.partition,
            "offset": self.offset,
            "error": self.error,
            "persisted": self.persisted,
            "at": ms_to_iso(self.ts_ms),
        }
        if self.to_ms is not None:
            data["until"] = ms_to_iso(self.to_ms)
        if self.acked_by_ms is not None:
            data["acked_by"] = ms_to_iso(self.acked_by_ms)
        return data


@dataclass(frozen=True)
class ProcessedMark:
    """A consumer-ledger `processed` mark of one (group, partition, offset) of the topic."""

    group: str
    partition: int
    offset: int
    consumer_session: str | None
    ts_ms: int | None
    # the reconciliation run that read it, when it is known from the auditor's memory only
    # (the consumer ledger deleted it since: recall_marks)
    seen_by_run: str | None = None
    # The latest other mark at the same position, when there is one (processed again, or a
    # mark of another record that held the offset before the broker rewrote it).
    latest_ms: int | None = None
    latest_session: str | None = None

    def merged(self, other: ProcessedMark) -> ProcessedMark:
        """The earliest of the two marks, carrying the latest one's time and session."""
        first = other if (other.ts_ms or 0) < (self.ts_ms or 0) else self
        times = [(self.latest_ms, self.latest_session), (other.latest_ms, other.latest_session)]
        times += [(self.ts_ms, self.consumer_session), (other.ts_ms, other.consumer_session)]
        latest_ms, latest_session = max(((ms, s) for ms, s in times if ms is not None), default=(None, None))
        if latest_ms == first.ts_ms:
            return replace(first, latest_ms=None, latest_session=None)
        return replace(first, latest_ms=latest_ms, latest_session=latest_session)

    def latest(self) -> ProcessedMark:
        """The latest mark at this position, as a mark of its own."""
        if self.latest_ms is None:
            return self
        return replace(self, consumer_session=self.latest_session, ts_ms=self.latest_ms, latest_ms=None)

    def as_json(self) -> dict[str, Any]:
        if self.seen_by_run is not None:
            return {"seen_by_run": self.seen_by_run}
        return {"consumer_session": self.consumer_session, "at": ms_to_iso(self.ts_ms)}

    def describe(self, with_time: bool = True) -> str:
        if self.seen_by_run is not None:
            return (
                f"marked in the consumer ledger, as reconciliation run {self.seen_by_run} read; deleted from it since"
            )
        return f"consumer session {self.consumer_session}" + (f", {ms_to_iso(self.ts_ms)}" if with_time else "")


@dataclass(frozen=True)
class PartitionState:
    partition: int
    low: int  # log start offset
    stable: int  # last stable offset
    high: int  # high watermark
    low_timestamp_ms: int | None = None  # timestamp of the first record still in the log
    # (producer session, seq) of that record when it has an audit header
    low_audit: tuple[str, int] | None = None
    # the leader's epoch (0: the partition has had one leader since it was created; None: not
    # known), and when the first record the current leader appended was written (None: none
    # yet, or not read). Every leader change came before that record.
    leader_epoch: int | None = None
    leader_since_ms: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "log_start": self.low,
            "last_stable": self.stable,
            "high_watermark": self.high,
            "oldest_record_at": ms_to_iso(self.low_timestamp_ms),
            "leader_epoch": self.leader_epoch,
            "current_leader_first_record_at": ms_to_iso(self.leader_since_ms),
        }


@dataclass
class GroupState:
    """One consumer group of the binding, read at diagnosis time."""

    group: str
    committed: dict[int, int] = field(default_factory=dict)  # partition -> committed offset
    members: int | None = None  # None: could not be described
    state: str | None = None
    # a simple consumer group: its consumers commit without joining (assign(), Flink's
    # KafkaSource), so it always reads as Empty with no members; None: could not be described
    simple: bool | None = None
    # the topic's partitions assigned to its members (None: not described, or an assignment
    # the client could not read)
    assigned: frozenset[int] | None = None
    # timestamp of the record at the committed offset (the oldest record the group still has to read)
    committed_timestamp_ms: dict[int, int | None] = field(default_factory=dict)
    marks_on_topic: int = 0  # processed marks of this group on the topic in the consumer ledger
    # per partition: the highest marked offset below the partition's log start (None: none)
    max_mark_below_low: dict[int, int] = field(default_factory=dict)
    # per partition: the lowest offset its consumer marked processed (absent: none). Below
    # it the group may have read records before its consumer was probed.
    first_mark: dict[int, int] = field(default_factory=dict)
    # when its consumer first marked a record of the topic processed (None: never)
    first_mark_ms: int | None = None
    # per partition: (first, last, reason) of offsets its consumer marked processed whose marks
    # the probe's ledger could not write (marks-lost records)
    lost_marks: dict[int, list[tuple[int, int, str | None]]] = field(default_factory=dict)
    # when the group's consumer last marked a record now below its partition's log start
    last_mark_below_low_ms: int | None = None
    # per partition, where the log start has passed the offset the group committed, confirmed
    # by a read of the committed offsets after the log start's
    overtaken: dict[int, Overtaken] = field(default_factory=dict)
    # per partition, what reconciliation runs saw of its committed offset, where the log was
    # not rewritten since (memory.recall_commits): it had gone that far, whatever its committed
    # offset says now (deleted or moved back since), and past which records while they were
    # in the log
    seen: dict[int, SeenCommits] = field(default_factory=dict)
    # per partition with no committed offset now, its offset's removal as __consumer_offsets
    # shows it (offsets_history): the group may have gone past any record before it
    removed: dict[int, RemovedOffsets] = field(default_factory=dict)
    # per partition, its commits and removals `__consumer_offsets` still holds, oldest first
    # (offsets_history); None: not read (the read failed: a note on the view says why)
    commits: dict[int, list[CommitRecord]] | None = None

    def probe_names_commits(self) -> bool:
        """A commit of the group on the topic names a probed session: its probes write the
        commit metadata (docs/contracts.md), so a commit naming none is a plain consumer's."""
        return names_sessions(self.commits)

    def unseen_position(self, partition: int) -> bool:
        """Its members read the partition but it has never committed there: where they are is
        not visible (with auto.offset.reset=latest they started at its end)."""
        return (
            bool(self.members)
            and self.assigned is not None
            and partition in self.assigned
            and (partition not in self.committed)
        )


@dataclass
class LedgerView:
    """Whether a ledger topic could be read, and from when on it is complete."""

    topic: str
    available: bool
    reason: str = ""  # why not available
    # not available because the cluster says the topic does not exist (asked by name): no probe
    # ever wrote it, or it was deleted; no later read will see more (service: not degraded)
    absent: bool = False
    # the ledger holds every entry written since this instant (epoch ms); 0: since the start
    complete_since_ms: int | None = 0
    entries_for_topic: int = 0  # producer ledger: entries of the binding's topic
    # producer ledger: from when it speaks for the topic, the earliest start of a probed
    # producer session that ledgered records of it (None: no session did). A row created
    # before it may have been produced before any producer was probed.
    covers_topic_from_ms: int | None = None
    # producer ledger, contract v2: the latest instant a range record (which names no keys)
    # says records of the topic were produced; None when there is none
    unattributed_to_ms: int | None = None
    # producer ledger: the sessions not seen closing (LocateResult.untraced_sessions)
    untraced_sessions: list[UntracedSession] = field(default_factory=list)


@dataclass
class ClusterView:
    """Everything read from Kafka for one diagnosis (one binding, one moment)."""

    topic: str
    now_ms: int
    kafka_error: str | None = None  # the topic or its offsets could not be read at all
    partitions: dict[int, PartitionState] = field(default_factory=dict)
    groups: dict[str, GroupState] = field(default_factory=dict)
    groups_error: str | None = None  # committed offsets could not be read
    # time.monotonic() once the committed offsets were read (trailing_marks waits from it)
    committed_read_at: float | None = None
    producer_ledger: LedgerView | None = None
    consumer_ledger: LedgerView | None = None
    retention_ms: int | None = None  # the topic's retention.ms (-1: forever)
    cleanup: TopicCleanup | None = None  # the topic's cleanup.policy (None: not read, see cleanup_error)
    cleanup_error: str | None = None
    offsets_retention_minutes: int | None = None  # the brokers' offsets.retention.minutes
    # how long a send's outcome can stay open (spark_jobs.send_outcome; 0: without limit)
    send_outcome_ms: int = SEND_OUTCOME_MS
    # producer sessions the clients topic shows with a transactional.id: their acks do not
    # say the record's transaction committed
    transactional_sessions: frozenset[str] = frozenset()
    # producer sessions the clients topic shows acking with acks=all: their acks say the high
    # watermark had passed the record (held_watermark)
    acks_all_sessions: frozenset[str] = frozenset()
    # why the clients topic was not read whole (None: it was): a session it does not show may
    # be transactional, and then its acks do not say its records' transactions committed
    clients_unread: str | None = None
    # the brokers' longest replica.lag.time.max.ms (held_watermark), and why it was assumed
    # when it could not be read
    replica_lag_max_ms: int = DEFAULT_REPLICA_LAG_MAX_MS
    replica_lag_note: str | None = None
    # probed consumer sessions' max.poll.interval.ms as the clients topic shows them, and
    # $AUDITOR_PROCESSING_BOUND_SECONDS in ms where set (None: not set), which caps it:
    # how long a session may still be processing what its last commit passed
    # (verdict_outcomes.still_processing)
    poll_intervals_ms: dict[str, int] = field(default_factory=dict)
    processing_cap_ms: int | None = None
    # per partition whose in-sync replicas were fewer than min.insync.replicas when read after
    # the second read of the log end: why its high watermark may stay put however long, above
    # records a leader acked alone (held_watermark); and why the in-sync replicas could not be
    # read (then any partition may be)
    stalled: dict[int, str] = field(default_factory=dict)
    stalled_error: str | None = None
    # per partition whose last stable offset is behind the high watermark: when the first
    # record of the open transaction was written
    open_transaction_since_ms: dict[int, int | None] = field(default_factory=dict)
    # per partition, the high watermark read again after the auditor's memory was read (None:
    # not read): an offset remembered at or past `high` and below this was written after the
    # view was taken; at or past this too, it lies beyond the log end: truncated
    high_after: dict[int, int] | None = None
    # epoch ms once the diagnosis had read the records (None: not known): the log cleaner may
    # have removed a tombstone until then (verdict_outcomes.compacted_since)
    read_done_ms: int | None = None
    records_scanned: int = 0
    keyed_records: int = 0  # records whose key the binding's record_key found
    record_key: str = "key"
    notes: list[str] = field(default_factory=list)
    topic_id: str | None = None  # the topic's id now (None: the cluster gives none, or not read)
    # why the topic's id could not be read (None: it was, or the cluster gives none): a
    # re-creation of the topic then goes unseen, and nothing tells it from a truncation
    topic_id_error: str | None = None
    # The topic was deleted and created again (auditor.pipelines.incarnations): records
    # produced up to this instant may have been in the deleted topic. None: no re-creation seen.
    recreated_until_ms: int | None = None
    recreated_reason: str = ""
    # The earliest instant the topic's current incarnation is known to have existed: its first
    # record's timestamp (within stamp_lag_ms) or the auditor's first sighting of its id,
    # whichever is earlier. A log starting at offset 0 holds everything since the topic was
    # created, but a topic deleted and created again before the auditor first saw its id
    # leaves no id to differ from: what was produced before this instant may have gone with
    # it. 0: no bound (not read; inline evidence). `incarnation_reason` says why it stands.
    incarnation_since_ms: int = 0
    # the oldest timestamp of the partitions' first records (offset 0's where the log starts
    # there, else the log start's; None: no record, or none read): kafka_view reads it
    first_record_ms: int | None = None
    incarnation_reason: str = ""
    # How far the source database's clock ran ahead of the auditor's when the stuck rows were
    # read (negative: behind), beyond the measurement's uncertainty and ordinary drift
    # (source.SourceClock); 0: within them, or not measured. Rows are stamped by that clock.
    source_clock_ahead_ms: int = 0
    # Where and when processed marks may be of records the broker lost (truncated and
    # rewritten partitions, found by a reconciliation rebuild: spark_jobs.mark_rules).
    mark_rules: list[MarkRule] = field(default_factory=list)
    # How long before its write a record of the topic may be stamped beyond the usual slack
    # (spark_jobs.record_times.stamp_lag_ms): 0 unless its producers were seen stamping records
    # well before writing them (`backdated_reason` says where); None: without limit, and then no
    # record's timestamp says when the records deleted before it were written.
    stamp_lag_ms: int | None = 0
    backdated_reason: str | None = None
    # The latest timestamp (ms) of a record of the topic without any audit header, as this
    # diagnosis read them or a reconciliation run did (state.json): a producer that is not
    # probed writes to the topic. None: none seen.
    unprobed_record_ms: int | None = None
    # The latest timestamp (ms) of a record this diagnosis read whose audit id is not its
    # binding key (a probe without key_fn on a binding keyed by a value field or a header),
    # and its producer session: that session's ledger names other ids than the items' keys.
    miskeyed_record_ms: int | None = None
    miskeyed_session: str | None = None

    def before_incarnation(self, ms: int) -> bool:
        """Whether something written at `ms` may have been in a topic of the same name deleted
        before the auditor first saw this one (incarnation_since_ms): compared without the
        clock margin, as the topic's first record bounds its creation from above only."""
        return ms < self.incarnation_since_ms

    def processing_bound_ms(self, session: str) -> tuple[int, str]:
        """How long after a commit the probed consumer `session` that made it may still be
        processing what the commit passed, and what says so: its max.poll.interval.ms as the
        clients topic shows it (librdkafka's default where it does not), capped by
        $AUDITOR_PROCESSING_BOUND_SECONDS where set."""
        shown = self.poll_intervals_ms.get(session)
        bound = DEFAULT_MAX_POLL_INTERVAL_MS if shown is None else shown
        source = (
            f"its max.poll.interval.ms, {bound / 1000:g} s"
            if shown is not None
            else f"max.poll.interval.ms, {bound / 1000:g} s by default (its probe's config does not set it, or the "
            "clients topic does not show it)"
        )
        if self.processing_cap_ms is not None and self.processing_cap_ms < bound:
            return (
                self.processing_cap_ms,
                f"AUDITOR_PROCESSING_BOUND_SECONDS, {self.processing_cap_ms / 1000:g} s",
            )
        return bound, source

    def marks_unclear_until(self, partition: int, offset: int) -> tuple[int | None, str]:
        """Up to when a processed mark at (partition, offset), and a record written there,
        may be of a record that is gone (the deleted topic's, or one the broker lost), and why;
        (None, "") when every mark there is of the record there now."""
        until, why = self.recreated_until_ms, self.recreated_reason
        for rule in covering(self.mark_rules, partition, offset):
            if until is None or rule.until_ms > until:
                until = rule.until_ms
                why = f"{rule.cause(self.topic)} (found by reconciliation)"
        return until, why

    def partition_complete_since_ms(self, state: PartitionState) -> int | None:
        """The partition holds every record produced since this instant (0: since the topic was
        created, and it was never seen re-created). None when it lost records (retention,
        deletion) and the timestamp of its oldest remaining record is unknown, or says nothing
        of when it was written (stamp_lag_ms None)."""
        since = 0 if state.low == 0 else state.low_timestamp_ms
        if since and self.stamp_lag_ms != 0:
            # the oldest record may have been written up to stamp_lag_ms after its timestamp
            since = None if self.stamp_lag_ms is None else since + self.stamp_lag_ms
        if since is None or self.recreated_until_ms is None:
            return since
        return max(since, self.recreated_until_ms)

    def topic_complete_since_ms(self) -> int | None:
        """The topic holds every record produced since this instant (partition_complete_since_ms
        of every partition)."""
        bound = 0 if self.recreated_until_ms is None else self.recreated_until_ms
        for state in self.partitions.values():
            since = self.partition_complete_since_ms(state)
            if since is None:  # all deleted, or the oldest record unreadable
                return None
            bound = max(bound, since)
        return bound


@dataclass(frozen=True)
class Diagnosis:
    verdict: str
    reason: str
    evidence: dict[str, Any]


def iso_to_ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


@dataclass(frozen=True)
class Sighting:
    """Where a reconciliation run saw a record with the item's key (the auditor's memory).

    lost: a later run found that offset rewritten (truncated by the broker); detected_run
    names that run. deleted_topic_until_ms: a run found the topic deleted and created again,
    the new topic's records stamped since this instant (state.json `topic_records_since`), and
    this record is stamped before it (or not at all): it was in the deleted topic, whose
    offsets the new one's records took again.
    """

    partition: int
    offset: int
    ts_ms: int | None
    run_id: str | None
    lost: bool = False
    detected_run: str | None = None
    deleted_topic_until_ms: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "offset": self.offset,
            "timestamp": ms_to_iso(self.ts_ms),
            "seen_by_run": self.run_id,
            "lost": self.lost,
            "detected_by_run": self.detected_run,
            "in_deleted_topic": self.deleted_topic_until_ms is not None,
        }


@dataclass(frozen=True)
class KeySightings:
    """Every record with the item's key that reconciliation runs saw (a producer's retry or an
    application's re-send makes several), by partition and offset.

    unplaced: how many more records with the key the runs counted (the key index's `n`) than
    positions the state keeps (the index keeps each run's first, the duplicates dataset the
    rest, and a rebuild may drop some): where they were is not known."""

    copies: tuple[Sighting, ...]
    unplaced: int = 0

    @property
    def first(self) -> Sighting:
        return self.copies[0]


@dataclass(frozen=True)
class MissingReport:
    """A reconciliation run reported the item's row missing: no record while the topic held
    everything since the row was created (the job never reports a row it cannot judge)."""

    run_id: str
    reported_at_ms: int  # the run's window upper bound: no record up to this instant
    read_to: dict[int, int] = field(default_factory=dict)  # partition -> offset the run had read up to

    def as_json(self) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "no_record_up_to": ms_to_iso(self.reported_at_ms),
            "read_to": {str(p): o for p, o in sorted(self.read_to.items())},
        }

    def topic_complete_since(self, view: ClusterView) -> bool:
        """Every record produced after the run is still in the log: no partition's log start
        has moved past where the run stopped reading it, and the topic was not seen re-created
        since the run."""
        if view.recreated_until_ms is not None and view.recreated_until_ms >= self.reported_at_ms:
            return False
        partitions = view.partitions
        return bool(partitions) and all(state.low <= self.read_to.get(p, 0) for p, state in partitions.items())


@dataclass
class KeyMemory:
    """What earlier reconciliation runs of the binding saw of the stuck keys."""

    sightings: dict[str, KeySightings] = field(default_factory=dict)
    missing: dict[str, MissingReport] = field(default_factory=dict)
    # per key, the records with it runs read only in aborted transactions (the `aborted`
    # dataset): LocatedRecords in state aborted, naming their run
    aborted: dict[str, tuple[LocatedRecord, ...]] = field(default_factory=dict)
    # producer sessions of the stuck keys' ledger entries of which runs read aborted records:
    # transactional, whatever the clients topic shows (their acks do not say a commit)
    aborting_sessions: dict[str, str | None] = field(default_factory=dict)  # session -> a run that saw it
    reason: str = ""  # why part of it could not be read ("" when all of it was)
