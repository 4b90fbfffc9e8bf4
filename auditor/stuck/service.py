"""Diagnose a stuck rule: select the stuck rows, read the cluster, locate, judge, store.

``diagnose_rule`` gathers the evidence and returns the verdicts without touching the
auditor's database; ``record_diagnosis`` stores one run atomically (items, counts, the run),
publishes the live event after commit and raises or resolves the alert problems;
``run_diagnosis`` does both for the task, the CLI and the page's button.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import chain
from typing import Any, ParamSpec, TypeVar

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from auditor.lib.live import publish
from auditor.lib.secrets import MissingEnvError, mask_text
from auditor.pipelines.connectivity import ConnectivityError, check_cluster
from auditor.pipelines.incarnations import first_seen, observe_topic_id
from auditor.pipelines.ledgers import ledger_topics
from auditor.pipelines.models import Binding, StuckRule
from auditor.pipelines.producers import cluster_send_outcome, observed_producers, processing_cap_ms
from auditor.probes.topics import CLIENTS_TOPIC
from auditor.reconcile.conf import state_location
from auditor.reconcile.memory import (
    IndexedTopic,
    IndexRead,
    StateUnreadable,
    indexed_records,
    read_index,
    read_state_meta,
    recall,
    recall_commits,
    recall_marks,
    recalled_stamps,
    recalled_unprobed,
    rewritten_mark_rules,
)
from auditor.stuck.alerting import muted_keys, update_problems
from auditor.stuck.evidence import ClusterView, Diagnosis, KeyMemory, StuckRow, ms_to_iso
from auditor.stuck.kafka_view import ReadPlan, read_after_locate, read_cluster_view, read_in_sync
from auditor.stuck.locate import LocateError, LocateRequest, LocateResult, locate
from auditor.stuck.locate_python import mark_positions
from auditor.stuck.models import DiagnosisRun, StuckItem, VerdictCount
from auditor.stuck.risks import cluster_risks
from auditor.stuck.runlock import diagnosis_lock
from auditor.stuck.source import (
    DEFAULT_MAX_ITEMS,
    SourceError,
    StuckQuery,
    read_source_clock,
    select_stuck_rows,
    still_stuck,
)
from auditor.stuck.trailing_marks import read_trailing_marks
from auditor.stuck.verdicts import diagnose
from auditor.vocabulary import STUCK_VERDICTS
from spark_jobs.kafka_offsets import KafkaReadError
from spark_jobs.mark_rules import mark_settle_seconds
from spark_jobs.record_times import stamp_lag_ms
from spark_jobs.state_location import StateLocationError

log = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")

LIVE_CHANGES_LISTED = 50  # became-stuck / got-unstuck items named in one live event
WRITE_BATCH = 2000


@dataclass
class DiagnosisOptions:
    engine: str = "auto"  # auto | python | spark
    spark: Any = None  # a SparkSession to use in-process (tests, benchmark)
    producer_ledger_topic: str | None = None
    consumer_ledger_topic: str | None = None
    max_items: int = DEFAULT_MAX_ITEMS
    timeout_s: float = 10.0
    # Look the stuck keys up in the reconciliation's key index and read only the topic's
    # tail after it (False: read the whole topic).
    use_index: bool = True
    # where the probes report their clients (send timeouts, transactional sessions)
    clients_topic: str = CLIENTS_TOPIC


@dataclass
class ItemVerdict:
    row: StuckRow
    diagnosis: Diagnosis

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.row.key,
            "status": self.row.status,
            "age_seconds": round(self.row.age_seconds, 1),
            "since": self.row.since.isoformat() if self.row.since else None,
            "verdict": self.diagnosis.verdict,
            "reason": self.diagnosis.reason,
            "evidence": self.diagnosis.evidence,
        }


@dataclass
class DiagnosisResult:
    rule: str
    items: list[ItemVerdict] = field(default_factory=list)
    risks: list[dict[str, Any]] = field(default_factory=list)
    engine: str = ""
    truncated: bool = False
    degraded: bool = False
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    # the consumer ledger could not be read again before a skipped or expired verdict (_look_again)
    ledger_unread: bool = False

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(STUCK_VERDICTS, 0)
        for item in self.items:
            counts[item.diagnosis.verdict] += 1
        return counts


def stuck_query(rule: StuckRule) -> StuckQuery:
    binding = rule.binding
    return StuckQuery(
        table=binding.table,
        key_column=binding.key_column,
        status_column=rule.status_column,
        age_column=rule.age_column,
        stuck_values=tuple(str(v) for v in rule.stuck_values),
        older_than_seconds=int(rule.older_than_seconds),
        timestamp_zone=binding.timestamp_zone,  # "": the database session's TimeZone
        created_column=binding.created_column,
    )


def _bound_incarnation(binding: Binding, view: ClusterView) -> None:
    """Since when the topic's current incarnation is known to have existed
    (ClusterView.incarnation_since_ms): its first record's timestamp, which may be up to
    stamp_lag_ms before the record was written, or the auditor's first sighting of its id,
    whichever is earlier. Neither known (no record, and the id unread or never stored): now."""
    known: list[tuple[int, str]] = []
    first, lag = view.first_record_ms, view.stamp_lag_ms
    if first is not None and lag is not None:
        known.append((first + lag, f"its oldest first record is stamped {ms_to_iso(first)}"))
    seen = first_seen(binding.cluster, binding.topic, view.topic_id) if view.topic_id is not None else None
    if seen is not None:
        known.append(
            (
                int(seen.timestamp() * 1000),
                f"the auditor first saw its id {view.topic_id} at {seen.isoformat(timespec='seconds')}",
            )
        )
    since, why = min(
        known,
        default=(view.now_ms, "no record of it could be read, and the auditor keeps no earlier sighting of its id"),
    )
    view.incarnation_since_ms = since
    view.incarnation_reason = (
        f"{view.topic} is known to exist only since {ms_to_iso(since)} ({why}): a topic of that name deleted before "
        "the auditor first saw this one would have taken what was produced earlier with it"
    )


def _source_url(rule: StuckRule) -> str:
    try:
        return rule.binding.source.resolved_url()
    except MissingEnvError as exc:
        raise SourceError(f"source {rule.binding.source.name}: {exc}") from None


def _ranges_read(request: LocateRequest) -> dict[str, dict[int, tuple[int, int]]]:
    """Topic → partition → [start, end) the locate step read: the topic from where the key
    index stops standing in, both ledgers whole."""
    plan = request.plan
    reads = {plan.topic: {p: (request.start(s), s.high) for p, s in plan.partitions.items()}}
    for ledger in (plan.producer_ledger, plan.consumer_ledger):
        if ledger is not None:
            reads[ledger.topic] = ledger.ranges
    return reads


def _aside(name: str, read: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> Callable[[], T]:
    """`read(*args)` started in a thread of its own, while the diagnosis goes on; gives its
    result (waiting for it), or raises what it raised."""
    reading = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
    future = reading.submit(read, *args, **kwargs)
    reading.shutdown(wait=False)
    return future.result


def _read_state(binding: Binding) -> tuple[dict[str, Any] | None, StateUnreadable | None]:
    """The binding's state.json (None: no run yet), or why it could not be read."""
    try:
        return read_state_meta(binding), None
    except StateUnreadable as exc:
        return None, exc


