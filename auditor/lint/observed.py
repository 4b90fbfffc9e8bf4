"""What a live cluster shows about its clients: the probes' reported configs, the consumers'
lag in time, the brokers' settings. No Django here: the scan service wires it up.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    ClusterMetadata,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from auditor.lint.engine.terms import Overtaken
from auditor.probes.codec import ClientRecord
from auditor.probes.codec_decode import decode_ledger_record
from auditor.probes.message import record_position  # messages() yields records only
from spark_jobs import processing_bound
from spark_jobs.group_offsets import committed_offsets

_BROKER_SET = {
    ConfigSource.STATIC_BROKER_CONFIG.value,
    ConfigSource.DYNAMIC_BROKER_CONFIG.value,
    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value,
}
_READER_GROUP = "auditor-lint-reader"  # assign() only: never joins, never commits


@dataclass(frozen=True)
class ReportedClients:
    """The newest record of each probe session in the clients topic."""

    clients: list[ClientRecord]
    undecodable: int = 0
    complete: bool = True  # False when the timeout hit before the end of the topic
    # every producer session (not only each app's newest) whose config names a transactional.id
    transactional_sessions: frozenset[str] = frozenset()
    # every producer session whose config makes it ack with acks=all (acks_all)
    acks_all_sessions: frozenset[str] = frozenset()
    # every consumer session whose config sets max.poll.interval.ms (max_poll_interval_ms)
    poll_intervals_ms: Mapping[str, int] = field(default_factory=dict)


def _reader(connection: Mapping[str, Any], isolation: str = "read_uncommitted") -> Consumer:
    """A reader that never joins or commits; read_uncommitted (the default) for timestamps and
    configs, so that an open transaction does not hold it back."""
    return Consumer(
        {
            **connection,
            "group.id": _READER_GROUP,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
        }
    )


class _PartitionReader:
    """Reads given partitions from a start offset to their end offset, until a deadline.

    ``first_only`` stops each partition after its first record (the lag probe needs one
    record, not the backlog behind it). ``complete`` says whether every partition was done
    before the deadline.
    """

    def __init__(
        self, consumer: Consumer, starts: Mapping[tuple[str, int], tuple[int, int]], *, first_only: bool = False
    ):
        self.consumer = consumer
        self.starts = dict(starts)
        self.first_only = first_only
        self.pending = {tp for tp, (first, end) in self.starts.items() if end > first}
        self.complete = not self.pending

    def _done(self, tp: tuple[str, int]) -> None:
        self.pending.discard(tp)
        self.consumer.pause([TopicPartition(tp[0], tp[1])])

    def messages(self, deadline: float) -> Iterator[Message]:
        if not self.pending:
            return
        self.consumer.assign([TopicPartition(topic, p, self.starts[(topic, p)][0]) for topic, p in self.pending])
        while self.pending and time.monotonic() < deadline:
            for message in self.consumer.consume(num_messages=500, timeout=0.5):
                tp = (message.topic(), message.partition())
                if tp not in self.pending:
                    continue
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        # librdkafka signals the end at its last fetch's high watermark, which
                        # after a leader change can lag the end planned for a moment (and a
                        # truncated log never reaches it): only the planned end finishes a
                        # partition; short of it, the deadline calls the read incomplete
                        end = message.offset()
                        if end is not None and end >= self.starts[tp][1]:
                            self._done(tp)
                        continue
                    raise KafkaException(error)
                yield message
                if self.first_only or record_position(message)[2] >= self.starts[tp][1] - 1:
                    self._done(tp)
        self.complete = not self.pending


# What the cluster says of a clients topic that does not exist (the broker's, librdkafka's own).
_NO_SUCH_TOPIC = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC})


def read_reported_clients(connection: Mapping[str, Any], topic: str, *, timeout: float = 20.0) -> ReportedClients:
    """Decode the clients topic (docs/contracts.md, `_audit.clients`) from its start to its end.

    Keeps the newest record per session; sessions whose kind, client id, group, host,
    library and config are all identical (the same app restarted) are reported once, by
    their newest session. A missing topic means no probe has reported yet.
    """
    deadline = time.monotonic() + timeout
    consumer = _reader(connection)
    try:
        metadata = consumer.list_topics(topic, timeout=timeout)
        described = metadata.topics.get(topic)
        if described is None or (described.error is not None and described.error.code() in _NO_SUCH_TOPIC):
            return ReportedClients([])
        if described.error is not None:
            # refused (an ACL) or unanswered: not read, which is not "nothing reported"
            raise KafkaException(described.error)
        starts: dict[tuple[str, int], tuple[int, int]] = {}
        for partition in described.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
            starts[(topic, partition)] = (low, high)
        newest: dict[str, ClientRecord] = {}
        undecodable = 0
        reader = _PartitionReader(consumer, starts)
        for message in reader.messages(deadline):
            record = decode_ledger_record(message.value())
            if not isinstance(record, ClientRecord):
                undecodable += 1
                continue
            known = newest.get(record.session)
            # a session's records share a key, hence a partition: a later one is newer
            if known is None or record.ts_ms >= known.ts_ms:
                newest[record.session] = record
        complete = reader.complete
    finally:
        consumer.close()
    same_app: dict[str, ClientRecord] = {}
    for record in newest.values():
        identity = json.dumps(
            [record.kind, record.client_id, record.group, record.host, record.library, record.config],
            sort_keys=True,
            default=str,
        )
        known = same_app.get(identity)
        if known is None or (record.ts_ms, record.session) > (known.ts_ms, known.session):
            same_app[identity] = record
    clients = sorted(same_app.values(), key=lambda r: (r.kind, r.client_id or "", r.host or "", r.session))
    transactional = frozenset(
        r.session for r in newest.values() if r.kind == "producer" and (r.config or {}).get("transactional.id")
    )
    return ReportedClients(
        clients,
        undecodable=undecodable,
        complete=complete,
        transactional_sessions=transactional,
        acks_all_sessions=frozenset(r.session for r in newest.values() if r.kind == "producer" and acks_all(r)),
        poll_intervals_ms={
            r.session: interval
            for r in newest.values()
            if r.kind == "consumer" and (interval := max_poll_interval_ms(r)) is not None
        },
    )


# librdkafka's default max.poll.interval.ms, and the Java client's
DEFAULT_MAX_POLL_INTERVAL_MS = processing_bound.DEFAULT_MAX_POLL_INTERVAL_MS


def max_poll_interval_ms(record: ClientRecord) -> int | None:
    """The consumer's max.poll.interval.ms as its probe reported it: the longest it may go
    between two polls before its client takes it as failed and leaves the group (processing
    what it polled included). None where its config does not set it (librdkafka's default,
    DEFAULT_MAX_POLL_INTERVAL_MS, applies) or sets it to something that is not a number of ms."""
    value = (record.config or {}).get("max.poll.interval.ms")
    try:
        parsed = int(str(value).strip())
    except ValueError:
        return None
    return parsed if parsed > 0 else None


def acks_all(record: ClientRecord) -> bool:
    """Does the producer whose probe reported `record` ack with acks=all? Its acks setting
    (acks, or librdkafka's alias request.required.acks) says so, or idempotence (which librdkafka
    refuses to run without it; a transactional.id turns idempotence on), or, unset, librdkafka's
    default since 1.0. False where the record does not tell.

    Keys of a nested `default.topic.config` win over the top level's, as confluent-kafka applies
    that dict last (parsers.as_config); of the two spellings of acks, the later one wins."""
    config = dict(record.config or {})
    nested = config.pop("default.topic.config", None)
    if isinstance(nested, Mapping):
        config = {key: value for key, value in config.items() if key not in nested} | dict(nested)
    acks = [value for key, value in config.items() if key in ("acks", "request.required.acks")]
    if acks:
        return str(acks[-1]).strip().lower() in ("all", "-1")
    if config.get("transactional.id") or str(config.get("enable.idempotence", "")).strip().lower() == "true":
        return True
    major = record.library_version.split(".", 1)[0] if record.library_version else ""
    return record.library == "librdkafka" and major.isdigit() and int(major) >= 1


@dataclass(frozen=True)
class ConsumerLag:
    """How far behind the consumer groups are, per topic: in time, and where the log start
    has already passed a group's committed offset."""

    seconds: dict[str, float]
    overtaken: dict[str, list[Overtaken]]
    unknown: dict[str, str] = field(default_factory=dict)  # topic → why its lag is not known


