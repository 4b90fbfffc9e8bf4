"""The auditor's memory of keys: what reconciliation runs saw, read back for other parts.

Two sources, both written by reconciliation and never by their readers:
- the job's key index (Parquet under the state dir, docs/contracts.md): where a record with
  each key was first seen and by which run, the other records of keys seen more than once
  (the duplicates dataset), and the lost sightings (keys whose offset a later run found
  rewritten);
- the findings of the binding's latest successful run: rows it reported missing, which it only
  does while the topic held everything since the row was created.

Readers (stuck verdicts) use it when the topic no longer shows what happened: a record seen
and since deleted by retention, or truncated, or a row reported missing before the topic's
oldest records went.
"""

from __future__ import annotations

import json
import operator
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import reduce
from typing import Any

from auditor.pipelines.models import Binding
from auditor.reconcile import conf
from auditor.reconcile.models import Finding, ReconcileRun
from auditor.stuck.evidence import (
    KeyMemory,
    KeySightings,
    LocatedRecord,
    MissingReport,
    PartitionState,
    ProcessedMark,
    RecordState,
    Sighting,
)
from spark_jobs.binding import identity_changes, state_identity
from spark_jobs.group_commits import SeenCommits, commits_from_json
from spark_jobs.kafka_offsets import KafkaReadError, another_topic, rewritten_partitions
from spark_jobs.mark_rules import MarkRule, rules_from_json
from spark_jobs.record_times import Backdated, find_backdated, written_after_read
from spark_jobs.state_location import StateLocation, StateLocationError
from spark_jobs.unprobed import unprobed_of

CHUNK = 10_000  # keys per database query


class StateUnreadable(RuntimeError):
    """The state could not be read."""


def recall(
    binding: Binding,
    keys: Sequence[str],
    state_root: StateLocation | None = None,
    index: IndexRows | None = None,
    sessions: Iterable[str] = (),
) -> KeyMemory:
    """What earlier runs of `binding` saw of `keys`. A part that cannot be read is named in
    `reason` and left empty: readers then say unknown, never guess.

    index: the key index's rows already read for a superset of `keys` (IndexedTopic.index),
    which is then not read again. sessions: the producer sessions of the keys' ledger entries,
    of which those runs read aborted records of are recalled (aborting_sessions)."""
    memory = KeyMemory()
    if not keys:
        return memory
    try:
        root = state_root if state_root is not None else conf.state_location().join(binding.name)
        memory.sightings = index.sightings(keys) if index is not None else read_sightings(root, keys, binding)
        meta = index.meta if index is not None else read_meta(root, binding)
        if meta is not None:
            memory.aborted, memory.aborting_sessions = read_aborted(root, meta, keys, sessions)
    except (StateUnreadable, StateLocationError) as exc:
        memory.reason = str(exc)
    memory.missing = missing_reports(binding, keys)
    return memory


@dataclass
class IndexRows:
    """Rows of the key index read for some keys, with the state.json they were read by."""

    root: StateLocation
    meta: dict[str, Any]
    rows: list[dict[str, Any]]

    def sightings(self, keys: Sequence[str]) -> dict[str, KeySightings]:
        """read_sightings() of `keys` (among those the rows were read for), without reading
        the index again."""
        wanted = set(keys)
        return _sightings(self.root, self.meta, [r for r in self.rows if r["key"] in wanted], sorted(wanted))


def rewritten_mark_rules(binding: Binding, index: IndexRows | None = None) -> list[MarkRule]:
    """Where and when processed marks may be of records the broker lost, as the binding's
    reconciliation found them (state.json `marks_rewritten`; none before its first run).
    index: rows already read, whose state.json is used. StateUnreadable when it cannot be read."""
    try:
        meta = index.meta if index is not None else read_meta(conf.state_location().join(binding.name), binding)
        return rules_from_json((meta or {}).get("marks_rewritten"))
    except StateLocationError as exc:
        raise StateUnreadable(str(exc)) from exc
    except (TypeError, ValueError, AttributeError) as exc:
        raise StateUnreadable(f"marks_rewritten of the state of {binding.name} is malformed: {exc}") from exc