def _prefetch_index(binding: Binding, meta: dict[str, Any] | None, keys: list[str]) -> Callable[[], IndexRead] | None:
    """The key index's rows of `keys` (memory.read_index), read in a thread of their own while
    the diagnosis reads the cluster: reading files needs nothing of it, and Parquet decodes
    without the interpreter lock. Gives the future's result (None: no state to read)."""
    if meta is None or not keys:
        return None
    try:
        root = state_location().join(binding.name)
    except StateLocationError:
        return None  # indexed_records names it
    return _aside("key-index", read_index, root, meta, keys)


def _recall_stamps(
    result: DiagnosisResult,
    binding: Binding,
    view: ClusterView,
    meta: dict[str, Any] | None,
    unreadable: StateUnreadable | None,
) -> dict[str, Any] | None:
    """Where the topic's producers were seen stamping records well before writing them, the
    oldest record's timestamp bounds the deleted records only within the topic's
    message.timestamp.before.max.ms (view.stamp_lag_ms); and whether a reconciliation run read
    records of a producer that is not probed (view.unprobed_record_ms). `meta`: the state.json
    _read_state read, or why it could not (`unreadable`). Returns it when the key index
    look-up may use it (None: none, or unreadable)."""
    try:
        if unreadable is not None:
            raise unreadable
        view.unprobed_record_ms = recalled_unprobed(meta)
    except StateUnreadable as exc:
        # What earlier runs read is not known: as if a record of an unprobed producer was written now.
        view.unprobed_record_ms = view.now_ms
        result.notes.append(
            f"the reconciliation state could not be read ({exc}): whether the topic's producers stamp records "
            "before writing them, and whether one that is not probed writes to it, is not known; the oldest "
            "record's timestamp is taken as when it was written"
        )
        return None
    try:
        backdated = recalled_stamps(binding, view.partitions, meta, view.topic_id)
    except StateUnreadable as exc:
        result.notes.append(
            f"whether the topic's producers stamp records before writing them is not known (the reconciliation "
            f"state could not be read: {exc}): the oldest record's timestamp is taken as when it was written"
        )
        return None
    if backdated is not None:
        view.backdated_reason = backdated.describe()
        view.stamp_lag_ms = stamp_lag_ms(backdated, view.cleanup.timestamp_before_max_ms if view.cleanup else None)
        result.notes.append(view.backdated_reason)
    return meta