def consumer_lag(
    connection: Mapping[str, Any],
    metadata: ClusterMetadata,
    groups_by_topic: Mapping[str, Iterable[str]],
    *,
    timeout: float = 15.0,
    read_timeout: float | None = None,
    now_ms: int | None = None,
) -> ConsumerLag:
    """Per topic, how far behind in time its slowest consumer group is.

    The lag of a partition is the age of the first record the group has not consumed
    (the record at its committed offset, or the oldest one left when the log start has
    passed that: then the group is also listed as overtaken); 0 when the group is at the
    end. Listed in ``unknown`` with the reason instead: a topic none of whose groups has
    committed an offset, and one whose first unread records were not all read within the
    time left of ``timeout`` (or ``read_timeout``), never measured from the partitions that
    answered.
    """
    deadline = time.monotonic() + timeout
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    lag: dict[str, float] = {}
    overtaken: dict[str, list[Overtaken]] = {}
    # read_committed: an aborted transaction right after a caught-up group's committed offset
    # holds no record the group will read (its CreateTime would read as a growing lag); the
    # ends it reads are the last stable offsets, where a read_committed group stops too
    consumer = _reader(connection, "read_committed")
    uncommitted: dict[str, list[str]] = {}  # topics none of whose groups has committed an offset
    try:
        wanted: dict[tuple[str, int], int] = {}
        ends: dict[tuple[str, int], tuple[int, int]] = {}
        for topic, groups in groups_by_topic.items():
            described = metadata.topics.get(topic)
            groups = list(groups)
            if described is None or not groups:
                continue
            partitions = list(described.partitions)
            # The log start before the committed offsets: a group that commits past it in
            # between is then not taken for one the log start overtook.
            for partition in partitions:
                ends[(topic, partition)] = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=timeout
                )
            for group in groups:
                # a partition whose committed offset could not be read raises: never a lag of 0
                for _, partition, offset in committed_offsets(connection, [group], topic, partitions, timeout):
                    tp = (topic, partition)
                    low, high = ends[tp]
                    lag.setdefault(topic, 0.0)
                    if offset < low:
                        overtaken.setdefault(topic, []).append(Overtaken(group, partition, offset, low))
                    if max(offset, low) < high:
                        first = max(offset, low)
                        wanted[tp] = min(wanted.get(tp, first), first)
            if topic not in lag:
                uncommitted[topic] = groups
        reader = _PartitionReader(consumer, {tp: (first, ends[tp][1]) for tp, first in wanted.items()}, first_only=True)
        if read_timeout is not None:
            deadline = min(deadline, time.monotonic() + read_timeout)
        for message in reader.messages(deadline):
            kind, ts_ms = message.timestamp()
            if kind != TIMESTAMP_NOT_AVAILABLE and ts_ms > 0:
                topic = record_position(message)[0]
                lag[topic] = max(lag[topic], max(0, now_ms - ts_ms) / 1000)
    finally:
        consumer.close()
    unread: dict[str, list[int]] = {}
    for topic, partition in sorted(reader.pending):
        unread.setdefault(topic, []).append(partition)
    unknown = {
        topic: f"the first unread record of partition(s) {', '.join(map(str, partitions))} was not read in time"
        for topic, partitions in unread.items()
    }
    for topic, groups in uncommitted.items():
        unknown[topic] = f"none of its groups ({', '.join(groups)}) has committed an offset on it"
    return ConsumerLag({t: v for t, v in lag.items() if t not in unknown}, overtaken, unknown)


def broker_configs(admin: AdminClient, broker_id: int, *, timeout: float = 15.0) -> dict[str, Any]:
    """The settings a broker runs with that were set (server.properties or dynamically)."""
    resource = ConfigResource(ResourceType.BROKER, str(broker_id))
    entries = admin.describe_configs([resource], request_timeout=timeout)[resource].result(timeout=timeout)
    return {
        name: entry.value for name, entry in entries.items() if entry.value is not None and entry.source in _BROKER_SET
    }