def recalled_stamps(
    binding: Binding, partitions: Mapping[int, PartitionState], meta: dict[str, Any] | None, topic_id: str | None
) -> Backdated | None:
    """Whether the topic's producers stamp records well before writing them
    (spark_jobs.record_times): as a reconciliation run proved it (state.json `backdated`), or
    as the oldest record of a partition proves it now, written after the last run's read
    (past the high watermark it read, in a partition added since, or anywhere in a topic
    created again since: `topic_id` now, None when unknown) and stamped well before. None
    before the first run (`meta`: the state.json read_meta gave). StateUnreadable when what it
    keeps is malformed."""
    if not meta:
        return None
    try:
        read_at = meta.get("read_at_ms")
        return find_backdated(
            binding.topic,
            {p: (s.low_timestamp_ms, s.low) for p, s in partitions.items() if s.low < s.high},
            written_after_read(
                meta.get("read_highs") or {}, partitions, recreated=another_topic(meta.get("topic_id"), topic_id)
            ),
            None if read_at is None else int(read_at),
            meta.get("run_id"),
            binding.grace_seconds * 1000,
            known=meta.get("backdated"),
        )
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise StateUnreadable(
            f"the record timestamps kept in the state of {binding.name} are malformed: {exc}"
        ) from exc


def recalled_unprobed(meta: dict[str, Any] | None) -> int | None:
    """The latest timestamp of a record without any audit header a reconciliation run read
    (state.json `unprobed_record_ms`; a state from before it was kept: its last read); None
    when none was, or no run has. StateUnreadable when malformed."""
    try:
        return unprobed_of(meta) if meta else None
    except ValueError as exc:
        raise StateUnreadable(str(exc)) from exc


def read_state_meta(binding: Binding) -> dict[str, Any] | None:
    """The binding's state.json (read_meta) at the configured state location."""
    try:
        return read_meta(conf.state_location().join(binding.name), binding)
    except StateLocationError as exc:
        raise StateUnreadable(str(exc)) from exc


def identity_of(binding: Binding) -> dict[str, str]:
    """What the binding's reconciliation state must be of (spark_jobs.binding.state_identity)."""
    return state_identity(binding.topic, binding.record_key, binding.table, binding.key_column)


def read_meta(root: StateLocation, binding: Binding) -> dict[str, Any] | None:
    """The state's state.json, None when there is none (no run yet) or when it is of another
    topic, record key or table than the binding's now (the binding was edited since: nothing
    earlier runs saw is of its records or rows); StateUnreadable when it or its location
    cannot be read."""
    meta_file = root.join("state.json")
    try:
        if not meta_file.exists():
            return None
        meta = json.loads(meta_file.read_text())
    except (OSError, ValueError) as exc:  # StateLocationError is a ValueError
        raise StateUnreadable(f"{meta_file} is unreadable: {exc}") from exc
    if not isinstance(meta, dict):
        raise StateUnreadable(f"{meta_file} is unreadable: not a JSON object")
    return None if identity_changes(meta.get("identity"), identity_of(binding)) else meta


def read_sightings(root: StateLocation, keys: Iterable[str], binding: Binding) -> dict[str, KeySightings]:
    """Per key, every record with it that runs saw (_sightings). An absent state (no run yet,
    or of the binding before an edit) is an empty memory."""
    meta = read_meta(root, binding)
    if meta is None:
        return {}
    wanted = sorted(set(keys))
    return _sightings(root, meta, _rows(root, list(meta.get("key_deltas") or []), wanted, extra=["n"]), wanted)


def read_aborted(
    root: StateLocation, meta: dict[str, Any], keys: Iterable[str], sessions: Iterable[str]
) -> tuple[dict[str, tuple[LocatedRecord, ...]], dict[str, str | None]]:
    """Per key of `keys`, the records with it that runs read only in aborted transactions (the
    state's `aborted` dataset), less those stamped before the state's `topic_records_since`
    (the deleted topic's, whose offsets the new one took again); and which of `sessions`
    runs read aborted records of (session -> one such run, None when the state does not name
    it)."""
    relative = (meta.get("datasets") or {}).get("aborted")
    if not relative:
        return {}, {}
    since = meta.get("topic_records_since")
    since_ms = int(datetime.fromisoformat(since).timestamp() * 1000) if since else None
    wanted_keys, wanted_sessions = set(keys), {s for s in sessions if s}
    found: dict[str, list[LocatedRecord]] = {}
    aborting: dict[str, str | None] = {}
    rows = _rows(root, [relative], sorted(wanted_keys), extra=["session", "seq"], sessions=sorted(wanted_sessions))
    for row in rows:
        session = row.get("session")
        if session in wanted_sessions and aborting.get(session) is None:
            aborting[session] = row.get("run_id")
        stamp = _ms(row.get("timestamp"))
        if row["key"] not in wanted_keys or (since_ms is not None and (stamp is None or stamp < since_ms)):
            continue  # read for its session only, or the deleted topic's
        found.setdefault(row["key"], []).append(
            LocatedRecord(
                row["key"],
                int(row["partition"]),
                int(row["offset"]),
                stamp,
                "aborted",
                session,
                None if row.get("seq") is None else int(row["seq"]),
                row.get("run_id"),
            )
        )
    return {k: tuple(sorted(v, key=lambda a: (a.partition, a.offset))) for k, v in found.items()}, aborting