def _check_after_read(binding: Binding, view: ClusterView, reads: dict[str, dict[int, tuple[int, int]]]) -> None:
    """Retention or delete_records removing records while the locate step read them makes
    every verdict that needs the records unknown (as a reconciliation run is discarded), never
    lost or never produced; the log ends read at the same time tell a sighting past the view's
    high watermarks written since (unknown) from one beyond the log end (truncated)."""
    view.read_done_ms = int(time.time() * 1000)
    try:
        deleted, view.high_after = read_after_locate(binding.cluster.client_config(), view.topic, reads)
    except KafkaReadError as exc:
        view.kafka_error = f"whether records were deleted while the diagnosis read them could not be checked: {exc}"
        return
    try:
        view.stalled = read_in_sync(binding.cluster.client_config(), view.topic)
    except KafkaReadError as exc:
        view.stalled_error = str(exc)
    if deleted:
        view.kafka_error = f"{deleted}; run the diagnosis again"


def _diagnosed(row: StuckRow, located: LocateResult, view: ClusterView, memory: KeyMemory) -> ItemVerdict:
    return ItemVerdict(
        row,
        diagnose(
            row,
            located.records.get(row.key, ()),
            located.ledger_entries.get(row.key, ()),
            located.marks,
            view,
            memory,
        ),
    )


def _verdict_positions(
    located: LocateResult, memory: KeyMemory, keys: set[str] | None = None
) -> Iterator[tuple[int, int]]:
    """(partition, offset) whose processed marks the verdicts of `keys` (None: every key) look
    up: the keys' records, their acked ledger entries, their sightings. A generator:
    recall_marks reads none of them when the state has no processed coverage."""

    def wanted(items: dict[str, Any]) -> Iterator[Any]:
        return iter(items.values()) if keys is None else (items[k] for k in keys if k in items)

    return chain(
        ((r.partition, r.offset) for found in wanted(located.records) for r in found),
        ((e.partition, e.offset) for found in wanted(located.ledger_entries) for e in found if e.offset >= 0),
        (
            (s.partition, s.offset)
            for seen in wanted(memory.sightings)
            for s in seen.copies
            if s.deleted_topic_until_ms is None  # the deleted topic's: a mark there now is of another record
        ),
    )


def _passed_unproven(verdict: ItemVerdict) -> bool:
    """An `unknown` deleted record a group committed and marked past, skipped or expired
    (verdicts_absent._deleted): a mark of its own, found on a second look, would settle it."""
    return any(
        v == "unknown" and any(g.get("outcome") == "unknown" and "processed_after_it" in g for g in groups or [])
        for v, groups in _judged(verdict)
    )


def _judged(verdict: ItemVerdict) -> list[tuple[str, list[dict[str, Any]] | None]]:
    """The item's verdict and its groups' outcomes, and those of each record with its key that
    runs saw (verdicts_memory: a mark at any of them may change the item's verdict)."""
    evidence = verdict.diagnosis.evidence
    if verdict.diagnosis.verdict == "processed-not-updated":  # a copy processed: no mark changes that
        return [(verdict.diagnosis.verdict, evidence.get("groups"))]
    return [(verdict.diagnosis.verdict, evidence.get("groups"))] + [
        (c.get("verdict", ""), c.get("groups")) for c in evidence.get("copies") or []
    ]


def _judged_as(verdict: ItemVerdict, *verdicts: str) -> bool:
    return any(v in verdicts for v, _ in _judged(verdict))


