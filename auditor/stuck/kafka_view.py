"""Read the cluster for one diagnosis: offsets, committed offsets, groups, configs, ledgers.

Every read that fails is recorded in the view with its reason instead of raising, so the
verdicts that needed it become ``unknown`` rather than wrong. The reads happen in the order
that keeps them consistent with each other (as in spark_jobs/reconcile.py): committed
offsets, then the consumer ledger's end (a processed mark is flushed before its commit),
then the producer ledger's end, then the topic's own ends (so an entry acked at an offset
is always inside the range read).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from auditor.lint.engine.terms import Overtaken
from auditor.stuck.evidence import ClusterView, GroupState, LedgerView, PartitionState
from auditor.stuck.held_watermark import lag_bound_unread, longest_lag_bound
from auditor.stuck.record_reader import RecordReader, Target, leader_epoch_starts, record_timestamps
from spark_jobs.commit_history import offsets_history
from spark_jobs.group_offsets import committed_offsets, coordinator_request
from spark_jobs.kafka_cleanup import read_topic_cleanup
from spark_jobs.kafka_offsets import (
    KafkaReadError,
    PartitionOffsets,
    admin_client,
    partition_offsets,
    starts_passed,
    topic_absent,
    topic_id,
    topic_partitions,
)
from spark_jobs.kafka_security import admin_config
from spark_jobs.watermark_hold import partitions_under_min_isr, read_broker_settings


@dataclass
class LedgerRange:
    topic: str
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)  # partition -> [start, end)

    @property
    def total(self) -> int:
        return sum(end - start for start, end in self.ranges.values())


@dataclass
class ReadPlan:
    """What the locator has to read, fixed at the moment the view was taken."""

    topic: str
    partitions: dict[int, PartitionState] = field(default_factory=dict)
    producer_ledger: LedgerRange | None = None
    consumer_ledger: LedgerRange | None = None

    @property
    def topic_records(self) -> int:
        return sum(p.high - p.low for p in self.partitions.values())

    @property
    def total(self) -> int:
        ledgers = [r.total for r in (self.producer_ledger, self.consumer_ledger) if r is not None]
        return self.topic_records + sum(ledgers)


def client_settings(kafka_config: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """(bootstrap servers, the rest as strings) from a cluster's resolved client config."""
    config = {str(k): str(v) for k, v in kafka_config.items()}
    return config.pop("bootstrap.servers"), config


def ledger_view(
    admin: AdminClient, topic: str, timeout_s: float
) -> tuple[LedgerView, LedgerRange | None, dict[int, tuple[int, int]]]:
    try:
        partitions = topic_partitions(admin, topic, timeout_s, required=False)
        if not partitions:
            if topic_absent(admin, topic, timeout_s):
                return LedgerView(topic, False, f"topic {topic} does not exist", absent=True), None, {}
            return LedgerView(topic, False, f"topic {topic} is not listed (not allowed to describe it?)"), None, {}
        offsets = partition_offsets(admin, topic, partitions, timeout_s)
    except KafkaReadError as exc:
        return LedgerView(topic, False, str(exc)), None, {}
    ranges = {p: (o.low, o.high) for p, o in offsets.items()}
    return LedgerView(topic, True), LedgerRange(topic, ranges), ranges


# members, state, simple, the topic's partitions assigned to its members (None: unknown)
Described = tuple[int | None, str | None, bool | None, frozenset[int] | None]
UNDESCRIBED: Described = (None, None, None, None)


def _assigned(members: list[Any], topic: str) -> frozenset[int] | None:
    partitions: set[int] = set()
    for member in members:
        assignment = getattr(member, "assignment", None)
        if assignment is None:
            return None
        partitions.update(tp.partition for tp in assignment.topic_partitions or [] if tp.topic == topic)
    return frozenset(partitions)


