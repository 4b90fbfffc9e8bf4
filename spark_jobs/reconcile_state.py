"""Incremental state of one binding's reconciliation, kept as Parquet under a state dir.

Layout (per binding):

    <state_dir>/<binding>/            state_dir: a path or a URI (spark_jobs/state_location.py)
      state.json                      the committed pointer, replaced atomically at the end
      keys/<run_id>/                  per-key index delta of each run (KEY_INDEX_SCHEMA)
      source/<run_id>/                source rows first seen in each run (SOURCE_ROW_SCHEMA)
      runs/<run_id>/<dataset>/        the small per-run datasets (DATASETS)

A run reads the datasets named by state.json, writes new ones under its own run id and only
then replaces state.json; a failed run leaves the previous state untouched. When there are
more than COMPACT_AFTER deltas of a kind, the newest ones are merged into one, by size tiers
(deltas_to_merge): the large delta of a full run is rewritten only once the deltas after it
together outweigh it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from spark_jobs.commit_history import PassedSpan, SessionMark
from spark_jobs.executor_loss import runs_locally
from spark_jobs.failover_hold import LeaderChange
from spark_jobs.group_commits import GroupCommits, Unproven, commits_from_json, commits_to_json
from spark_jobs.reconcile_transform import (
    ABORTED_SCHEMA,
    CANDIDATE_SCHEMA,
    FINDING_SCHEMA,
    INTERVAL_SCHEMA,
    LEDGER_BOUND_SCHEMA,
    LEDGER_ENTRY_SCHEMA,
    LOST_SIGHTING_SCHEMA,
    PROCESSED_INTERVAL_SCHEMA,
    RECORD_SCHEMA,
    REPROCESSED_SCHEMA,
    SEQ_TIMES_SCHEMA,
    SOURCE_ROW_SCHEMA,
    empty_frame,
)
from spark_jobs.record_times import Backdated
from spark_jobs.state_location import StateLocation, StateLocationError
from spark_jobs.unprobed import unprobed_of

STATE_FORMAT = 1
COMPACT_AFTER = 8
DATASETS: dict[str, StructType] = {
    "pending_source": SOURCE_ROW_SCHEMA,
    "orphan_candidates": RECORD_SCHEMA,
    "duplicates": RECORD_SCHEMA,
    "aborted": ABORTED_SCHEMA,
    "seq_coverage": INTERVAL_SCHEMA,
    "seq_times": SEQ_TIMES_SCHEMA,
    "ledger_open": LEDGER_ENTRY_SCHEMA,
    "ledger_bounds": LEDGER_BOUND_SCHEMA,
    "processed_coverage": PROCESSED_INTERVAL_SCHEMA,
    # offsets a group's consumer marked processed whose marks its ledger never wrote (marks-lost)
    "marks_lost": PROCESSED_INTERVAL_SCHEMA,
    "reprocessed": REPROCESSED_SCHEMA,
    "unprocessed_candidates": CANDIDATE_SCHEMA,
    "findings": FINDING_SCHEMA,
    "lost_sightings": LOST_SIGHTING_SCHEMA,
    # tombstones (records without a value) of keys, read by any run: the items deleted
    "tombstones": RECORD_SCHEMA,
}


class StateError(RuntimeError):
    """The state dir cannot be used (unreadable, another format)."""


@dataclass
class StateMeta:
    """What state.json records: where each run stopped reading, and the datasets."""

    run_id: str | None = None
    topic_offsets: dict[int, int] = field(default_factory=dict)
    producer_ledger_offsets: dict[int, int] = field(default_factory=dict)
    consumer_ledger_offsets: dict[int, int] = field(default_factory=dict)
    # The ledger topics those offsets are of (None: a state written before they were kept).
    producer_ledger_topic: str | None = None
    consumer_ledger_topic: str | None = None
    # Per ledger kind ("producer", "consumer"), every ledger topic a run read and where it
    # stopped reading it ({kind: {topic: {partition: offset}}}): a run that does not read a
    # ledger (no consumer group, a ledger topic that does not exist) keeps it, and a binding
    # that names a ledger read before resumes it there (reconcile_plan.resume_ledgers), so no
    # mark or entry is read twice. Empty: a state written before it was kept.
    ledgers_read: dict[str, dict[str, dict[int, int]]] = field(default_factory=dict)
    # Per ledger kind, the id of each ledger topic in ledgers_read when a run read it
    # ({kind: {topic: id}}): another id now, and the topic was deleted and created again, its
    # offsets are of the deleted one (reconcile_plan.forget_recreated_ledgers). A topic left
    # out: its id is not known (a state written before ids were kept, a cluster without topic
    # ids, an id that could not be read), and its offsets are resumed as they are.
    ledger_ids: dict[str, dict[str, str]] = field(default_factory=dict)
    # The id of the topic the offsets are of (None: not known, a state written before it was
    # kept or a cluster without topic ids). Another id now: the topic was re-created.
    topic_id: str | None = None
    # The topic was created again (another topic_id): every record it holds was written at or
    # after this instant, and key-index entries older than it are of the deleted topic.
    topic_records_since: str | None = None
    window_upper: str | None = None
    # Rows created up to here may have had their record deleted unread: never `missing`.
    unverifiable_until: str | None = None
    # Records written up to here may have had their processed marks deleted from the consumer
    # ledger unread: never `unprocessed`.
    marks_lost_until: str | None = None
    # Sequences produced up to here may have had their producer-ledger entries deleted unread.
    entries_lost_until: str | None = None
    # Compacted topic: items whose records were written up to here may have lost every one of
    # them to the log cleaner unread (reconcile_extract.compaction_horizon): an acked record of
    # theirs that is gone is no gap. Only grows, kept by rebuilds; a --full run starts over.
    keys_emptied_until: str | None = None
    # Written by a run that tracks keys_emptied_until. A state without it was written before:
    # its runs may have left keys the cleaner emptied (a tombstone removed) unjudged.
    emptied_tracked: bool = False
    key_deltas: list[str] = field(default_factory=list)
    source_deltas: list[str] = field(default_factory=list)
    datasets: dict[str, str] = field(default_factory=dict)
    # Per topic partition, the last record read: [offset, timestamp ms, CRC-32 of key and
    # value] (kafka_offsets.RecordPrint). A later run that finds another record there knows
    # the offsets it read were truncated and rewritten.
    checkpoints: dict[int, list[int]] = field(default_factory=dict)
    # Per partition, where and until when processed marks may be of records the broker lost
    # ({"<partition>": [[after_offset, until_ms], ...]}: reconcile_rewrites). Only grows.
    marks_rewritten: dict[str, list[list[int]]] = field(default_factory=dict)
    # When this run began to read the topic's log ends (epoch ms, the driver's clock, taken
    # before it asked), and the high watermarks it read: every record at or past them was
    # written after that instant. (Not `topic_offsets`: a transaction open then may hold
    # records written long before, past the last stable offset.)
    read_at_ms: int | None = None
    read_highs: dict[int, int] = field(default_factory=dict)
    # A record proven stamped well before it was written (record_times.Backdated), the first
    # one seen; kept by every later run, full ones too: the topic's record timestamps no
    # longer bound when deleted records were written.
    backdated: dict[str, Any] | None = None
    # Per consumer group and partition, the lowest offset it marked processed in any consumer
    # ledger record a run read (marks the coverage leaves out included): the group's consumer
    # is judged from there on (find_unprocessed). Kept across rebuilds after a rewrite.
    first_marks: dict[str, dict[int, int]] = field(default_factory=dict)
    # What the state is of (binding.state_identity): the topic, record key, table and key
    # column it was built from. Empty: a state written before it was kept.
    identity: dict[str, str] = field(default_factory=dict)
    # The zone the source's created column was read in when it has none (binding
    # timestamp_zone); None: a state written before it was kept.
    timestamp_zone: str | None = None
    # The latest timestamp (ms) of a record without any audit header a run read: a producer
    # that is not probed writes to the topic, and the producer ledger's silence does not speak
    # for its records (the stuck diagnosis). Kept by every later run, full ones too.
    unprobed_record_ms: int | None = None
    # Per consumer group and partition, the highest offset a run saw it commit, which run,
    # when, and the log start then (group_commits): a group whose offset was deleted or moved
    # back since did read that far. A rebuild forgets rewritten partitions.
    group_commits: GroupCommits = field(default_factory=dict)
    # committed offsets that prove nothing until the group commits another (group_commits)
    unproven_commits: Unproven = field(default_factory=dict)
    # The pending rows created up to here were looked up in the source table, or read from it
    # by a --full run, and the whole backlog last at rows_looked_up_at (late_rows.LookedUp):
    # a run looks up only the rows due since, and the backlog once it is
    # RECONCILE_DELETED_ROWS_RECHECK_SECONDS old. None: looked up never.
    rows_looked_up_until: str | None = None
    rows_looked_up_at: str | None = None
    # The latest source window upper bound of the incremental runs since the last full run or
    # rebuild: a run whose bound is before it (the clock stepped back) keeps what the last run
    # reported missing or orphan (RunPlan.kept_cutoff, reconcile_report.reported_before). None:
    # a state written before it was kept (window_upper stands in).
    upper_high: str | None = None
    # The consumer groups some of whose commits a run saw name a probed session
    # (commit_history.names_sessions): their probes write commit metadata, so a commit naming
    # none is a plain instance's, even once `__consumer_offsets` no longer holds the probed ones
    # (the log cleaner keeps the last commit per partition). Never forgotten.
    sessions_named: list[str] = field(default_factory=list)
    # Per partition, its leader epoch when a run last read it, and when (epoch ms, the
    # driver's clock, once the log ends were read); and the leader changes seen between two
    # readings that may still hold rows (spark_jobs.failover_hold). Kept by every later run of
    # the topic, full ones too: the cluster's history, not the state's. Empty: never read.
    leader_epochs: dict[int, int] = field(default_factory=dict)
    leader_epochs_at_ms: int | None = None
    leader_changes: list[LeaderChange] = field(default_factory=list)
    # Per producer ledger topic, its partitions' leader epochs at the same reading: a failover
    # there holds probes' entries (failover_hold). Forgotten with a ledger deleted and created
    # again; its changes are in leader_changes, named by the ledger's topic.
    ledger_epochs: dict[str, dict[int, int]] = field(default_factory=dict)
    # (group, partition, first, last offset, session) that a probed session that did not close
    # took its group past, above the marks any run read of it (reconcile_inputs.still_unjudged):
    # it may have died with their marks, or be processing them. Their records stay candidates,
    # never `unprocessed`, until its close is read, or a mark of that session above them once its
    # processing bound has passed since the commit (spark_jobs.processing_bound). Kept by
    # rebuilds but in rewritten partitions; a full run starts over.
    passed_unjudged: list[PassedSpan] = field(default_factory=list)
    # (group, partition, session, the highest offset it marked there, the time of its latest
    # mark record, first_ms, on the topic) in the ledger runs read, of the sessions with spans in
    # passed_unjudged: the marks that settle a span once its bound has passed may all have been
    # read by earlier runs.
    session_marks: list[SessionMark] = field(default_factory=list)
    # The consumer sessions whose `closed` session-end the last run read. The run reads the
    # groups' commit history before the ledger's end, so the last commit of a session that
    # closed in between is read only by the next run, which takes the session as closed (a
    # session commits nothing after its close: one run back is enough).
    sessions_closed: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "run_id": self.run_id,
            "topic_offsets": {str(k): v for k, v in self.topic_offsets.items()},
            "producer_ledger_offsets": {str(k): v for k, v in self.producer_ledger_offsets.items()},
            "consumer_ledger_offsets": {str(k): v for k, v in self.consumer_ledger_offsets.items()},
            "producer_ledger_topic": self.producer_ledger_topic,
            "consumer_ledger_topic": self.consumer_ledger_topic,
            "ledgers_read": {
                kind: {topic: {str(p): o for p, o in parts.items()} for topic, parts in topics.items()}
                for kind, topics in self.ledgers_read.items()
            },
            "ledger_ids": {kind: dict(ids) for kind, ids in self.ledger_ids.items()},
            "topic_id": self.topic_id,
            "topic_records_since": self.topic_records_since,
            "window_upper": self.window_upper,
            "unverifiable_until": self.unverifiable_until,
            "marks_lost_until": self.marks_lost_until,
            "entries_lost_until": self.entries_lost_until,
            "keys_emptied_until": self.keys_emptied_until,
            "emptied_tracked": self.emptied_tracked,
            "key_deltas": self.key_deltas,
            "source_deltas": self.source_deltas,
            "datasets": self.datasets,
            "checkpoints": {str(k): v for k, v in self.checkpoints.items()},
            "marks_rewritten": self.marks_rewritten,
            "read_at_ms": self.read_at_ms,
            "read_highs": {str(k): v for k, v in self.read_highs.items()},
            "backdated": self.backdated,
            "first_marks": _offsets_by_group_to_json(self.first_marks),
            "identity": self.identity,
            "timestamp_zone": self.timestamp_zone,
            "unprobed_record_ms": self.unprobed_record_ms,
            "group_commits": commits_to_json(self.group_commits),
            "unproven_commits": _offsets_by_group_to_json(self.unproven_commits),
            "rows_looked_up_until": self.rows_looked_up_until,
            "rows_looked_up_at": self.rows_looked_up_at,
            "upper_high": self.upper_high,
            "sessions_named": sorted(self.sessions_named),
            "leader_epochs": {str(k): v for k, v in self.leader_epochs.items()},
            "leader_epochs_at_ms": self.leader_epochs_at_ms,
            "leader_changes": [c.to_json() for c in self.leader_changes],
            "ledger_epochs": _offsets_by_group_to_json(self.ledger_epochs),
            "passed_unjudged": [list(span) for span in self.passed_unjudged],
            "session_marks": [list(mark) for mark in self.session_marks],
            "sessions_closed": sorted(self.sessions_closed),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StateMeta:
        if data.get("format") != STATE_FORMAT:
            raise StateError(f"state format {data.get('format')!r} is not {STATE_FORMAT}; run with --full")

        def offsets(name: str) -> dict[int, int]:
            return {int(k): int(v) for k, v in (data.get(name) or {}).items()}

        return cls(
            run_id=data.get("run_id"),
            topic_offsets=offsets("topic_offsets"),
            producer_ledger_offsets=offsets("producer_ledger_offsets"),
            consumer_ledger_offsets=offsets("consumer_ledger_offsets"),
            producer_ledger_topic=data.get("producer_ledger_topic"),
            consumer_ledger_topic=data.get("consumer_ledger_topic"),
            ledgers_read=_ledgers_read(data),
            ledger_ids=_ledger_ids(data),
            topic_id=data.get("topic_id"),
            topic_records_since=data.get("topic_records_since"),
            window_upper=data.get("window_upper"),
            unverifiable_until=data.get("unverifiable_until"),
            marks_lost_until=data.get("marks_lost_until"),
            entries_lost_until=data.get("entries_lost_until"),
            keys_emptied_until=data.get("keys_emptied_until"),
            emptied_tracked=bool(data.get("emptied_tracked")),
            key_deltas=list(data.get("key_deltas") or []),
            source_deltas=list(data.get("source_deltas") or []),
            datasets=dict(data.get("datasets") or {}),
            checkpoints={int(k): [int(x) for x in v] for k, v in (data.get("checkpoints") or {}).items()},
            marks_rewritten={
                str(k): [[int(x) for x in pair] for pair in v] for k, v in (data.get("marks_rewritten") or {}).items()
            },
            read_at_ms=None if data.get("read_at_ms") is None else int(data["read_at_ms"]),
            read_highs=offsets("read_highs"),
            backdated=_backdated(data.get("backdated")),
            first_marks=_offsets_by_group(data, "first_marks"),
            identity={str(k): str(v) for k, v in (data.get("identity") or {}).items()},
            timestamp_zone=str(data["timestamp_zone"]) if data.get("timestamp_zone") else None,
            unprobed_record_ms=_unprobed(data),
            group_commits=_group_commits(data),
            unproven_commits=_offsets_by_group(data, "unproven_commits"),
            rows_looked_up_until=data.get("rows_looked_up_until"),
            rows_looked_up_at=data.get("rows_looked_up_at"),
            upper_high=data.get("upper_high"),
            sessions_named=[str(g) for g in data.get("sessions_named") or []],
            leader_epochs=offsets("leader_epochs"),
            leader_epochs_at_ms=None if data.get("leader_epochs_at_ms") is None else int(data["leader_epochs_at_ms"]),
            leader_changes=_leader_changes(data),
            ledger_epochs=_offsets_by_group(data, "ledger_epochs"),
            passed_unjudged=_passed_unjudged(data),
            session_marks=_session_marks(data),
            sessions_closed=[str(s) for s in data.get("sessions_closed") or []],
        )


def _passed_unjudged(data: dict[str, Any]) -> list[PassedSpan]:
    """state.json's `passed_unjudged`; absent in states written before it was kept: their runs
    dropped such records from the candidates instead, so nothing waits. A span without its
    commit time (written before stop 86) takes the time its run read (`read_at_ms`), later than
    the commit: it waits its session's processing bound from then."""
    try:
        read_at = int(data.get("read_at_ms") or 0)
        return [
            (str(g), int(p), int(a), int(b), str(s), int(rest[0]) if rest else read_at)
            for g, p, a, b, s, *rest in data.get("passed_unjudged") or []
        ]
    except (TypeError, ValueError) as exc:
        raise StateError(f"state.json's passed_unjudged is malformed ({exc!r}); run with --full") from exc


