"""Phase 1 of a reconciliation run, and the data the phases hand on: the run's options and
laps, plan_run (which state to build on, which offsets to read, the source window), the
session settings of the run, RunInputs (phase 2's output) and RunState (phase 3's).
The phases that follow: reconcile_inputs.py, reconcile_new_state.py, reconcile_report.py,
reconcile_commit.py."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka.admin import AdminClient
from pyspark.sql import DataFrame, SparkSession

from spark_jobs.binding import Binding, identity_changes
from spark_jobs.commit_history import PassedSpan, SessionMark
from spark_jobs.common import cores, is_small, settings_applied, small_job_settings
from spark_jobs.failover_hold import (
    LeaderChange,
    dating_bound_ms,
    describe_hold,
    first_reading_change,
    follow_epochs,
    ledger_outcome_ms,
)
from spark_jobs.group_commits import forget
from spark_jobs.kafka_cleanup import TopicCleanup
from spark_jobs.kafka_offsets import (
    KafkaReadError,
    PartitionOffsets,
    admin_client,
    another_topic,
    epochs_led_before,
)
from spark_jobs.late_rows import LookedUp, SourceTable
from spark_jobs.ledger_ids import LEDGER_KINDS, LedgerId, extract_ledger_ids
from spark_jobs.mark_rules import MarkRule
from spark_jobs.reconcile_extract import (
    OffsetRange,
    ReconcileError,
    extract_topic_cleanup,
    extract_topic_id,
    extract_topic_offsets,
    find_rewritten_partitions,
)
from spark_jobs.reconcile_state import DATASETS, StateError, StateMeta, StateStore
from spark_jobs.reconcile_transform import empty_frame, is_empty_plan
from spark_jobs.record_times import Backdated
from spark_jobs.send_outcome import SEND_OUTCOME_MS, judging
from spark_jobs.watermark_hold import EVERY_ACK_MS, acks_judged_until

# Below this many new records the new side of a state join is broadcast, so state is
# scanned once without a shuffle. A broadcast is built in the driver: the bound keeps its
# memory small (a few MB of keys), and a run without earlier state never broadcasts (there
# is nothing to spare a shuffle of, and a first run reads the whole topic).
BROADCAST_NEW_ROWS = 200_000


@dataclass
class RunOptions:
    state_dir: str
    full: bool = False
    run_id: str | None = None
    max_findings: int = 10_000
    output_json: str | None = None
    output_jdbc_url: str | None = None
    findings_table: str = "reconcile_finding"
    now: datetime | None = None  # fixed clock for tests
    # Set once the run may no longer commit (the resident reconciler's deadline passed): the
    # run stops at its next phase and before its commit, whether or not Spark had a job to cancel.
    cancelled: threading.Event | None = None


class RunCancelled(RuntimeError):
    """The run was told to stop (RunOptions.cancelled) before it committed."""


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]


class Laps:
    """Seconds per phase of a run, for its result's `timings`; each lap is where a cancelled
    run stops (RunOptions.cancelled)."""

    def __init__(self, cancelled: threading.Event | None = None) -> None:
        self.timings: dict[str, float] = {}
        self._clock = time.monotonic()
        self._cancelled = cancelled
        self.observers: list[Callable[[], None]] = []  # called at each lap (executor_loss.ExecutorWatch)

    def __call__(self, name: str) -> None:
        now = time.monotonic()
        self.timings[name] = round(self.timings.get(name, 0.0) + now - self._clock, 3)
        self._clock = now
        for observe in self.observers:
            observe()
        self.check()

    def check(self) -> None:
        if self._cancelled is not None and self._cancelled.is_set():
            raise RunCancelled("the run was cancelled before its commit")


@dataclass
class RunPlan:
    """Phase 1: what the run builds on and what it reads (offsets, the source window)."""

    run_id: str
    store: StateStore
    meta: StateMeta  # the state this run builds on: empty on a full run or a rebuild
    memory: StateMeta | None  # rebuild only: the state earlier runs left, kept as evidence
    rewritten: dict[int, str]  # partition → why its offsets already read are no longer trusted
    kafka: dict[str, Any]  # extract_topic_offsets
    lower: datetime | None
    # The run's time by the driver's clock (or the fixed `now`): the horizons of what the
    # broker may have deleted, in the brokers' and producers' time, are counted from it.
    upper: datetime
    # The source window's upper bound: the rows created in (lower, source_upper] are read, and
    # `cutoff` (source_upper - grace) decides which may be missing. The source's clock where it
    # is behind the driver's (window_end), else `upper`.
    source_upper: datetime
    grace_seconds: float  # the binding's grace
    warnings: list[str]
    cleanup: TopicCleanup
    read_at_ms: int  # state.json's read_at_ms: the run's clock before it asked for the log ends
    topic_id: str | None = None  # the topic's id now
    # Why every record earlier runs read is gone: the topic was deleted and created again
    # (its id changed). None: it was not.
    recreated: str | None = None
    # state.json's topic_records_since: set when this run finds the topic created again
    topic_records_since: datetime | None = None
    # A full run over a state of the same identity: that state, whose findings (the last
    # run's) are the ones its own are new against. None: the previous state's.
    last_findings_of: StateMeta | None = None
    identity: dict[str, str] = field(default_factory=dict)  # state.json's identity: the binding's
    timestamp_zone: str = "UTC"  # the binding's: state.json keeps it
    # how long a send's outcome can stay open (spark_jobs.send_outcome; 0: without limit)
    send_outcome_ms: int = SEND_OUTCOME_MS
    # the latest time a contract-v2 ack may carry and be judged by this run: one after it may be
    # of a record a leader still holds beyond the high watermark read (spark_jobs.watermark_hold)
    acks_judged_until_ms: int = EVERY_ACK_MS
    # per kind, the ledger topic the run reads and its id, read before its offsets
    ledger_ids: dict[str, LedgerId] = field(default_factory=dict)
    # per kind, why the ledger topic the run reads is read from its start: it was deleted
    # and created again since earlier runs read it (forget_recreated_ledgers)
    ledgers_recreated: dict[str, str] = field(default_factory=dict)
    # The run's one admin client (the binding's servers and security settings): every admin
    # read of the cluster, from plan_run to the checks after the reads, is asked on it. A new
    # client bootstraps (connections, API versions, metadata) before its first answer. Reads a
    # group coordinator answers keep clients of their own (group_offsets).
    admin: AdminClient = field(kw_only=True, repr=False, compare=False)
    # the partitions' leader epochs after this run, when they were read (the driver's clock),
    # and the leader changes that may still hold rows (spark_jobs.failover_hold)
    leader_epochs: dict[int, int] = field(default_factory=dict)
    leader_epochs_at_ms: int | None = None
    leader_changes: list[LeaderChange] = field(default_factory=list)
    # the producer ledger's epochs after this run (state.json's ledger_epochs); its changes are
    # in leader_changes
    ledger_epochs: dict[str, dict[int, int]] = field(default_factory=dict)
    # read_at_ms to the microsecond: the source window ends as long before the driver's `upper`
    # as the plan took from here (reconcile_inputs)
    reads_began: datetime = field(kw_only=True)

    @property
    def topic(self) -> OffsetRange:
        topic: OffsetRange = self.kafka["topic"]
        return topic

    @property
    def previous(self) -> StateMeta:
        """The state the last run left (findings for is_new, lost sightings)."""
        return self.memory or self.meta

    @property
    def findings_before(self) -> StateMeta:
        """The state whose findings this run's are new against (flag_new)."""
        return self.last_findings_of or self.previous

    @property
    def broadcast_new(self) -> bool:
        return bool(self.meta.run_id) and self.topic.total < BROADCAST_NEW_ROWS

    @property
    def records_seen(self) -> int:
        """Records of the topic and both ledgers that the state holds and this run reads, at
        most: earlier runs' end offsets count from offset 0."""
        previous = self.previous
        before = (previous.topic_offsets, previous.producer_ledger_offsets, previous.consumer_ledger_offsets)
        now = (self.topic, self.kafka["producer_ledger"], self.kafka["consumer_ledger"])
        return sum(sum(offsets.values()) for offsets in before) + sum(r.total for r in now)

    @property
    def small(self) -> bool:
        """Little new data, or little data at all: the run is mostly fixed cost per task and job."""
        return self.broadcast_new or is_small(self.records_seen)

    def small_partitions(self, spark: SparkSession) -> int | None:
        """A small run's shuffles and written datasets: as many partitions as there are
        cores (run_settings, RunState.partitions). None: as the session and plan give them."""
        return cores(spark) if self.small else None

    @property
    def mode(self) -> str:
        return "rebuild" if self.memory else "incremental" if self.meta.run_id else "full"

    @property
    def cutoff(self) -> datetime:
        """Rows created up to here with no record may be missing: the source window's upper
        bound less the grace."""
        return self.source_upper - timedelta(seconds=self.grace_seconds)

    @property
    def upper_high(self) -> datetime | None:
        """The latest source window upper bound of the incremental runs this one follows
        (state.json's upper_high, or the last run's window_upper in a state written before it
        was kept); None for a full run or a rebuild, which start it over."""
        if self.mode != "incremental":
            return None
        latest = self.meta.upper_high or self.meta.window_upper
        return datetime.fromisoformat(latest) if latest else None

    @property
    def latest_upper(self) -> datetime:
        """The later of this run's source window upper bound and upper_high: state.json's
        upper_high after this run, and where a stepped-back run looks deleted rows up to."""
        return max(self.source_upper, self.upper_high or self.source_upper)

    @property
    def kept_cutoff(self) -> datetime | None:
        """Where the clock the window is read by stepped back (this run's upper bound before
        upper_high): the cutoff the latest bound gives with the binding's grace, up to which
        what the last run reported stays reported (reconcile_report.reported_before); None
        when it did not (nearly always)."""
        high = self.upper_high
        if high is None or self.source_upper >= high:
            return None
        return high - timedelta(seconds=self.grace_seconds)