def _describe_groups(
    connection: dict[str, Any], groups: list[str], topic: str, timeout_s: float
) -> dict[str, Described]:
    if not groups:
        return {}
    try:
        answers = coordinator_request(
            connection, lambda admin: admin.describe_consumer_groups(groups, request_timeout=timeout_s)
        )
    except KafkaException:
        return dict.fromkeys(groups, UNDESCRIBED)
    described: dict[str, Described] = {}
    for group in groups:
        result = answers.get(group)
        if result is None or isinstance(result, BaseException):
            described[group] = UNDESCRIBED
            continue
        state = getattr(result.state, "name", str(result.state)).lower()
        # a group that does not exist reads as Dead with no protocol, which the client also
        # calls simple: it is not a group that commits without joining
        simple = bool(result.is_simple_consumer_group) and state != "dead"
        members = list(result.members or [])
        described[group] = (len(members), state, simple, _assigned(members, topic))
    return described


def _configs(admin: AdminClient, view: ClusterView, timeout_s: float) -> None:
    """The topic's cleanup settings and the brokers' offsets.retention.minutes and
    replica.lag.time.max.ms, into `view`; what could not be read goes to its notes."""
    topic = view.topic
    offsets_minutes: int | None = None
    try:
        view.cleanup = read_topic_cleanup(admin, topic, timeout_s)
        view.retention_ms = view.cleanup.retention_ms
    except KafkaReadError as exc:
        view.cleanup_error = str(exc)
        view.notes.append(f"retention.ms and cleanup.policy of {topic} could not be read: {exc}")
    try:
        # Each group's coordinator applies its own broker's offsets.retention.minutes: the
        # shortest one bounds them all, and one broker that does not answer leaves it unknown.
        # Each partition's leader its replica.lag.time.max.ms: the longest bounds them all.
        # librdkafka takes one broker resource per DescribeConfigs call.
        settings = read_broker_settings(admin, ("offsets.retention.minutes", "replica.lag.time.max.ms"), timeout_s)
        offsets_minutes = shortest_minutes([s["offsets.retention.minutes"] for s in settings], len(settings))
        lag_bound = longest_lag_bound([s["replica.lag.time.max.ms"] for s in settings], len(settings))
    except (KafkaException, ValueError) as exc:
        lag_bound = lag_bound_unread(str(exc))
        view.notes.append(f"offsets.retention.minutes could not be read: {exc}; {lag_bound[1]}")
    except TimeoutError:
        lag_bound = lag_bound_unread(f"no answer within {timeout_s:g} s")
        view.notes.append(
            f"offsets.retention.minutes could not be read: no answer within {timeout_s:g} s; {lag_bound[1]}"
        )
    view.offsets_retention_minutes = offsets_minutes
    view.replica_lag_max_ms, view.replica_lag_note = lag_bound


def shortest_minutes(values: list[str | None], brokers: int) -> int | None:
    """The shortest of the brokers' offsets.retention.minutes; None unless every one of the
    `brokers` gave it."""
    if not values or len(values) != brokers or any(v is None for v in values):
        return None
    return min(int(v) for v in values if v is not None)


def read_after_locate(
    kafka_config: dict[str, Any], topic: str, reads: dict[str, dict[int, tuple[int, int]]], timeout_s: float = 10.0
) -> tuple[str | None, dict[int, int]]:
    """One read of the offsets once the records were located and the memory recalled.

    Returns why the ranges read (topic → partition → [start, end)) are not all that was
    there (partitions whose log start moved past the start read; None when nothing was
    deleted under the read), and `topic`'s high watermarks now (an offset remembered past
    the view's ones and below these was written since; at or past these, it is beyond the
    log end). Raises KafkaReadError when it cannot tell."""
    bootstrap, config = client_settings(kafka_config)
    admin = admin_client(bootstrap, config, timeout_s)
    moved: list[str] = []
    highs: dict[int, int] = {}
    for read_topic, ranges in reads.items():
        now = partition_offsets(admin, read_topic, sorted(ranges), timeout_s)
        if read_topic == topic:
            highs = {p: o.high for p, o in now.items()}
        moved += [
            f"{read_topic}/{p} from offset {start} (log start now {low})"
            for p, (start, low) in starts_passed(ranges, now).items()
        ]
    deleted = f"records were deleted while the diagnosis read them: {', '.join(moved)}" if moved else None
    return deleted, highs