def _sightings(
    root: StateLocation, meta: dict[str, Any], rows: list[dict[str, Any]], wanted: list[str]
) -> dict[str, KeySightings]:
    """Per key of the index `rows` (read for `wanted`, with their `n`), every record with it
    that runs saw: each run's first (the rows), the others of a key counted more than once
    (the duplicates dataset), and those a later run found rewritten (the lost sightings,
    which stand for the entry at their position). Entries stamped before the state's
    `topic_records_since` are marked as the deleted topic's."""
    counted: dict[str, int] = {}
    found: dict[str, dict[tuple[int, int, int | None], Sighting]] = {}

    def add(key: str, sighting: Sighting) -> None:
        found.setdefault(key, {})[(sighting.partition, sighting.offset, sighting.ts_ms)] = sighting

    for row in rows:
        counted[row["key"]] = counted.get(row["key"], 0) + int(row.get("n") or 1)
        add(row["key"], Sighting(row["partition"], row["offset"], _ms(row.get("timestamp")), row.get("run_id")))
    datasets = meta.get("datasets") or {}
    several = sorted(k for k, n in counted.items() if n > len(found[k]))
    duplicates = datasets.get("duplicates")
    for row in _rows(root, [duplicates] if duplicates else [], several):
        position = (row["partition"], row["offset"], _ms(row.get("timestamp")))
        if position not in found[row["key"]]:  # the index's entries name the run that saw them
            # Every run that read a record with the key has an index entry for it: when one
            # run has, it read them all.
            runs = {s.run_id for s in found[row["key"]].values()}
            add(row["key"], Sighting(*position, runs.pop() if len(runs) == 1 else None))
    placed = {key: len(copies) for key, copies in found.items()}
    lost = datasets.get("lost_sightings")
    for row in _rows(root, [lost] if lost else [], wanted):
        add(
            row["key"],
            Sighting(
                row["partition"],
                row["offset"],
                _ms(row.get("timestamp")),
                row.get("run_id"),
                lost=True,
                detected_run=row.get("detected_run"),
            ),
        )
    since = meta.get("topic_records_since")  # the topic was created again: older entries are of the deleted one
    since_ms = int(datetime.fromisoformat(since).timestamp() * 1000) if since else None
    sightings: dict[str, KeySightings] = {}
    for key, by_position in found.items():
        copies = sorted(by_position.values(), key=lambda s: (s.partition, s.offset, s.ts_ms or 0))
        if since_ms is not None:
            copies = [
                replace(s, deleted_topic_until_ms=since_ms) if s.ts_ms is None or s.ts_ms < since_ms else s
                for s in copies
            ]
        sightings[key] = KeySightings(tuple(copies), unplaced=max(0, counted.get(key, 0) - placed.get(key, 0)))
    return sightings


@dataclass
class IndexedTopic:
    """The stuck keys' records the key index vouches for, and where reading must start.

    starts: per partition, the offset up to which the last run read every record and the
    log has not been rewritten since; readers read only from there. records: the keys'
    records below those offsets still in the log. reason: why the index cannot stand in for
    a read of the topic (then starts is empty and everything is read).
    """

    starts: dict[int, int] = field(default_factory=dict)
    records: dict[str, list[LocatedRecord]] = field(default_factory=dict)
    covered: int = 0  # records of the log the index stands in for
    # per producer session, the sequences the runs read (the state's seq_coverage)
    seq_coverage: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    run_id: str | None = None
    reason: str | None = None
    # the index's rows of the keys, for recall(); None: not read
    index: IndexRows | None = None