@dataclass
class RunInputs:
    """Phase 2: this run's new data, read and parsed."""

    records: DataFrame  # committed records of the planned offsets (RECORD_SCHEMA + header_status)
    all_records: DataFrame  # the same read_uncommitted where transactions are in use
    new_aborted: DataFrame
    totals: dict[str, int]  # n, keyed, RECORD_COUNTS
    sequenced: bool  # a record read may carry an audit session and sequence
    unverifiable_until: datetime | None
    marks_lost_until: datetime | None  # records written up to here are never `unprocessed`
    first_marks: dict[str, dict[int, int]]  # StateMeta.first_marks, with this run's marks
    first_marks_frame: DataFrame  # the same, a row per group and partition (FIRST_MARK_SCHEMA)
    mark_rules: list[MarkRule]  # where and when marks may be of records the broker lost (reconcile_rewrites)
    entries_lost_until: datetime | None  # producer-ledger entries up to here may be gone unread
    compacted_until: datetime | None  # compacted topic: acked records up to here may be cleaned away
    # ... and every record of an item written up to here (compaction_horizon)
    keys_emptied_until: datetime | None
    checkpoints: dict[int, list[int]]
    old_source: DataFrame
    window_rows: DataFrame  # the source rows of this run's window, one per key
    producer_entries: DataFrame
    producer_bounds: DataFrame
    processed: DataFrame
    committed: DataFrame
    groups: DataFrame
    # this run's marks-lost ranges (LOST_MARKS_SCHEMA): marks made and never written; None: none read
    lost_marks: DataFrame | None = None
    # offsets a commit naming no probed session took a group past (PROCESSED_INTERVAL_SCHEMA,
    # reconcile_extract.plain_commits): a plain instance of the group may have processed them
    plain_passed: DataFrame | None = None
    # offsets a probed session that did not close took its group past above its highest mark on
    # the partition, in this run or an earlier one and not settled since (PROCESSED_INTERVAL_SCHEMA,
    # reconcile_inputs.still_unjudged): it may have died with their marks, or be processing them
    died_passed: DataFrame | None = None
    # the same with each span's session, for state.json (StateMeta.passed_unjudged)
    passed_unjudged: list[PassedSpan] = field(default_factory=list)
    # the consumer sessions whose `closed` session-end this run read (StateMeta.sessions_closed)
    sessions_closed: list[str] = field(default_factory=list)
    # the highest marks of the sessions with spans in passed_unjudged (StateMeta.session_marks)
    session_marks: list[SessionMark] = field(default_factory=list)
    # until when (epoch ms) the newest span a session committed within its processing bound may
    # still be in its hands; None: none waits for that
    processing_until_ms: int | None = None
    # the topic's producers stamp records well before writing them (record_times); kept in state.json
    backdated: Backdated | None = None
    # records past the last stable offset, behind an open transaction (reconcile_inputs.read_held)
    held: DataFrame | None = None
    # the source table the window was read from: orphan candidates' keys are looked up in it (late_rows)
    source: SourceTable | None = None
    # StateMeta.unprobed_record_ms with this run's records
    unprobed_record_ms: int | None = None