def read_in_sync(kafka_config: dict[str, Any], topic: str, timeout_s: float = 10.0) -> dict[int, str]:
    """Per partition of `topic` under min.insync.replicas now: why its high watermark may stay
    put however long (spark_jobs.watermark_hold.partitions_under_min_isr). Read after the log
    ends, which it speaks for. Raises KafkaReadError when it cannot tell."""
    bootstrap, config = client_settings(kafka_config)
    return partitions_under_min_isr(admin_client(bootstrap, config, timeout_s), topic, timeout_s)


def _complete_since(
    low_offsets: dict[int, tuple[int, int]], topic: str, stamps: dict[Target, int | None]
) -> int | None:
    bound = 0
    for partition, (low, _) in low_offsets.items():
        if low == 0:
            continue
        stamp = stamps.get((topic, partition, low))
        if stamp is None:
            return None
        bound = max(bound, stamp)
    return bound


def _confirm_overtaken(
    connection: dict[str, Any],
    view: ClusterView,
    topic: str,
    partitions: list[int],
    offsets: dict[int, PartitionOffsets],
    timeout_s: float,
) -> None:
    """Groups whose committed offset lies below the partition's log start, read again after
    the log start: the first read came before it, and the group may have committed past the
    log start in between. Only an offset still below it proves that records were deleted
    before the group committed them."""
    suspects: dict[str, set[int]] = {}
    for g in view.groups.values():
        for p, c in g.committed.items():
            if p in offsets and c < offsets[p].low:
                suspects.setdefault(g.group, set()).add(p)
    if not suspects:
        return
    try:
        rows = committed_offsets(connection, sorted(suspects), topic, partitions, timeout_s)
    except KafkaReadError as exc:
        view.notes.append(f"committed offsets below the log start could not be confirmed: {exc}")
        return
    for group, partition, committed in rows:
        if partition in suspects.get(group, ()) and committed < offsets[partition].low:
            view.groups[group].overtaken[partition] = Overtaken(group, partition, committed, offsets[partition].low)


def _offsets_history(
    admin: AdminClient,
    bootstrap: str,
    config: dict[str, str],
    view: ClusterView,
    topic: str,
    partitions: list[int],
    timeout_s: float,
) -> None:
    """What __consumer_offsets still shows of the groups' offsets on the topic (offsets_history):
    for a group missing a committed offset on a partition, its removal there; for every group,
    its commits, whose metadata names the probed consumer session that made each (the rule for
    `skipped`, verdict_outcomes.passing_commit). A read that fails is noted, and the groups are
    judged as before (commits None)."""
    groups = sorted(view.groups)
    if not groups:
        return
    try:
        found, history = offsets_history(admin, bootstrap, config, groups, topic, timeout_s, "auditor-stuck")
    except KafkaReadError as exc:
        view.notes.append(
            f"what __consumer_offsets shows of group(s) {', '.join(groups)} (removed offsets, who committed) could "
            f"not be read: {exc}"
        )
        return
    for group, state in view.groups.items():
        state.commits = history.get(group, {})
        if set(partitions) - set(state.committed):
            state.removed = {p: r for p, r in found.get(group, {}).items() if p not in state.committed}