def _session_marks(data: dict[str, Any]) -> list[SessionMark]:
    """state.json's `session_marks`; absent in states written before it was kept (stop 86)."""
    try:
        return [
            (str(g), int(p), str(s), int(high), int(seen)) for g, p, s, high, seen in data.get("session_marks") or []
        ]
    except (TypeError, ValueError) as exc:
        raise StateError(f"state.json's session_marks is malformed ({exc!r}); run with --full") from exc


def _offsets_by_group_to_json(offsets: dict[str, dict[int, int]]) -> dict[str, dict[str, int]]:
    return {g: {str(p): o for p, o in parts.items()} for g, parts in offsets.items()}


def _offsets_by_group(data: dict[str, Any], name: str) -> dict[str, dict[int, int]]:
    """A group (or topic) -> partition -> number map of state.json (`first_marks`,
    `unproven_commits`, `ledger_epochs`)."""
    try:
        return {str(g): {int(p): int(o) for p, o in parts.items()} for g, parts in (data.get(name) or {}).items()}
    except (TypeError, ValueError, AttributeError) as exc:
        raise StateError(f"state.json's {name} is malformed ({exc!r}); run with --full") from exc


def _leader_changes(data: dict[str, Any]) -> list[LeaderChange]:
    """state.json's leader_changes (failover_hold.LeaderChange.to_json)."""
    try:
        return [LeaderChange.from_json(c) for c in data.get("leader_changes") or []]
    except (TypeError, ValueError) as exc:
        raise StateError(f"state.json's leader_changes is malformed ({exc}); run with --full") from exc