@dataclass
class RunState:
    """Phase 3: the state after this run (datasets written under its id and read back)."""

    store: StateStore
    laps: Laps
    # At most this many partitions (and files) per dataset written, or None: as the plan
    # gives them. A small run's datasets are unions of several finders' or branches'
    # outputs, each in its own partitions (22 tasks and files for the findings of a
    # handful of records), and each task and file is fixed cost in the write and every
    # read after it.
    partitions: int | None = None
    frames: dict[str, DataFrame] = field(default_factory=dict)
    datasets: dict[str, str] = field(default_factory=dict)
    key_deltas: list[str] = field(default_factory=list)
    source_deltas: list[str] = field(default_factory=list)
    # find_all's: the keys of acked records the broker lost, and of records a run cannot read yet
    # (count_findings leaves their rows out of the unverifiable ones, as find_missing does)
    lost_acks: DataFrame | None = None
    held: DataFrame | None = None
    # the windows of `created` leader changes hold, each with the keys it judges anyway
    # (reconcile_report.late_rows_held; None: no change holds rows)
    held_late: list[tuple[tuple[datetime, datetime], DataFrame]] | None = None
    # how far the pending rows were looked up in the source after this run (late_rows.LookedUp)
    rows_looked_up: LookedUp = field(default_factory=LookedUp)

    def keep(self, name: str, df: DataFrame) -> DataFrame:
        """Write a dataset of the new state; returns it read back."""
        self.laps("prepare")
        if self.partitions is not None:
            df = df.coalesce(self.partitions)
        self.datasets[name], self.frames[name] = self.store.write_dataset(df, name)
        self.laps(f"state.{name}")
        return self.frames[name]

    def keep_previous(self, spark: SparkSession, name: str, meta: StateMeta) -> DataFrame:
        """The dataset stands as `meta`'s run wrote it: referenced, not written again (an
        absent one reads as empty and stays absent)."""
        self.frames[name] = self.store.dataset(spark, meta, name)
        if name in meta.datasets:
            self.datasets[name] = meta.datasets[name]
        return self.frames[name]

    def keep_unless_empty(self, name: str, inputs: Sequence[DataFrame], build: Callable[[], DataFrame]) -> DataFrame:
        """keep(name, build()), where `inputs` are the frames without whose rows the dataset
        has none: when the optimizer proves every one empty (no ledger, group or transaction
        in this binding, see local_frame), nothing is built or written. An absent dataset
        reads as empty."""
        if all(is_empty_plan(df) for df in inputs):
            self.frames[name] = empty_frame(inputs[0].sparkSession, DATASETS[name])
            return self.frames[name]
        return self.keep(name, build())