def _look_again(
    verdicts: list[ItemVerdict],
    result: DiagnosisResult,
    located: LocateResult,
    view: ClusterView,
    plan: ReadPlan,
    memory: KeyMemory,
    binding: Binding,
    options: DiagnosisOptions,
) -> list[ItemVerdict]:
    """`skipped` and `expired` verdicts (and `unknown` ones between the two: _passed_unproven)
    diagnosed again after a second look at the consumer ledger (trailing_marks), for marks the
    first read could not hold:

    - a mark that trailed its group's commit: for `skipped`, the ledger's tail is read
      MARK_SETTLE_SECONDS after the committed offsets were;
    - a mark at a position the first read did not look up: a record deleted since a
      reconciliation run saw it (a sighting), whose mark came after that run read the ledger;
      for those, the ledger is read from the start the first read took.

    A mark found makes the record processed; a marks-lost record found (its probe's ledger took
    records again since the first read) makes the records it names unknown, as the first read
    would have; a ledger that cannot be read makes the verdict unknown."""
    # (committed past: a mark may trail the commit, as for `skipped`)
    skipped = {v.row.key for v in verdicts if _judged_as(v, "skipped") or _passed_unproven(v)}
    judged = skipped | {v.row.key for v in verdicts if _judged_as(v, "expired")}
    if not judged or view.committed_read_at is None:
        return verdicts
    positions = set(_verdict_positions(located, memory, judged))
    unlooked = positions - mark_positions(located)
    if not skipped and not unlooked:
        return verdicts
    try:
        tail = read_trailing_marks(
            binding.cluster.client_config(),
            plan,
            binding.record_key,
            [str(g) for g in binding.consumer_groups or []],
            positions,
            view.committed_read_at + mark_settle_seconds() if skipped else 0.0,
            options.timeout_s,
            from_start=bool(unlooked),
        )
    except (LocateError, OSError, ValueError) as exc:  # ValueError: a bad RECONCILE_MARK_SETTLE_SECONDS
        result.notes.append(f"the consumer ledger could not be read again for processed marks: {exc}")
        result.ledger_unread = True
        return [
            ItemVerdict(
                v.row,
                Diagnosis(
                    "unknown",
                    f"{v.diagnosis.reason}; but the consumer ledger could not be read again for a processed mark "
                    f"of it: {exc}",
                    v.diagnosis.evidence,
                ),
            )
            if v.row.key in judged  # a mark the second look looked for may be of any of them
            else v
            for v in verdicts
        ]
    found = [m for k, m in tail.marks.items() if k not in located.marks]
    for mark in tail.marks.values():
        located.add_mark(mark)
    if found:
        result.notes.append(
            f"{len(found)} processed mark(s) found on a second look at the consumer ledger (marks that trailed "
            "their group's commit, or of records deleted since a reconciliation run saw them)"
        )
    named = _add_lost_marks(located, tail)
    if named:
        _apply_lost_marks(view, located)
        result.notes.append(
            f"{named} range(s) of marks their probe's ledger could not write (marks-lost records) found on a second "
            "look at the consumer ledger, written since its first read"
        )
    return [_diagnosed(v.row, located, view, memory) if v.row.key in judged else v for v in verdicts]


def _recall_marks(
    result: DiagnosisResult, located: LocateResult, indexed: IndexedTopic, groups: list[str], memory: KeyMemory
) -> None:
    """Processed marks the consumer ledger deleted after a run read them, for the positions
    the verdicts look up (the stuck keys' records, acked ledger entries, sightings)."""
    try:
        recalled = recall_marks(indexed, groups, _verdict_positions(located, memory))
    except StateUnreadable as exc:
        result.notes.append(f"the reconciliation state could not be read: {exc}")
        return
    added = {k: m for k, m in recalled.items() if k not in located.marks}
    located.marks.update(added)
    if added:
        result.notes.append(
            f"{len(added)} processed mark(s) the consumer ledger no longer holds were recalled from reconciliation "
            f"run {indexed.run_id}"
        )


def _recall_commits(result: DiagnosisResult, view: ClusterView, indexed: IndexedTopic, groups: list[str]) -> None:
    """What reconciliation runs saw of the groups' committed offsets (GroupState.seen)."""
    try:
        recalled = recall_commits(indexed, groups, view.topic_id)
    except StateUnreadable as exc:
        result.notes.append(f"the offsets reconciliation runs saw the groups commit could not be read: {exc}")
        return
    for name, seen in recalled.items():
        if name in view.groups:
            view.groups[name].seen = seen


def _apply_located(view: ClusterView, located: LocateResult) -> None:
    view.records_scanned = located.records_scanned
    view.keyed_records = located.keyed_records
    if located.unprobed_record_ms is not None:
        view.unprobed_record_ms = max(view.unprobed_record_ms or 0, located.unprobed_record_ms)
    if located.miskeyed_record_ms is not None:
        view.miskeyed_record_ms, view.miskeyed_session = located.miskeyed_record_ms, located.miskeyed_session
    if view.producer_ledger is not None and view.producer_ledger.available:
        view.producer_ledger.entries_for_topic = located.ledger_entries_for_topic
        view.producer_ledger.covers_topic_from_ms = located.ledger_covers_from_ms
        view.producer_ledger.unattributed_to_ms = located.unattributed_to_ms
        view.producer_ledger.untraced_sessions = located.untraced_sessions
    for name, group in view.groups.items():
        group.marks_on_topic = located.group_marks.get(name, 0)
        group.max_mark_below_low = {p: o for (g, p), o in located.max_mark_below_low.items() if g == name}
        group.first_mark = {p: o for (g, p), o in located.first_mark.items() if g == name}
        group.first_mark_ms = located.first_mark_ms.get(name)
        group.last_mark_below_low_ms = located.last_mark_below_low_ms.get(name)
    _apply_lost_marks(view, located)