def _ledgers_read(data: dict[str, Any]) -> dict[str, dict[str, dict[int, int]]]:
    """state.json's ledgers_read: kind -> ledger topic -> partition -> offset."""
    try:
        return {
            str(kind): {str(topic): {int(p): int(o) for p, o in parts.items()} for topic, parts in topics.items()}
            for kind, topics in (data.get("ledgers_read") or {}).items()
        }
    except (TypeError, ValueError, AttributeError) as exc:
        raise StateError(f"state.json's ledgers_read is malformed ({exc!r}); run with --full") from exc


def _ledger_ids(data: dict[str, Any]) -> dict[str, dict[str, str]]:
    """state.json's ledger_ids: kind -> ledger topic -> topic id (absent: a state written
    before they were kept, read as none known)."""
    try:
        ids = {str(kind): dict(topics.items()) for kind, topics in (data.get("ledger_ids") or {}).items()}
    except (TypeError, ValueError, AttributeError) as exc:
        raise StateError(f"state.json's ledger_ids is malformed ({exc!r}); run with --full") from exc
    for topics in ids.values():
        if not all(isinstance(t, str) and isinstance(i, str) and i for t, i in topics.items()):
            raise StateError(f"state.json's ledger_ids is malformed ({topics!r}); run with --full")
    return ids