def run_settings(spark: SparkSession, plan: RunPlan) -> dict[str, str]:
    """The session settings of this run that differ from the job's defaults. The source
    table's size is not known before it is read: a small topic against a large table is
    read interpreted and joined without adaptive execution too."""
    return small_job_settings(spark, plan.records_seen, little_new=plan.broadcast_new)


def run_settings_applied(spark: SparkSession, plan: RunPlan) -> AbstractContextManager[dict[str, str]]:
    """run_settings() set on the session for the run's duration, then restored."""
    return settings_applied(spark, run_settings(spark, plan))


def ledgers_known(binding: Binding, meta: StateMeta) -> dict[str, dict[str, dict[int, int]]]:
    """Per ledger kind, every ledger topic the state's runs read and where they stopped:
    its ledgers_read, and the last ledger read by a state written before ledgers_read was
    kept (the one the binding names when that state did not keep its topic either)."""
    known = {kind: {t: dict(parts) for t, parts in meta.ledgers_read.get(kind, {}).items()} for kind in LEDGER_KINDS}
    for kind, named in (("producer", binding.producer_ledger_topic), ("consumer", binding.consumer_ledger_topic)):
        read: str | None = getattr(meta, f"{kind}_ledger_topic")
        offsets: dict[int, int] = getattr(meta, f"{kind}_ledger_offsets")
        if offsets:
            known[kind].setdefault(named if read is None else read, dict(offsets))
    return known