def _apply_lost_marks(view: ClusterView, located: LocateResult) -> None:
    for name, group in view.groups.items():
        group.lost_marks = {p: list(spans) for (g, p), spans in located.lost_marks.items() if g == name}


def _add_lost_marks(located: LocateResult, tail: LocateResult) -> int:
    """The marks-lost ranges of the second look that the first read did not have (from_start
    reads the first read's ranges again), added to `located`; how many."""
    added = 0
    for (group, partition), spans in tail.lost_marks.items():
        known = located.lost_marks.get((group, partition), [])
        for first, last, reason in spans:
            if (first, last, reason) not in known:
                located.add_lost_marks(group, partition, first, last, reason)
                added += 1
    return added


def _recheck(url: str, query: StuckQuery, rows: list[StuckRow]) -> Callable[[], set[str]]:
    """source.still_stuck of `rows`, asked in a thread of its own (the database works while the
    verdicts are judged); gives its result, or raises its SourceError."""
    if not rows:
        return set
    return _aside("recheck", still_stuck, url, query, [r.key for r in rows], {r.key: r.row_id for r in rows})


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off during a diagnosis: it allocates a few dozen small
    containers per item (rows, records, evidence) that stay alive to the end, none in a cycle,
    and with 100,000 items the collector's repeated passes over all of them (and everything
    else alive) took a fifth of the time. Cycles made meanwhile are collected after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@_collector_paused()