@dataclass
class IndexRead:
    """The key index's rows of `keys`, as read_index read them for `meta` (a state.json)."""

    meta: dict[str, Any]
    keys: Iterable[str]
    rows: list[dict[str, Any]]  # the key deltas' rows, with n, session and seq
    aborted: list[dict[str, Any]]  # the aborted dataset's rows, with session and seq
    seq_coverage: dict[str, list[tuple[int, int]]]


def read_index(root: StateLocation, meta: dict[str, Any], keys: Iterable[str]) -> IndexRead:
    """The rows of `keys` in the datasets `meta` names under `root`: the part of
    indexed_records that reads files, and needs nothing of the cluster, so a diagnosis reads
    it while it reads the cluster. StateUnreadable when a dataset cannot be read."""
    wanted = sorted(set(keys))
    rows = _rows(root, list(meta.get("key_deltas") or []), wanted, extra=["n", "session", "seq"])
    aborted = (meta.get("datasets") or {}).get("aborted")
    aborted_rows = _rows(root, [aborted] if aborted else [], wanted, extra=["session", "seq"])
    coverage = (meta.get("datasets") or {}).get("seq_coverage")
    return IndexRead(meta, keys, rows, aborted_rows, _seq_coverage(root, coverage) if coverage else {})


def indexed_records(
    binding: Binding,
    keys: Sequence[str],
    partitions: dict[int, PartitionState],
    kafka_config: dict[str, Any],
    state_root: StateLocation | None = None,
    meta: dict[str, Any] | None = None,
    prefetched: Callable[[], IndexRead] | None = None,
) -> IndexedTopic:
    """What the key index says of `keys` within the offsets the last run read, once the log
    is checked not to have been rewritten there (kafka_offsets.rewritten_partitions).
    meta: its state.json already read (read_state_meta), else it is read here. prefetched:
    gives read_index's rows read earlier (a future's result), used when they were read for
    this `meta` and `keys` (the same objects); it raises StateUnreadable as read_index does.

    Only an index that matches a full read exactly is used: a key with more than one record
    in it (its other positions are not kept) makes the caller read everything.
    """
    try:
        root = state_root if state_root is not None else conf.state_location().join(binding.name)
        meta = meta if meta is not None else read_meta(root, binding)
    except (StateUnreadable, StateLocationError) as exc:
        return IndexedTopic(reason=str(exc))
    if meta is None:
        return IndexedTopic(reason="no reconciliation has read this topic, by this record key, yet")
    read_to = {int(p): int(o) for p, o in (meta.get("topic_offsets") or {}).items()}
    checkpoints = {int(p): list(v) for p, v in (meta.get("checkpoints") or {}).items()}
    run_id = meta.get("run_id")
    if not read_to or set(read_to) != set(partitions):
        return IndexedTopic(reason="the last reconciliation read other partitions than the topic has now")
    bootstrap = str(kafka_config["bootstrap.servers"])
    config = {str(k): str(v) for k, v in kafka_config.items() if k != "bootstrap.servers"}
    bounds = {p: (s.low, s.high) for p, s in partitions.items()}
    try:
        rewritten = rewritten_partitions(bootstrap, config, binding.topic, bounds, read_to, checkpoints, run_id)
    except KafkaReadError as exc:
        return IndexedTopic(reason=f"the offsets the last run read could not be checked: {exc}")
    if rewritten:
        p, why = next(iter(sorted(rewritten.items())))
        return IndexedTopic(reason=f"partition {p} was rewritten since the last reconciliation ({why})")
    starts = {p: min(max(read_to[p], s.low), s.stable) for p, s in partitions.items()}
    found = IndexedTopic(starts=starts, run_id=run_id, covered=sum(starts[p] - s.low for p, s in partitions.items()))
    try:
        read = prefetched() if prefetched is not None else None
        if read is None or read.meta is not meta or read.keys is not keys:
            read = read_index(root, meta, keys)
    except StateUnreadable as exc:
        return IndexedTopic(reason=str(exc))
    rows, aborted_rows, found.seq_coverage = read.rows, read.aborted, read.seq_coverage
    copies: dict[str, int] = {}
    for row in rows:
        copies[row["key"]] = copies.get(row["key"], 0) + int(row.get("n") or 1)
    several = [k for k, n in copies.items() if n > 1]
    if several:
        return IndexedTopic(
            reason=f"{len(several)} stuck key(s) have several records (e.g. {several[0]})",
            index=IndexRows(root, meta, rows),
        )
    found.index = IndexRows(root, meta, rows)
    sources: tuple[tuple[RecordState, list[dict[str, Any]]], ...] = (("committed", rows), ("aborted", aborted_rows))
    since = meta.get("topic_records_since")  # the topic was created again: older entries are of the deleted one
    since_ms = int(datetime.fromisoformat(since).timestamp() * 1000) if since else None
    for state, source in sources:
        for row in source:
            partition, offset = int(row["partition"]), int(row["offset"])
            if partition not in partitions or not partitions[partition].low <= offset < starts[partition]:
                continue  # deleted since (a read finds nothing there either), or read again below
            stamp = _ms(row.get("timestamp"))
            if since_ms is not None and (stamp is None or stamp < since_ms):
                continue  # the deleted topic's record at an offset the new one took again
            found.records.setdefault(row["key"], []).append(
                LocatedRecord(row["key"], partition, offset, stamp, state, row.get("session"), row.get("seq"))
            )
    return found