def resume_ledgers(binding: Binding, meta: StateMeta) -> list[str]:
    """Point the state's ledger offsets at the ledger topics the binding names now: where
    earlier runs stopped reading that topic (a run that did not read it, or read another,
    keeps them: what they read is in the datasets, and read again it would count twice),
    else its start (records it deleted before that count as lost, as on a first run).
    Returns a warning per ledger changed."""
    warnings = []
    known = ledgers_known(binding, meta)
    for kind, named in (("producer", binding.producer_ledger_topic), ("consumer", binding.consumer_ledger_topic)):
        read = getattr(meta, f"{kind}_ledger_topic")
        offsets: dict[int, int] = getattr(meta, f"{kind}_ledger_offsets")
        resumed = dict(known[kind].get(named, {}))
        setattr(meta, f"{kind}_ledger_offsets", resumed)
        if read is not None and read != named and (offsets or resumed):
            where = "from where earlier runs stopped reading it" if resumed else "from its start"
            warnings.append(f"the {kind} ledger is now {named} (earlier runs read {read}): it is read {where}")
    meta.ledgers_read = known
    return warnings


def forget_recreated_ledgers(
    binding: Binding, meta: StateMeta, ids: dict[str, LedgerId]
) -> tuple[dict[str, str], list[str]]:
    """Forget where earlier runs stopped reading a ledger topic the run reads that was deleted
    and created again since (another id than the state keeps): those offsets are of the
    deleted topic, and the new one is read from its start (resume_ledgers). What earlier runs
    read of the deleted one stays in the datasets, counted once. Returns, per kind of ledger
    created again, why, and the warnings.

    A ledger whose id the state does not keep (a state written before ids were kept, a
    cluster without topic ids, an id that could not be read when it was read) is resumed
    where earlier runs stopped, as before: read again from its start, every mark and entry
    in it would be counted a second time. Raises ReconcileError when the state keeps the id
    and the one now cannot be read: then nothing tells the offsets are of this topic.
    """
    recreated: dict[str, str] = {}
    warnings: list[str] = []
    known = ledgers_known(binding, meta)
    for kind, ledger in ids.items():
        kept = meta.ledger_ids.get(kind, {}).get(ledger.topic)
        if ledger.error is not None:
            if kept and known[kind].get(ledger.topic):
                raise ReconcileError(
                    f"the {kind} ledger {ledger.topic}'s id could not be read, to tell whether it was deleted and "
                    f"created again since run {meta.run_id} read it: {ledger.error}; nothing was reported, the "
                    "incremental state is unchanged: run again once it can be read"
                )
            warnings.append(
                f"the {kind} ledger {ledger.topic}'s id could not be read, so its deletion and re-creation before the "
                f"next run would go unseen: {ledger.error}"
            )
            continue
        if not another_topic(kept, ledger.id):
            continue
        recreated[kind] = (
            f"the {kind} ledger {ledger.topic} was deleted and created again since run {meta.run_id} read it (topic "
            f"id {kept}, now {ledger.id})"
        )
        meta.ledgers_read.get(kind, {}).pop(ledger.topic, None)
        meta.ledger_ids[kind].pop(ledger.topic)
        if getattr(meta, f"{kind}_ledger_topic") in (ledger.topic, None):
            setattr(meta, f"{kind}_ledger_offsets", {})
        warnings.append(
            f"{recreated[kind]}: the new topic is read from its start; what earlier runs read of the deleted one is "
            "kept"
        )
    return recreated, warnings


# A source clock behind the driver's by at least this much is named in the run's warnings
# (less is the time the query took, or ordinary drift).
CLOCK_NOTE_SECONDS = 5.0


def window_end(driver_now: datetime, source_now: datetime) -> tuple[datetime, list[str]]:
    """The source window's upper bound, and notes for the run's warnings.

    The rows' created column is stamped by the source's clock (a default of now(), or an
    application writing its own time). The driver's clock ahead of it by more than the
    grace would put rows committed a moment ago below the cutoff, still in flight, and
    report them `missing`. So the window ends at the earlier of the two clocks: the driver's
    (or the run's fixed `now`), or the database's where it is behind."""
    if source_now >= driver_now:
        return driver_now, []
    behind = (driver_now - source_now).total_seconds()
    notes = (
        [f"the source database's clock is {behind:.0f}s behind this driver's: the window ends at the database's time"]
        if behind >= CLOCK_NOTE_SECONDS
        else []
    )
    return source_now, notes