def diagnose_rule(rule: StuckRule, options: DiagnosisOptions | None = None) -> DiagnosisResult:
    """Every stuck row of the rule with its verdict; raises SourceError when the table
    cannot be read and ConnectivityError when a secured cluster refuses the auditor (other
    Kafka problems make items unknown instead)."""
    options = options or DiagnosisOptions()
    binding = rule.binding
    result = DiagnosisResult(rule.name)
    clock = time.monotonic()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.monotonic()
        result.timings[name] = round(now - clock, 3)
        clock = now

    # A secured cluster that refuses the auditor fails the diagnosis (ConnectivityError): its
    # items would all be `unknown` for a reason no waiting cures. One merely unreachable is
    # left to the view below, which makes them `unknown` with the reason.
    try:
        check_cluster(binding.cluster, timeout_s=min(options.timeout_s, 10.0), spark=options.engine == "spark")
    except ConnectivityError as exc:
        if exc.security:
            raise
    # The producers' send timeouts (the clients topic) are read while the source is queried.
    outcome = _aside(
        "send-outcome",
        observed_producers,
        binding.cluster.client_config(),
        options.clients_topic,
        min(options.timeout_s, 5.0),
    )
    query = stuck_query(rule)
    url = _source_url(rule)
    try:
        rows, result.truncated = select_stuck_rows(url, query, options.max_items)
        source_clock = read_source_clock(url)
    except SourceError as exc:
        raise SourceError(f"source {binding.source.name}: {exc}") from None
    if result.truncated:
        result.notes.append(
            f"more than {options.max_items} rows are stuck: the oldest {options.max_items} were diagnosed"
        )
    keys = [r.key for r in rows]
    state_meta, state_unreadable = _read_state(binding)
    prefetched = _prefetch_index(binding, state_meta, keys) if options.use_index else None
    lap("source")

    producer_ledger, consumer_ledger = ledger_topics(
        rule.binding, options.producer_ledger_topic, options.consumer_ledger_topic
    )
    groups = [str(g) for g in binding.consumer_groups or []]
    view, plan = read_cluster_view(
        binding.cluster.client_config(),
        binding.topic,
        groups,
        producer_ledger,
        consumer_ledger,
        timeout_s=options.timeout_s,
        record_key=binding.record_key,
    )
    if not view.kafka_error:
        producers = outcome()
        view.send_outcome_ms, outcome_note = cluster_send_outcome(binding.cluster, observed=producers.outcome)
        view.transactional_sessions = producers.transactional_sessions
        view.acks_all_sessions = producers.acks_all_sessions
        view.poll_intervals_ms = dict(producers.poll_intervals_ms)
        view.clients_unread = producers.unread
        if producers.unread:
            result.notes.append(
                f"{producers.unread}: which producer sessions are transactional is not known, so the acks of other "
                "sessions whose records are gone do not say their transactions committed"
            )
        if outcome_note:
            result.notes.append(outcome_note)
    view.processing_cap_ms = processing_cap_ms()
    view.source_clock_ahead_ms = source_clock.ahead_ms
    if view.source_clock_ahead_ms:
        view.notes.append(source_clock.describe())
    state_meta = _recall_stamps(result, binding, view, state_meta, state_unreadable)
    if view.topic_id is not None:
        recreation = observe_topic_id(binding.cluster, binding.topic, view.topic_id, timezone.now())
        if recreation is not None:
            # Every record the new topic holds was written after it was created: after the
            # deleted topic's last record, which may be well before the auditor saw the new id
            # (its first record's timestamp says when, within stamp_lag_ms).
            first = view.first_record_ms
            lag = view.stamp_lag_ms
            until = recreation.until_ms if first is None or lag is None else min(recreation.until_ms, first + lag)
            view.recreated_until_ms, view.recreated_reason = until, recreation.describe()
            view.notes.append(recreation.describe())
    if not view.kafka_error:
        _bound_incarnation(binding, view)
    result.notes.extend(view.notes)
    lap("kafka")

    located = LocateResult()
    indexed = IndexedTopic(reason="not asked to")
    reads: dict[str, dict[int, tuple[int, int]]] | None = None  # what the locate step read, once it succeeded
    if rows and not view.kafka_error:
        if options.use_index and view.cleanup is not None and not view.cleanup.compacted:
            indexed = indexed_records(
                binding, keys, plan.partitions, binding.cluster.client_config(), meta=state_meta, prefetched=prefetched
            )
            lap("index")
        elif options.use_index:
            # The index says where runs saw each key; on a compacted topic the cleaner may have
            # removed a record since, and its offset would still count as found: read it all.
            indexed = IndexedTopic(
                reason=f"{binding.topic} is compacted ({view.cleanup.describe()})"
                if view.cleanup is not None
                else f"the cleanup.policy of {binding.topic} could not be read"
            )
            result.notes.append(f"the key index was not used: {indexed.reason}; the whole topic was read")
        request = LocateRequest(
            binding.cluster.client_config(),
            plan,
            binding.record_key,
            keys,
            groups,
            starts=indexed.starts,
            known=indexed.records,
            seen_intervals=indexed.seq_coverage,
        )
        try:
            located = locate(request, options.engine, options.spark)
            result.engine = located.engine
            result.timings.update({f"locate.{k}": v for k, v in located.timings.items()})
            located.records_scanned += indexed.covered
            located.keyed_records += indexed.covered
            if indexed.starts:
                result.notes.append(
                    f"the key index of reconciliation run {indexed.run_id} stood in for {indexed.covered} "
                    f"record(s); {located.records_scanned - indexed.covered} later record(s) were read"
                )
            reads = _ranges_read(request)
        except (LocateError, OSError) as exc:
            view.kafka_error = f"reading the records failed: {exc}"
        _apply_located(view, located)
    lap("locate")

    # The auditor's memory: for keys the topic no longer shows, and for those it shows, whose
    # earlier records gone since may have got further (verdicts_absent.with_gone_copies)
    memory = recall(
        binding,
        [r.key for r in rows] if not view.kafka_error else [],
        index=indexed.index,
        sessions={e.session for entries in located.ledger_entries.values() for e in entries},
    )
    if reads is not None and not view.kafka_error:
        _check_after_read(binding, view, reads)  # after the memory: a sighting it holds is older than these ends
    if memory.reason:
        result.notes.append(f"the reconciliation state could not be read: {memory.reason}")
    _recall_marks(result, located, indexed, groups, memory)
    _recall_commits(result, view, indexed, groups)
    try:
        view.mark_rules = rewritten_mark_rules(binding, indexed.index)
    except StateUnreadable as exc:
        result.notes.append(
            f"where the broker rewrote partitions is not known (the reconciliation state could not be read: {exc}): "
            "a processed mark at a rewritten offset may be of the record the broker lost"
        )
    lap("memory")

    # Rows updated while the evidence was read are healthy: never report them. The evidence is
    # read, so the source is asked again while the verdicts are judged.
    recheck = _recheck(url, query, rows)
    verdicts = [_diagnosed(row, located, view, memory) for row in rows]
    lap("verdicts")
    if any(_judged_as(v, "skipped", "expired") or _passed_unproven(v) for v in verdicts):
        verdicts = _look_again(verdicts, result, located, view, plan, memory, binding, options)
        recheck = _recheck(url, query, rows)  # the second look read more evidence: asked again after it
        lap("second_look")
    if verdicts:
        current = recheck()
        dropped = len(verdicts) - len(current)
        verdicts = [v for v in verdicts if v.row.key in current]
        if dropped:
            result.notes.append(f"{dropped} row(s) left the stuck status during the diagnosis")
    lap("recheck")

    result.items = verdicts
    previous = (
        DiagnosisRun.objects.filter(rule=rule, status=DiagnosisRun.OK).values_list("risks", flat=True).first()
        if rule.pk is not None  # an unsaved rule (the benchmark) has no history
        else None
    )
    result.risks = cluster_risks(view, previous or [])
    # A ledger topic that does not exist is no failed read: a later run would see no more, and
    # counting it would keep a rule's alerts open for good on a pipeline without probes.
    unreadable = bool(
        view.kafka_error
        or view.groups_error
        or (view.producer_ledger is not None and not view.producer_ledger.available and not view.producer_ledger.absent)
        or (
            groups
            and view.consumer_ledger is not None
            and not view.consumer_ledger.available
            and not view.consumer_ledger.absent
        )
    )
    unknown = [v.diagnosis.reason for v in verdicts if v.diagnosis.verdict == "unknown"]
    # Reads whose failure an unknown verdict names in its reason: the auditor's memory (an item
    # it saw expire is unknown without it), the topic's cleanup policy, in-sync replicas and id.
    # Only a verdict that names one counts (a read refused on every run, an ACL, would
    # otherwise keep every alert of the rule open for good).
    cited = [
        e
        for e in (memory.reason, view.cleanup_error, view.stalled_error, view.topic_id_error, view.clients_unread)
        if e
    ]
    # Degraded: something was unreadable and some item is unknown for it; alerts then stay open.
    result.degraded = bool(unknown) and (
        unreadable or result.ledger_unread or any(error in reason for reason in unknown for error in cited)
    )
    if view.kafka_error:
        result.notes.append(f"Kafka could not be read: {view.kafka_error}")
    for ledger in (view.producer_ledger, view.consumer_ledger):
        if ledger is not None and not ledger.available:
            result.notes.append(f"ledger {ledger.topic} could not be read: {ledger.reason}")
    return result