def recall_commits(
    indexed: IndexedTopic, groups: Sequence[str], topic_id: str | None
) -> dict[str, dict[int, SeenCommits]]:
    """What reconciliation runs saw of `groups`' committed offsets per partition
    (spark_jobs.group_commits), where the key index vouches that the log was not rewritten
    since the last run (`indexed.starts`): there an offset still means the record the run
    saw. Cut at that bound. Nothing when the topic's id (`topic_id`, read by the diagnosis)
    is not the one the last run read: the topic was created again, and its offsets hold
    other records. StateUnreadable when the state's entry is malformed."""
    if indexed.index is None or indexed.reason is not None or not groups:
        return {}
    meta = indexed.index.meta
    if another_topic(meta.get("topic_id"), topic_id):
        return {}
    try:
        seen = commits_from_json(meta.get("group_commits"))
    except ValueError as exc:
        raise StateUnreadable(str(exc)) from exc
    recalled: dict[str, dict[int, SeenCommits]] = {}
    for group in groups:
        for partition, commits in seen.get(group, {}).items():
            bound = indexed.starts.get(partition)
            kept = commits.below(bound) if bound is not None else None
            if kept is not None:
                recalled.setdefault(group, {})[partition] = kept
    return recalled


def recall_marks(
    indexed: IndexedTopic, groups: Sequence[str], positions: Iterable[tuple[int, int]]
) -> dict[tuple[str, int, int], ProcessedMark]:
    """The processed marks earlier runs read at `positions` (partition, offset) of the topic,
    from the state's processed_coverage: a consumer ledger's retention deletes marks, what a
    run read of them stays. Only below where the key index vouches that the log was not
    rewritten since that run (`indexed.starts`): there an offset still means the record the
    run saw. Positive evidence only: a position no run saw marked is left to the ledger."""
    if indexed.index is None or indexed.reason is not None or not groups:
        return {}
    relative = (indexed.index.meta.get("datasets") or {}).get("processed_coverage")
    if not relative:  # no probed consumer so far: nothing to recall, positions left unread
        return {}
    wanted: dict[int, set[int]] = {}
    for partition, offset in positions:
        if offset < indexed.starts.get(partition, -1):
            wanted.setdefault(partition, set()).add(offset)
    if not wanted:
        return {}
    import pyarrow.dataset as ds  # deferred, as in _rows

    try:
        fs, path = indexed.index.root.join(relative).filesystem()
        table = ds.dataset(path, filesystem=fs, format="parquet").to_table(
            columns=["group", "partition", "start", "end"],
            filter=ds.field("group").isin(list(groups)) & ds.field("partition").isin(sorted(wanted)),
        )
    except (OSError, ValueError) as exc:
        raise StateUnreadable(f"the processed coverage under {indexed.index.root} is unreadable: {exc}") from exc
    # Per (group, partition), the merged intervals by start: each wanted offset is looked up
    # by bisection (a stuck diagnosis may ask about 100,000 offsets, a coverage hold many gaps).
    intervals: dict[tuple[str, int], list[tuple[int, int]]] = {}
    columns = [table.column(c).to_pylist() for c in ("group", "partition", "start", "end")]
    for group, partition, start, end in zip(*columns, strict=True):
        intervals.setdefault((group, partition), []).append((start, end))
    marks: dict[tuple[str, int, int], ProcessedMark] = {}
    for (group, partition), spans in intervals.items():
        spans.sort()
        starts = [start for start, _ in spans]
        for offset in wanted.get(partition, ()):
            i = bisect_right(starts, offset) - 1
            if i >= 0 and offset <= spans[i][1]:
                marks[(group, partition, offset)] = ProcessedMark(
                    group, partition, offset, None, None, seen_by_run=indexed.run_id
                )
    return marks