def plan_run(binding: Binding, options: RunOptions, laps: Laps) -> RunPlan:
    """Which state to build on (a rebuild when offsets already read were rewritten), which
    offsets to read, and the source window (its upper bound as the driver's clock gives it:
    extract_inputs moves it to the source's clock where that is behind)."""
    run_id = options.run_id or new_run_id()
    store = StateStore(options.state_dir, binding.name, run_id)
    # the run's admin client (RunPlan.admin): made first, it bootstraps while the state is read
    admin = admin_client(binding.bootstrap_servers, binding.kafka_config)
    warnings: list[str] = []
    unreadable = False
    try:
        earlier: StateMeta | None = store.read_meta()
    except StateError:
        if not options.full:
            raise  # an incremental run cannot build on it
        earlier, unreadable = None, True  # the state a full run starts over from is unreadable: nothing known
        warnings.append(
            "the reconciliation state could not be read: where partitions were rewritten, whether the topic's "
            "producers were seen stamping records before writing them, and whether earlier runs read records of a "
            "producer that is not probed, is not known"
        )
    changed = [] if options.full or earlier is None else identity_changes(earlier.identity, binding.identity())
    # A created column without a time zone is read in the binding's zone: the window's earlier
    # bounds, taken in another zone, no longer say which rows were read. A state from before
    # the zone was kept read such a column as UTC.
    earlier_zone = (earlier.timestamp_zone or "UTC") if earlier is not None else binding.timestamp_zone
    if not options.full and earlier_zone != binding.timestamp_zone:
        changed.append(f"timestamp_zone {earlier_zone!r} → {binding.timestamp_zone!r}")
    if changed:
        # The state is of another topic, key or table: nothing in it is of this binding's
        # records or rows (its sightings would be taken for lost records, its pending rows
        # for missing ones); or its rows were read in another zone. The run starts over, as
        # a full one.
        warnings.append(
            f"the binding changed since its state was built ({'; '.join(changed)}): the run starts over from the "
            "topic's and the ledgers' starts, as a --full run"
        )
    last_findings_of: StateMeta | None = None
    if options.full or changed or earlier is None:
        # A full run starts over, but where the broker rewrote partitions is the topic's
        # history, not the state's: its records cannot tell it again, and the lost records'
        # marks are still in the consumer ledger it reads from its start. Of another topic's
        # state, nothing is kept.
        meta = StateMeta()
        # Its findings are new against the last run's when that run's state is of the same
        # topic, key and table (known, and unchanged): a finding reported again is not new.
        if earlier is not None and earlier.run_id and earlier.identity:
            last_findings_of = None if identity_changes(earlier.identity, binding.identity()) else earlier
        if earlier is not None and earlier.identity.get("topic", binding.topic) == binding.topic:
            meta.marks_rewritten, meta.backdated = earlier.marks_rewritten, earlier.backdated
            meta.unprobed_record_ms = earlier.unprobed_record_ms
        if earlier is not None:  # a group's commits naming sessions is the group's, whatever the topic
            meta.sessions_named = earlier.sessions_named
    else:
        meta = earlier
    cleanup = extract_topic_cleanup(binding, admin)
    # When the run began to read the topic (its id, then its log ends): the run's clock (a
    # test's fixed `now` included: the story it tells is then one timeline). Taken before the
    # id, so a topic created again after it asked is never taken for the one read.
    reads_began = options.now or datetime.now(UTC)
    read_at_ms = int(reads_began.timestamp() * 1000)
    if unreadable:
        # Earlier runs may have read records without audit headers: as if one was written now.
        meta.unprobed_record_ms = read_at_ms
    id_error: KafkaReadError | None = None
    try:
        current_id = extract_topic_id(binding, admin)
    except KafkaReadError as exc:  # then a re-creation goes unseen this run (the checkpoints still see most)
        current_id, id_error = None, exc
        warnings.append(f"the topic's id could not be read, so a re-creation of it would go unseen: {exc}")
    recreated = None
    if another_topic(meta.topic_id, current_id):
        recreated = (
            f"topic {binding.topic} was deleted and created again since run {meta.run_id} (topic id {meta.topic_id}, "
            f"now {current_id})"
        )
        rewritten = dict.fromkeys(meta.topic_offsets or [0], recreated)
    else:
        rewritten = find_rewritten_partitions(binding, admin, meta, cleanup.compacted)
        if rewritten and id_error is not None and meta.topic_id:
            # A truncation makes what earlier runs saw lost by the broker; a topic deleted and
            # created again does not. Only the id tells them apart: publish nothing.
            raise ReconcileError(
                f"records of topic {binding.topic!r} that earlier runs read are gone or rewritten, and its id "
                f"could not be read to tell a re-created topic from a truncation: {id_error}"
            )
    memory: StateMeta | None = None
    if rewritten:
        memory = meta
        meta = StateMeta(
            unverifiable_until=memory.unverifiable_until,
            marks_lost_until=memory.marks_lost_until,
            entries_lost_until=memory.entries_lost_until,
            keys_emptied_until=memory.keys_emptied_until,
            emptied_tracked=memory.emptied_tracked,
            marks_rewritten=memory.marks_rewritten,
            backdated=memory.backdated,
            unprobed_record_ms=memory.unprobed_record_ms,
            first_marks=memory.first_marks,  # the consumer was probed there, whatever the records
            # offsets of rewritten partitions (all of a re-created topic) now hold other records
            group_commits={} if recreated else forget(memory.group_commits, rewritten),
            unproven_commits={} if recreated else memory.unproven_commits,
            sessions_named=memory.sessions_named,
            # what earlier runs left unjudged, where the offsets still hold the records they passed
            passed_unjudged=[] if recreated else [s for s in memory.passed_unjudged if s[1] not in rewritten],
            session_marks=[] if recreated else [m for m in memory.session_marks if m[1] not in rewritten],
            sessions_closed=memory.sessions_closed,
        )
    if recreated and memory is not None:
        # Nothing was lost by the broker: what earlier runs saw was delivered, and went with
        # the old topic as if retention had deleted it (the rebuild keeps all of it). The
        # ledgers are not read again: the marks and entries earlier runs read are of the old
        # topic's offsets, which the new topic's records take again.
        meta.producer_ledger_offsets, meta.consumer_ledger_offsets = (
            memory.producer_ledger_offsets,
            memory.consumer_ledger_offsets,
        )
        meta.producer_ledger_topic, meta.consumer_ledger_topic = (
            memory.producer_ledger_topic,
            memory.consumer_ledger_topic,
        )
        meta.ledgers_read, meta.ledger_ids = memory.ledgers_read, memory.ledger_ids
        warnings.append(
            f"{recreated}: its records went with it; the key index keeps what earlier runs saw of them "
            "(delivered, not missing), and the new topic is read from its start"
        )
    else:
        warnings += [
            f"{binding.topic}/{p}: records already read were truncated or rewritten ({reason}); every partition "
            "is read again from its log start"
            for p, reason in sorted(rewritten.items())
        ]
    ledger_ids = extract_ledger_ids(binding, admin)
    ledgers_recreated, ledger_warnings = forget_recreated_ledgers(binding, meta, ledger_ids)
    warnings += ledger_warnings
    warnings += resume_ledgers(binding, meta)
    if judged := judging(binding.send_outcome_ms):
        warnings.append(judged)
    kafka = extract_topic_offsets(binding, admin, meta, read_before=memory.topic_offsets if memory else None)
    if kafka["history_note"]:
        warnings.append(kafka["history_note"])
    # after the log ends, which the in-sync replicas speak for
    acks_judged_until_ms, hold_notes = acks_judged_until(admin, binding.topic, read_at_ms)
    warnings += hold_notes
    epochs_at_ms = read_at_ms if options.now else int(time.time() * 1000)
    # Compared with the last reading of the same topic, whatever the run builds on (a full
    # run or a rebuild too): a leader change is the cluster's history, not the state's.
    # (on a full run `recreated` is not looked for: the ids tell it)
    same_topic = (
        earlier is not None
        and earlier.identity.get("topic", binding.topic) == binding.topic
        and not another_topic(earlier.topic_id, current_id)
    )
    before = earlier if same_topic and not recreated else None
    kept = earlier.leader_changes if earlier is not None else []
    grace_ms = int(binding.grace_seconds * 1000)
    leader_epochs, leader_changes, change = follow_epochs(
        before.leader_epochs if before else None,
        before.leader_epochs_at_ms if before else None,
        [c for c in kept if c.ledger is None] if before else [],
        {p: o.leader_epoch for p, o in kafka["watermarks"].items()},
        epochs_at_ms,
        grace_ms,
        binding.send_outcome_ms,
    )
    if change is not None:
        warnings.append(describe_hold(change, binding.topic, binding.send_outcome_ms))
    ledger_epochs, ledger_changes, ledger_warnings = follow_ledger_epochs(
        binding,
        admin,
        earlier,
        ledger_ids.get("producer"),
        "producer" in ledgers_recreated,
        kafka["producer_ledger_ends"],
        epochs_at_ms,
    )
    warnings += ledger_warnings
    leader_changes += ledger_changes
    laps("kafka_offsets")
    upper = options.now or datetime.now(UTC)
    if meta.window_upper:
        lower: datetime | None = datetime.fromisoformat(meta.window_upper) - timedelta(seconds=binding.lookback_seconds)
    else:
        lower = binding.since
    return RunPlan(
        run_id,
        store,
        meta,
        memory,
        rewritten,
        kafka,
        lower,
        upper,
        upper,  # source_upper, until extract_inputs reads the source's clock
        binding.grace_seconds,
        warnings,
        cleanup,
        read_at_ms,
        current_id,
        recreated,
        identity=binding.identity(),
        send_outcome_ms=binding.send_outcome_ms,
        acks_judged_until_ms=acks_judged_until_ms,
        timestamp_zone=binding.timestamp_zone,
        last_findings_of=last_findings_of,
        ledger_ids=ledger_ids,
        ledgers_recreated=ledgers_recreated,
        admin=admin,
        leader_epochs=leader_epochs,
        leader_epochs_at_ms=epochs_at_ms,
        leader_changes=leader_changes,
        ledger_epochs=ledger_epochs,
        reads_began=reads_began,
    )