# --- storing a run --------------------------------------------------------------------------


def start_run(rule: StuckRule, trigger: str, requested_by: User | None = None) -> DiagnosisRun:
    return DiagnosisRun.objects.create(rule=rule, trigger=trigger, started_at=timezone.now(), requested_by=requested_by)


def _brief(item: StuckItem | ItemVerdict) -> dict[str, Any]:
    if isinstance(item, ItemVerdict):
        return {"key": item.row.key, "verdict": item.diagnosis.verdict, "reason": item.diagnosis.reason}
    return {"key": item.key, "verdict": item.verdict, "reason": item.reason}


def record_diagnosis(run: DiagnosisRun, result: DiagnosisResult) -> DiagnosisRun:
    """Store a successful diagnosis: items opened, updated or resolved, the run, its points."""
    rule = run.rule
    current = {v.row.key: v for v in result.items}
    unstuck = _unstuck_beyond(rule, result, current) if result.truncated else None
    now = timezone.now()
    with transaction.atomic():
        # The rule as it is now, locked until the run is stored: renamed while the diagnosis ran,
        # its problems are raised under its new name, never under one whose problems the rename
        # resolved (auditor.alerts.owners), which nothing would resolve again.
        rule = run.rule = StuckRule.objects.select_for_update(of=("self",)).select_related("binding").get(pk=rule.pk)
        open_items = {
            item.key: item
            for item in StuckItem.objects.open()
            .filter(rule=rule)
            .only("id", "key", "verdict", "verdict_since", "first_seen", "first_run_id", "reason")
        }
        resolved = [
            item for key, item in open_items.items() if key not in current and (unstuck is None or key in unstuck)
        ]
        for start in range(0, len(resolved), WRITE_BATCH):
            ids = [item.pk for item in resolved[start : start + WRITE_BATCH]]
            StuckItem.objects.filter(pk__in=ids).update(resolved_at=now, last_run=run)

        created: list[StuckItem] = []
        updated: list[StuckItem] = []
        for key, verdict in current.items():
            d = verdict.diagnosis
            item = open_items.get(key)
            if item is None:
                item = StuckItem(rule=rule, key=key, first_seen=now, first_run=run, verdict_since=now)
                created.append(item)
            else:
                if item.verdict != d.verdict:
                    item.verdict_since = now
                updated.append(item)
            item.status = verdict.row.status
            item.age_seconds = verdict.row.age_seconds
            item.since = verdict.row.since
            item.verdict = d.verdict
            item.reason = d.reason
            item.evidence = d.evidence
            item.last_seen = now
            item.last_run = run
        StuckItem.objects.bulk_create(created, batch_size=WRITE_BATCH)
        StuckItem.objects.bulk_update(
            updated,
            [
                "status",
                "age_seconds",
                "since",
                "verdict",
                "reason",
                "evidence",
                "last_seen",
                "last_run",
                "verdict_since",
            ],
            batch_size=WRITE_BATCH,
        )

        counts = result.counts()
        # The chart plots the rule's open items, not the rows this run examined: a truncated run
        # leaves open the items beyond its rows that the source says are still stuck.
        VerdictCount.objects.bulk_create(
            [VerdictCount(rule=rule, run=run, at=now, verdict=v, count=n) for v, n in _open_counts(rule).items()]
        )
        run.status = DiagnosisRun.OK
        run.finished_at = now
        run.duration_s = round((now - run.started_at).total_seconds(), 3)
        run.engine = result.engine
        run.total = len(result.items)
        run.counts = counts
        run.became_stuck = len(created)
        run.got_unstuck = len(resolved)
        run.truncated = result.truncated
        run.degraded = result.degraded
        run.risks = result.risks
        run.notes = result.notes
        run.timings = result.timings
        run.save()
        publish(
            "stuck",
            "diagnosis",
            {
                "run": run.as_event(),
                "became_stuck": [_brief(current[i.key]) for i in created[:LIVE_CHANGES_LISTED]],
                "got_unstuck": [_brief(i) for i in resolved[:LIVE_CHANGES_LISTED]],
            },
        )
        update_problems(rule, result, counts, muted_keys([*created, *updated]))
        prune_history(rule, now)
    return run