def _group_commits(data: dict[str, Any]) -> GroupCommits:
    try:
        return commits_from_json(data.get("group_commits"))
    except ValueError as exc:
        raise StateError(f"{exc}; run with --full") from exc


def _unprobed(data: dict[str, Any]) -> int | None:
    try:
        return unprobed_of(data)
    except ValueError as exc:
        raise StateError(f"{exc}; run with --full") from exc


def _backdated(data: Any) -> dict[str, Any] | None:
    """state.json's `backdated`, checked to be a whole record_times.Backdated."""
    try:
        found = Backdated.from_json(data)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise StateError(f"state.json's backdated is malformed ({exc!r}); run with --full") from exc
    return None if found is None else found.to_json()


def _sorted_by_key(df: DataFrame) -> DataFrame:
    # Within each partition only: no shuffle. Spark drops the sort when it knows the plan's
    # output is in key order already; it does not know that of a full outer sort-merge join's
    # (the key table's), which is re-sorted (measured at 10M: skipping it saved nothing).
    return df.sortWithinPartitions("key")


def deltas_to_merge(sizes: list[int], limit: int) -> int:
    """How many of the newest deltas (`sizes` oldest first, in bytes) to merge into one; 0
    while there are no more than `limit`.

    Size tiers, as a log-structured store compacts: walking from the newest, stop at the
    first delta larger than all the newer ones together, and merge those (at least two, and
    enough to leave no more than `limit`). A full run's index of 10M keys followed by
    incremental runs of 1% each is then rewritten when the increments add up to its size,
    not every `limit + 1` runs, as when every merge took them all: at 10M keys and +1% a
    run on two cores, the run that merged everything took 50.6 s, the one merging the eight
    increments 13.3 s, the runs around them 10-13 s.
    """
    if len(sizes) <= limit:
        return 0
    count, newer = 0, 0
    for size in reversed(sizes):
        if count >= 2 and size > newer:
            break
        count, newer = count + 1, newer + size
    return max(count, len(sizes) - limit + 1)