def read_cluster_view(
    kafka_config: dict[str, Any],
    topic: str,
    groups: list[str],
    producer_ledger_topic: str,
    consumer_ledger_topic: str,
    *,
    timeout_s: float = 10.0,
    record_key: str = "key",
) -> tuple[ClusterView, ReadPlan]:
    now_ms = int(time.time() * 1000)
    view = ClusterView(topic=topic, now_ms=now_ms, record_key=record_key)
    plan = ReadPlan(topic)
    bootstrap, config = client_settings(kafka_config)
    connection = admin_config(bootstrap, config, timeout_s)
    admin = AdminClient(connection)
    try:
        partitions = topic_partitions(admin, topic, timeout_s)
    except KafkaReadError as exc:
        view.kafka_error = str(exc)
        return view, plan
    try:
        view.topic_id = topic_id(admin, topic, timeout_s)
    except KafkaReadError as exc:  # then no re-creation can be seen: said, not guessed
        view.topic_id_error = str(exc)
        view.notes.append(f"the topic's id could not be read, so a re-creation of it would go unseen: {exc}")
    try:
        rows = committed_offsets(connection, groups, topic, partitions, timeout_s)
    except KafkaReadError as exc:
        view.groups_error = str(exc)
        rows = []
    described = _describe_groups(connection, groups, topic, timeout_s) if groups and not view.groups_error else {}
    for group in groups:
        members, state, simple, assigned = described.get(group, UNDESCRIBED)
        view.groups[group] = GroupState(group, members=members, state=state, simple=simple, assigned=assigned)
    for group, partition, offset in rows:
        view.groups[group].committed[partition] = offset
    view.committed_read_at = time.monotonic()
    if not view.groups_error:
        _offsets_history(admin, bootstrap, config, view, topic, partitions, timeout_s)

    view.consumer_ledger, plan.consumer_ledger, consumer_lows = ledger_view(admin, consumer_ledger_topic, timeout_s)
    view.producer_ledger, plan.producer_ledger, producer_lows = ledger_view(admin, producer_ledger_topic, timeout_s)
    try:
        offsets = partition_offsets(admin, topic, partitions, timeout_s)
    except KafkaReadError as exc:
        view.kafka_error = str(exc)
        return view, plan
    _configs(admin, view, timeout_s)
    _confirm_overtaken(connection, view, topic, partitions, offsets, timeout_s)

    targets: list[Target] = [(topic, p, o.low) for p, o in offsets.items() if o.low < o.high]
    targets += [(topic, p, o.stable) for p, o in offsets.items() if o.stable < o.high]
    for ledger_topic, lows in ((producer_ledger_topic, producer_lows), (consumer_ledger_topic, consumer_lows)):
        targets += [(ledger_topic, p, low) for p, (low, high) in lows.items() if 0 < low < high]
    # A group's oldest unread record is read as read_committed: an aborted transaction right
    # after a caught-up group's committed offset is no record it will ever read, and its
    # CreateTime, growing older, would read as a lag nearing retention.
    unread: list[Target] = [
        (topic, p, c)
        for group_state in view.groups.values()
        for p, c in group_state.committed.items()
        if p in offsets and c < offsets[p].high
    ]
    heads: dict[Target, tuple[str, int]] = {}
    epoch_starts: dict[int, int | None] = {}
    try:
        with RecordReader(bootstrap, config, timeout_s) as reader:
            found = reader.read(targets)
            epoch_starts = leader_epoch_starts(reader, topic, offsets)
        heads = {t: r.audit for t, r in found.items() if r is not None and r.audit is not None}
        stamps = {t: None if r is None else r.timestamp_ms for t, r in found.items()}
        unread_stamps = record_timestamps(bootstrap, config, unread, timeout_s, isolation="read_committed")
    except KafkaException as exc:
        view.notes.append(f"record timestamps could not be read: {exc}")
        stamps, unread_stamps = {}, {}
    view.partitions = {
        p: PartitionState(
            p,
            o.low,
            o.stable,
            o.high,
            stamps.get((topic, p, o.low)) if o.low else None,
            heads.get((topic, p, o.low)) if o.low else None,
            o.leader_epoch,
            epoch_starts.get(p),
        )
        for p, o in offsets.items()
    }
    plan.partitions = view.partitions
    # when the topic's current incarnation is known to have existed (service: with its id's first sighting)
    firsts = [ms for p, o in offsets.items() if o.low < o.high and (ms := stamps.get((topic, p, o.low))) is not None]
    view.first_record_ms = min(firsts, default=None)
    for group_state in view.groups.values():
        group_state.committed_timestamp_ms = {
            p: unread_stamps.get((topic, p, c)) for p, c in group_state.committed.items()
        }
    if view.producer_ledger.available:
        view.producer_ledger.complete_since_ms = _complete_since(producer_lows, producer_ledger_topic, stamps)
    if view.consumer_ledger.available:
        view.consumer_ledger.complete_since_ms = _complete_since(consumer_lows, consumer_ledger_topic, stamps)
    view.open_transaction_since_ms = {
        p: stamps.get((topic, p, o.stable)) for p, o in offsets.items() if o.stable < o.high
    }
    return view, plan