def _open_counts(rule: StuckRule) -> dict[str, int]:
    """The rule's open items per verdict, every verdict listed."""
    counts = dict.fromkeys(STUCK_VERDICTS, 0)
    rows = StuckItem.objects.open().filter(rule=rule).order_by().values_list("verdict").annotate(n=Count("id"))
    for verdict, n in rows:
        counts[verdict] = n
    return counts


def _unstuck_beyond(rule: StuckRule, result: DiagnosisResult, current: dict[str, ItemVerdict]) -> set[str]:
    """Of the rule's open items this truncated run did not report, those whose rows the source
    says are no longer stuck. The run examined only the oldest rows: absence from its list
    says nothing of the others, which stay open (same first_seen, no new "opened" alert). The
    source unreadable: none is known unstuck."""
    absent = [k for k in StuckItem.objects.open().filter(rule=rule).values_list("key", flat=True) if k not in current]
    if not absent:
        return set()
    try:
        stuck = still_stuck(_source_url(rule), stuck_query(rule), absent)
    except SourceError as exc:
        result.notes.append(
            f"{len(absent)} open item(s) beyond the rows examined were left open: the source could not be "
            f"re-checked ({exc})"
        )
        return set()
    return {k for k in absent if k not in stuck}


def prune_history(rule: StuckRule, now: datetime) -> None:
    """Runs (with their chart points) and resolved items older than AUDITOR_STUCK_HISTORY_DAYS go."""
    days = int(
        getattr(settings, "AUDITOR_STUCK_HISTORY_DAYS", None) or os.environ.get("AUDITOR_STUCK_HISTORY_DAYS") or 30
    )
    cutoff = now - timedelta(days=days)
    DiagnosisRun.objects.filter(rule=rule, started_at__lt=cutoff).delete()
    StuckItem.objects.filter(rule=rule, resolved_at__lt=cutoff).delete()


def fail_run(run: DiagnosisRun, error: str) -> DiagnosisRun:
    now = timezone.now()
    run.status = DiagnosisRun.FAILED
    run.error = mask_text(error)[:5000]  # a last guard: the callers mask what they know of
    run.finished_at = now
    run.duration_s = round((now - run.started_at).total_seconds(), 3)
    with transaction.atomic():
        run.save(update_fields=["status", "error", "finished_at", "duration_s"])
        publish("stuck", "diagnosis", {"run": run.as_event(), "became_stuck": [], "got_unstuck": []})
    return run


def run_diagnosis(
    rule: StuckRule,
    trigger: str = DiagnosisRun.SCHEDULE,
    requested_by: User | None = None,
    options: DiagnosisOptions | None = None,
) -> DiagnosisRun:
    """Diagnose and store, one run of a rule at a time (DiagnosisBusy otherwise; runlock.py).

    A failed run (the source table unreadable, an unexpected error) is stored with its
    error and changes nothing else: the items and alerts of the last good run stay.
    """
    with diagnosis_lock(rule) as taken_over:
        # Holding the lock, no other run of the rule is alive: one still marked running ended
        # without a result (its process was killed or crashed).
        who = f"its process ({taken_over})" if taken_over else "its process"
        for orphan in DiagnosisRun.objects.filter(rule=rule, status=DiagnosisRun.RUNNING):
            fail_run(orphan, f"ended without a result: {who} stopped before finishing (killed or crashed)")
        run = start_run(rule, trigger, requested_by)
        try:
            result = diagnose_rule(rule, options)
        except (SourceError, ConnectivityError) as exc:
            return fail_run(run, str(exc))
        except Exception as exc:
            log.exception("diagnosis of stuck rule %s failed", rule.name)
            return fail_run(run, f"{type(exc).__name__}: {exc}")
        return record_diagnosis(run, result)