class StateStore:
    """One binding's state folder (a local path or a URI, see state_location)."""

    def __init__(self, state_dir: str | os.PathLike[str], binding: str, run_id: str) -> None:
        try:
            self.root = StateLocation(state_dir).join(binding)
        except StateLocationError as exc:
            raise StateError(str(exc)) from exc
        self.run_id = run_id

    @property
    def meta_location(self) -> StateLocation:
        return self.root.join("state.json")

    def read_meta(self) -> StateMeta:
        meta = self.meta_location
        try:
            if not meta.exists():
                return StateMeta()
            return StateMeta.from_json(json.loads(meta.read_text()))
        except OSError as exc:
            # Unreachable (an object store or mount down, no permission): the state is likely
            # intact, and --full would throw away the memory earlier runs built.
            raise StateError(
                f"state file {meta} cannot be read ({exc}); the state was left as it is: make the state "
                "location reachable to this driver and run again"
            ) from exc
        except ValueError as exc:
            raise StateError(f"state file {meta} is corrupt ({exc}); run with --full to start over") from exc

    def _read(self, spark: SparkSession, relative: str | None, schema: StructType) -> DataFrame:
        if not relative:
            return empty_frame(spark, schema)
        return spark.read.schema(schema).parquet(self.root.spark(relative))

    def check_shared(self, spark: SparkSession) -> bool:
        """On a cluster, fail unless this driver reads what the executors write to the state.

        A local path given to a cluster whose nodes each have their own disk takes the executors'
        Parquet files on their disks, while the driver commits each dataset with none of them:
        every dataset reads back empty, and the run would publish no findings and commit an empty
        memory. A few rows written by every executor's tasks are counted through this driver's own
        filesystem (pyarrow), not through Spark, which would read them on the executors again.
        Returns whether it checked (not in local mode)."""
        if runs_locally(spark):
            return False  # one process: the driver's disk is the executors'
        marker = self.root.join("runs", f"{self.run_id}-reach")
        wanted = max(2, spark.sparkContext.defaultParallelism)
        try:
            spark.range(0, wanted, 1, wanted).write.mode("overwrite").parquet(marker.spark())
            seen = _rows_here(marker)
        finally:
            try:
                marker.remove_tree()
            except Exception:  # noqa: BLE001 - an unreferenced run folder: the next commit deletes it
                pass
        if seen != wanted:
            raise StateError(
                f"the state location {self.root.uri} is not shared between the Spark driver and its executors: of "
                f"{wanted} rows the executors wrote there, this driver reads {seen}. A local path works with local[*] "
                "only; on a cluster give a path every node mounts at the same place, or an object store URI "
                "(RECONCILE_STATE_DIR / --state-dir). The run read no record and published nothing"
            )
        return True

    def dataset(self, spark: SparkSession, meta: StateMeta, name: str) -> DataFrame:
        return self._read(spark, meta.datasets.get(name), DATASETS[name])

    def deltas(self, spark: SparkSession, relatives: list[str], schema: StructType) -> DataFrame:
        if not relatives:
            return empty_frame(spark, schema)
        return spark.read.schema(schema).parquet(*[self.root.spark(r) for r in relatives])

    def write_dataset(self, df: DataFrame, name: str) -> tuple[str, DataFrame]:
        """Write a dataset of this run and return (relative path, the frame read back)."""
        relative = f"runs/{self.run_id}/{name}"
        df.write.mode("overwrite").parquet(self.root.spark(relative))
        return relative, self._read(df.sparkSession, relative, DATASETS[name])

    def write_delta(self, df: DataFrame, kind: str, schema: StructType, suffix: str = "") -> str:
        """Write a key-level delta sorted by key within each file: its row groups' key ranges
        then barely overlap, and a run looking up a range of keys skips the others
        (transform_key_table's key_range)."""
        relative = f"{kind}/{self.run_id}{suffix}"
        _sorted_by_key(df.select(*schema.fieldNames())).write.mode("overwrite").parquet(self.root.spark(relative))
        return relative

    def compact(self, spark: SparkSession, relatives: list[str], kind: str, schema: StructType) -> list[str]:
        """Merge the newest deltas into one when there are too many (deltas_to_merge); returns
        the new list, the merged delta last."""
        if len(relatives) <= COMPACT_AFTER:
            return relatives  # nothing to merge: no listing of the state's files
        count = deltas_to_merge([self.root.join(r).size() for r in relatives], COMPACT_AFTER)
        kept, merging = relatives[:-count], relatives[-count:]
        merged = self.deltas(spark, merging, schema)
        if kind == "keys":
            merged = (
                merged.groupBy("key")
                .agg(
                    F.sum("n").alias("n"),
                    F.min(F.struct("partition", "offset", "timestamp", "session", "seq", "run_id")).alias("f"),
                )
                .select("key", "n", "f.*")
            )
        else:
            merged = merged.groupBy("key").agg(F.min("created").alias("created"))
        relative = f"{kind}/{self.run_id}-compacted"
        _sorted_by_key(merged.select(*schema.fieldNames())).write.mode("overwrite").parquet(self.root.spark(relative))
        return [*kept, relative]

    def commit(self, meta: StateMeta) -> list[str]:
        """Atomically point state.json at this run's datasets, then drop unreferenced ones;
        returns warnings. Once state.json is written the run has happened (the next one builds
        on it and flags its findings new against this one's): what fails after is a warning."""
        self.meta_location.write_text_atomic(json.dumps(meta.to_json(), indent=1, sort_keys=True))
        try:
            self._remove_unreferenced(meta)
        except Exception as exc:  # noqa: BLE001 - left behind, the next commit deletes them
            return [
                "the state was committed, but the datasets no run refers to any more could not be deleted "
                f"({type(exc).__name__}: {exc}): a later run deletes them"
            ]
        return []

    def _remove_unreferenced(self, meta: StateMeta) -> None:
        keep = {*meta.key_deltas, *meta.source_deltas}
        keep |= {r.rsplit("/", 1)[0] for r in meta.datasets.values()}  # runs/<run_id>
        for kind in ("keys", "source", "runs"):
            folder = self.root.join(kind)
            for name in folder.child_folders():
                if f"{kind}/{name}" not in keep:
                    folder.join(name).remove_tree()


def _rows_here(location: StateLocation) -> int:
    """Rows in the Parquet files this process sees at `location` (0 when it sees none)."""
    import pyarrow.dataset as pads

    fs, path = location.filesystem()
    try:
        return int(pads.dataset(path, filesystem=fs, format="parquet").count_rows())
    except FileNotFoundError:
        return 0