def _seq_coverage(root: StateLocation, relative: str) -> dict[str, list[tuple[int, int]]]:
    """The state's seq_coverage: per producer session, the merged sequence intervals read."""
    import pyarrow.dataset as ds  # deferred, as in _rows

    try:
        fs, path = root.join(relative).filesystem()
        table = ds.dataset(path, filesystem=fs, format="parquet").to_table(columns=["session", "start", "end"])
    except (OSError, ValueError) as exc:
        raise StateUnreadable(f"the sequence coverage under {root} is unreadable: {exc}") from exc
    spans: dict[str, list[tuple[int, int]]] = {}
    for row in table.to_pylist():
        if row["session"] is not None and row["start"] is not None and row["end"] is not None:
            spans.setdefault(row["session"], []).append((int(row["start"]), int(row["end"])))
    return spans


def _rows(
    root: StateLocation,
    relatives: list[str],
    keys: list[str],
    extra: Sequence[str] = (),
    sessions: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """The rows of the datasets at `relatives` (under root) with one of `keys`, or one of
    `sessions` (in their `session` column), as dicts of the columns of theirs among the usual
    ones and `extra`."""
    if not relatives or not (keys or sessions):
        return []
    import pyarrow.dataset as ds  # deferred: only diagnoses with a reconciliation state need it

    wanted = ["key", "partition", "offset", "timestamp", "run_id", "detected_run", *extra]
    # Run ids and sessions repeat across many rows: read as dictionaries, not one string each.
    parquet = ds.ParquetFileFormat(
        read_options=ds.ParquetReadOptions(dictionary_columns=["run_id", "detected_run", "session"])
    )
    # (an empty value set would not bind: its type is null)
    named = [ds.field(column).isin(values) for column, values in (("key", keys), ("session", sessions)) if values]
    found = reduce(operator.or_, named) & ds.field("partition").is_valid() & ds.field("offset").is_valid()
    rows: list[dict[str, Any]] = []
    try:
        for relative in relatives:
            fs, path = root.join(relative).filesystem()
            dataset = ds.dataset(path, filesystem=fs, format=parquet)
            columns = [c for c in wanted if c in dataset.schema.names]
            table = dataset.to_table(columns=columns, filter=found)
            # Column by column: much faster than Table.to_pylist() building each row's dict.
            values = [table.column(c).to_pylist() for c in columns]
            rows.extend(dict(zip(columns, row, strict=True)) for row in zip(*values, strict=True))
    except (OSError, ValueError) as exc:  # pyarrow raises ArrowInvalid (a ValueError) on bad files
        raise StateUnreadable(f"the key index under {root} is unreadable: {exc}") from exc
    return rows


def _ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def missing_reports(binding: Binding, keys: Sequence[str]) -> dict[str, MissingReport]:
    """Keys the binding's latest successful run (with its findings kept) reported missing,
    without a cause: no record up to that run's window upper bound."""
    if binding.pk is None:  # an unsaved binding (the benchmark) has no runs
        return {}
    run = (
        ReconcileRun.objects.filter(binding=binding, status=ReconcileRun.OK, findings_pruned=False)
        .order_by("-finished_at", "-id")
        .first()
    )
    window = (run.window or {}) if run else {}
    upper = window.get("upper")
    if run is None or not upper or identity_changes(window.get("identity"), identity_of(binding)):
        return {}  # no run, or a run of the binding before an edit (another topic, key or table)
    upper_ms = int(datetime.fromisoformat(upper).timestamp() * 1000)
    reports: dict[str, MissingReport] = {}
    label = run.job_run_id or str(run.pk)
    read_to = {int(p): int(r[1]) for p, r in ((run.offset_ranges or {}).get("topic") or {}).items()}
    for start in range(0, len(keys), CHUNK):
        chunk = list(keys[start : start + CHUNK])
        found = Finding.objects.filter(run=run, kind="missing", cause__isnull=True, key__in=chunk)
        for key in found.values_list("key", flat=True):
            reports[str(key)] = MissingReport(label, upper_ms, read_to)
    return reports