def ledger_reading_before(
    earlier: StateMeta | None, topic: str, id_now: str | None, recreated: bool
) -> tuple[dict[int, int] | None, int | None, list[LeaderChange]]:
    """The last reading of the producer ledger `topic`'s epochs (None: none to compare with),
    when it was taken, and the ledger's changes it kept. None where no earlier run read them (a
    binding's first run, a state from before they were kept), or where the ledger was deleted
    and created again since (`recreated`, forget_recreated_ledgers' finding on an incremental
    run; or its id now, `id_now`, another than the one the earlier state kept: a full run or a
    rebuild starts from a state that keeps no ids)."""
    if earlier is None or earlier.leader_epochs_at_ms is None or topic not in earlier.ledger_epochs:
        return None, None, []
    if recreated or another_topic(earlier.ledger_ids.get("producer", {}).get(topic), id_now):
        return None, None, []
    kept = [c for c in earlier.leader_changes if c.ledger == topic]
    return earlier.ledger_epochs[topic], earlier.leader_epochs_at_ms, kept


def follow_ledger_epochs(
    binding: Binding,
    admin: AdminClient,
    earlier: StateMeta | None,
    ledger: LedgerId | None,
    recreated: bool,
    ends: dict[int, PartitionOffsets],
    now_ms: int,
) -> tuple[dict[str, dict[int, int]], list[LeaderChange], list[str]]:
    """The producer ledger's side of the leader-change hold (failover_hold): state.json's
    ledger_epochs after this run, the ledger's changes that may still hold rows, and the run's
    warnings. Its epochs are compared with the last reading of the same ledger topic
    (ledger_reading_before); without one, a change is dated from the ledger's own records."""
    topic = binding.producer_ledger_topic
    grace_ms = int(binding.grace_seconds * 1000)
    outcome_ms = ledger_outcome_ms(binding.send_outcome_ms)
    now = {p: o.leader_epoch for p, o in ends.items()}
    before, before_ms, kept = ledger_reading_before(earlier, topic, ledger.id if ledger else None, recreated)
    warnings: list[str] = []
    first = None
    if before is None:
        # the probes' ledger producer's records are appended within librdkafka's defaults' bound
        since = dating_bound_ms(now_ms, grace_ms, outcome_ms, SEND_OUTCOME_MS)
        try:
            led = epochs_led_before(admin, binding.bootstrap_servers, binding.kafka_config, topic, ends, since)
        except KafkaReadError as exc:
            led = set()
            warnings.append(f"the producer ledger {topic}'s leaders could not be dated: {exc}")
        first = first_reading_change(now, led, since, now_ms, topic)
    epochs, changes, change = follow_epochs(
        before, before_ms, kept, now, now_ms, grace_ms, outcome_ms, first=first, ledger=topic
    )
    if change is not None:
        warnings.append(describe_hold(change, binding.topic, outcome_ms, first_reading=first is not None))
    return {topic: epochs} if epochs else {}, changes, warnings
