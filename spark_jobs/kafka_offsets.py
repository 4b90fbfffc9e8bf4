"""Driver-side Kafka look-ups: partitions, watermarks, last stable offsets, record prints.
A group coordinator's look-ups (committed offsets, group descriptions) are in group_offsets.

These are tiny (one value per partition or per group and partition); everything per record
is read by Spark executors.
"""

from __future__ import annotations

import os
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ListOffsetsResultInfo, OffsetSpec

from spark_jobs.kafka_options import java_kafka_options
from spark_jobs.kafka_security import admin_config, connection_settings

T = TypeVar("T")


class KafkaReadError(RuntimeError):
    """Kafka could not be read (broker unreachable, topic missing, request failed)."""


@dataclass(frozen=True)
class PartitionOffsets:
    partition: int
    low: int  # log start offset (earlier records are gone: retention or deletion)
    stable: int  # last stable offset: read_committed readers stop here
    high: int  # high watermark
    # the partition's current leader epoch (0: the leader it was created with; None: the broker
    # did not say). Every leader change raises it.
    leader_epoch: int | None = None


def admin_client(
    bootstrap_servers: str, config: Mapping[str, Any] | None = None, timeout_s: float = 10.0
) -> AdminClient:
    """An admin client with the cluster's connection settings (kafka_security.admin_config).
    Each new one bootstraps (connections, API versions, metadata) before its first answer: a
    reconciliation run makes one (reconcile_plan.plan_run) and asks all its admin reads on it."""
    return AdminClient(admin_config(bootstrap_servers, config, timeout_s))


def topic_partitions(admin: AdminClient, topic: str, timeout_s: float = 10.0, required: bool = True) -> list[int]:
    """The topic's partition ids; [] for a missing topic when not required."""
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise KafkaReadError(f"Kafka unreachable while listing topics: {exc}") from exc
    info = metadata.topics.get(topic)
    if info is None or info.error is not None:
        if not required:
            return []
        reason = info.error if info is not None else "not found"
        raise KafkaReadError(f"topic {topic!r} cannot be read: {reason}")
    return sorted(info.partitions)


# How much longer than an admin request's own timeout its future is waited for.
FUTURE_MARGIN_S = 5.0

# The id of a topic made before topic ids existed (Kafka < 2.8), as the client prints it.
NO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"


def another_topic(read_id: str | None, now_id: str | None) -> bool:
    """Whether a topic read with id `read_id` has been deleted and created again: its id now
    is another. False when either is not known (a state or a cluster without ids)."""
    return bool(read_id and now_id and read_id != now_id)


def topic_id(admin: AdminClient, topic: str, timeout_s: float = 10.0) -> str | None:
    """The topic's id: Kafka gives every topic one when it is created, and a topic deleted and
    created again under the same name gets another. None when the cluster gives none."""
    try:
        future = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout_s)[topic]
        # librdkafka ends the request at request_timeout; the wait is a backstop past it, so a
        # request is not left in flight when the caller drops the client (librdkafka#4605)
        description = future.result(timeout=timeout_s + FUTURE_MARGIN_S)
    except KafkaException as exc:
        raise KafkaReadError(f"topic {topic!r} cannot be described: {exc}") from exc
    except TimeoutError:  # no answer at all (a frozen broker's connection: CI of stop 36)
        raise KafkaReadError(f"topic {topic!r} cannot be described: no answer within {timeout_s:g} s") from None
    found = str(description.topic_id) if description.topic_id is not None else ""
    return found if found and found != NO_TOPIC_ID else None


def topic_absent(admin: AdminClient, topic: str, timeout_s: float = 10.0) -> bool:
    """Whether the cluster says the topic does not exist (UNKNOWN_TOPIC_OR_PART, asked by its
    name). A topic listing leaves out, just the same, a topic the client is not allowed to
    describe; asked by name, that one is refused (TOPIC_AUTHORIZATION_FAILED). Any other answer,
    or none, is False: not known to be absent. DescribeTopics never creates the topic, as a
    metadata request for it may on a broker that auto-creates topics."""
    try:
        future = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout_s)[topic]
        future.result(timeout=timeout_s + FUTURE_MARGIN_S)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        return isinstance(error, KafkaError) and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    except TimeoutError:
        return False
    return False


def live_bootstrap_servers(
    bootstrap_servers: str,
    config: Mapping[str, Any] | None,
    topic: str,
    timeout_s: float = 10.0,
    admin: AdminClient | None = None,
) -> str:
    """The brokers the cluster's metadata names now, as a bootstrap list for the Java clients of
    Spark's Kafka source; the configured list when the metadata cannot be read.

    Every Spark read makes fresh Java clients (an admin on the driver, a consumer per task),
    and each bootstraps from one address of its list, picked at random. A frozen broker's
    kernel still accepts connections, so a client that picks it waits a request timeout for
    an answer that never comes (lab: Spark's reconciliation failed under every frozen broker,
    `Timed out waiting for a node assignment. Call: listNodes`). The controller leaves a fenced
    broker out of the metadata, so after broker.session.timeout.ms these addresses lead only to
    brokers that answer. They are the brokers' advertised addresses for the listener the
    configured servers lead to, which every Kafka client connects to after its bootstrap anyway.

    `admin`: the run's client (made from the same servers and config), asked first; a fresh
    client asks again.
    """
    for attempt in range(2):  # librdkafka may have asked the frozen broker itself: a new client asks again
        try:
            asking = admin if admin is not None and attempt == 0 else admin_client(bootstrap_servers, config, timeout_s)
            metadata = asking.list_topics(topic, timeout=timeout_s)
            break
        except KafkaException:
            continue
    else:
        return bootstrap_servers  # the Spark read then fails or succeeds on its own
    addresses = []
    for _, broker in sorted(metadata.brokers.items()):
        host = broker.host or ""
        if host:  # an IPv6 address is bracketed, as the Java client reads it
            addresses.append(f"[{host}]:{broker.port}" if ":" in host else f"{host}:{broker.port}")
    return ",".join(addresses) or bootstrap_servers


def spark_source_options(
    bootstrap_servers: str, config: Mapping[str, Any], topic: str, admin: AdminClient | None = None
) -> dict[str, str]:
    """The Kafka source options of one Spark read of `topic`: the Java client's settings
    (kafka_options.java_kafka_options), bootstrapped from the brokers that answer now (asked
    first on `admin`, the run's client, where given)."""
    return java_kafka_options(live_bootstrap_servers(bootstrap_servers, config, topic, admin=admin), dict(config))


# ListOffsets answers while the partition's leadership moves: the client asked the old leader,
# or named an epoch the new one has passed (or not reached yet)
_LEADER_MOVED = frozenset(
    {
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        # a leader elected a moment ago whose high watermark has not caught up yet (KIP-207)
        KafkaError.OFFSET_NOT_AVAILABLE,
    }
)


# How long a partition whose leader does not answer (killed, frozen) is asked again: the
# controller fences a broker that stops heartbeating after broker.session.timeout.ms (9 s by
# default) and elects a new leader from the ISR, so a read that started right after the fault
# gets its answer within this instead of failing (measured in the lab: a diagnosis started
# right after a kill -9 of a leader called every item unknown with the 10-s deadline alone).
LEADER_FAILOVER_S = 30.0


def partition_offsets(
    admin: AdminClient,
    topic: str,
    partitions: list[int],
    timeout_s: float = 10.0,
    failover_s: float = LEADER_FAILOVER_S,
) -> dict[int, PartitionOffsets]:
    """Log start, last stable and high watermark offsets of each partition: each request
    within `timeout_s`, asked again for up to max(timeout_s, failover_s) while leaders move
    or do not answer."""
    if not partitions:
        return {}
    tps = [TopicPartition(topic, p) for p in partitions]

    deadline = time.monotonic() + max(timeout_s, failover_s)

    def refresh() -> None:
        # Right after a leader change the client's metadata still names the old leader or
        # epoch ("Leader epoch is older than broker epoch"): refresh it before asking again.
        try:
            admin.list_topics(topic, timeout=max(deadline - time.monotonic(), 1.0))
        except KafkaException:
            pass  # the next attempt says what is wrong

    def query(spec: OffsetSpec, isolation: IsolationLevel) -> dict[int, ListOffsetsResultInfo]:
        def ask() -> dict[int, ListOffsetsResultInfo]:
            futures = admin.list_offsets({tp: spec for tp in tps}, isolation_level=isolation, request_timeout=timeout_s)
            answers = {tp.partition: future.result() for tp, future in futures.items()}
            # A partition whose leader did not answer in time (frozen, not yet fenced) comes back
            # without an error but with offset -1001 (librdkafka 2.16): no offset at all, never
            # a log start or end. Asked again until the deadline, then a KafkaReadError.
            silent = sorted(p for p, info in answers.items() if info.offset < 0)
            if silent:
                raise KafkaException(
                    KafkaError(
                        KafkaError._TIMED_OUT,
                        f"no offset for partition(s) {silent} (their leader did not answer)",
                        retriable=True,
                    )
                )
            return answers

        return asking_again(ask, _LEADER_MOVED, deadline, f"listing offsets of topic {topic!r}", 0.2, refresh)

    # A client's first ListOffsets, asked before it holds the partitions' leaders, waits for
    # them in steps of a second: up to 3 s on a fresh client, which most callers make. On the
    # 3-broker dev stack, this function on 30 fresh clients took 13.4 s in all (up to 3.0 s
    # each) without this metadata request first, 1.25 s with it.
    refresh()
    low = query(OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED)
    # The high watermark before the last stable offset: a record appended between the two
    # reads then raises the stable offset to the high watermark or past it (clamped), and is
    # never taken for an open transaction holding the stable offset back. A transaction open
    # since before the high watermark's read still holds it below.
    high = query(OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED)
    stable = query(OffsetSpec.latest(), IsolationLevel.READ_COMMITTED)
    return {
        p: PartitionOffsets(
            p,
            low[p].offset,
            min(stable[p].offset, high[p].offset),
            high[p].offset,
            # The latest offsets' answers carry the epoch of the leader that gave them: the higher
            # of the two, so a leader that changed between them (a frozen one fenced while the
            # last read waited for it) is the one this reading reports.
            _highest_epoch(high[p], stable[p]),
        )
        for p in partitions
    }


def asking_again(
    ask: Callable[[], T],
    moved: frozenset[int],
    deadline: float,
    what: str,
    pause_s: float,
    before_again: Callable[[], None] | None = None,
) -> T:
    """ask(), asked again until `deadline` while Kafka answers with one of the `moved` codes
    or another retriable error (leadership or a coordinator moving); any other error, or one
    past the deadline, is a KafkaReadError naming `what`."""
    while True:
        try:
            return ask()
        except KafkaException as exc:
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            again = error is not None and (error.code() in moved or error.retriable())
            if not again or time.monotonic() > deadline:
                raise KafkaReadError(f"{what} failed: {exc}") from exc
        time.sleep(pause_s)
        if before_again is not None:
            before_again()


def _epoch(info: ListOffsetsResultInfo) -> int | None:
    epoch = info.leader_epoch
    return epoch if epoch is not None and epoch >= 0 else None


def _highest_epoch(*answers: ListOffsetsResultInfo) -> int | None:
    epochs = [e for e in map(_epoch, answers) if e is not None]
    return max(epochs) if epochs else None


def starts_passed(ranges: dict[int, tuple[int, int]], now: dict[int, PartitionOffsets]) -> dict[int, tuple[int, int]]:
    """Partitions whose log start (in ``now``, read after the read) moved past the start of the
    non-empty range [start, end) read from them: partition → (start, log start now). Records of
    the range may have been deleted (retention, delete_records) before the read reached them,
    and a reader that skips deleted records (the Kafka source with failOnDataLoss=false, a
    consumer resetting its offset) then saw less than the range without a word."""
    return {p: (start, now[p].low) for p, (start, end) in sorted(ranges.items()) if end > start and now[p].low > start}


def deleted_while_read(
    admin: AdminClient, topic: str, ranges: dict[int, tuple[int, int]], timeout_s: float = 10.0
) -> dict[int, tuple[int, int]]:
    """starts_passed() of the ranges read from `topic`, its log starts read now. Call it once
    the reads are done."""
    wanted = {p: r for p, r in ranges.items() if r[1] > r[0]}
    if not wanted:
        return {}
    return starts_passed(wanted, partition_offsets(admin, topic, sorted(wanted), timeout_s))


@dataclass(frozen=True)
class RecordPrint:
    """What identifies the record at one offset: a later read of the same offset holding
    another print (or nothing) means the log was truncated and rewritten there."""

    offset: int
    ts_ms: int
    crc: int  # CRC-32 of key and value

    def to_json(self) -> list[int]:
        return [self.offset, self.ts_ms, self.crc]

    @classmethod
    def from_json(cls, data: list[int]) -> RecordPrint:
        offset, ts_ms, crc = (int(v) for v in data)
        return cls(offset, ts_ms, crc)


# Consumer settings for reading one record per partition (pause each partition once it has
# answered): librdkafka would otherwise prefetch up to 100,000 records of each partition,
# and a partition answered first keeps delivering them while the others are awaited. With a
# record queued, it waits fetch.queue.backoff.ms (1 s by default) before fetching that
# partition again: a round whose partitions answer one fetch apart stalled for a second.
SINGLE_RECORD_FETCH: dict[str, str | int | bool] = {
    "queued.min.messages": 1,
    "fetch.message.max.bytes": 65536,
    "fetch.queue.backoff.ms": 10,
}


def single_record_reader_config(
    bootstrap_servers: str, config: Mapping[str, Any] | None, group_id: str, isolation: str, timeout_s: float
) -> dict[str, Any]:
    """A short-lived consumer that reads a few records by offset: the cluster's connection
    settings, no group membership or commit (assign() only), EOF reported per partition,
    one record fetched at a time."""
    return {
        **connection_settings(config),
        "bootstrap.servers": bootstrap_servers,
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": isolation,
        "enable.partition.eof": True,
        "socket.timeout.ms": int(timeout_s * 1000),
        **SINGLE_RECORD_FETCH,
    }


def record_prints(
    bootstrap_servers: str,
    config: dict[str, str] | None,
    topic: str,
    offsets: dict[int, int],
    timeout_s: float = 10.0,
) -> dict[int, RecordPrint | None]:
    """The print of the record at each (partition, offset); None where that offset holds no
    record any more (past the log end, or the next record has a higher offset).

    Read with read_uncommitted: the offset's record is wanted whatever became of its
    transaction. One short-lived consumer, no group, nothing committed.
    """
    if not offsets:
        return {}
    # an incremental run's new records behind each offset: 75,000 polled and dropped for 4
    # offsets at 10M before single-record fetching
    consumer = Consumer(
        single_record_reader_config(
            bootstrap_servers, config, f"_audit.reconcile-print-{os.getpid()}", "read_uncommitted", timeout_s
        )
    )
    found: dict[int, RecordPrint | None] = {}
    try:
        for partition, msg in first_messages(consumer, topic, offsets, timeout_s, "reading back offsets of").items():
            offset = msg.offset()
            if msg.error() is not None or offset != offsets[partition]:  # the log's end, or another record
                found[partition] = None
                continue
            assert offset is not None, "a record (not an error event) has one"
            found[partition] = RecordPrint(offset, msg.timestamp()[1], record_crc(msg.key(), msg.value()))
    finally:
        consumer.close()
    return found


def first_messages(
    consumer: Consumer, topic: str, starts: dict[int, int], timeout_s: float, reading: str
) -> dict[int, Message]:
    """Each partition of `starts` read from its offset there: its first message, a record or
    the end-of-partition event (the consumer must enable it), fetching no more of it.
    `reading` names what is read in the errors raised (any other error event, a timeout)."""
    consumer.assign([TopicPartition(topic, p, o) for p, o in starts.items()])
    found: dict[int, Message] = {}
    deadline = time.monotonic() + timeout_s * 3
    while len(found) < len(starts):
        if time.monotonic() > deadline:
            waiting = sorted(set(starts) - set(found))
            raise KafkaReadError(f"{reading} {topic} partition(s) {waiting} timed out")
        msg = consumer.poll(0.5)
        if msg is None or msg.partition() in found:
            continue
        partition = msg.partition()
        if partition is not None:  # its answer is the first message: fetch no more of it
            consumer.pause([TopicPartition(topic, partition)])
        err = msg.error()
        if err is not None and not (err.code() == KafkaError._PARTITION_EOF and partition is not None):
            raise KafkaReadError(f"{reading} {topic}/{partition} failed: {err}")
        assert partition is not None, "a record and the end-of-partition event both name their partition"
        found[partition] = msg
    return found


def epochs_led_before(
    admin: AdminClient,
    bootstrap_servers: str,
    config: dict[str, str] | None,
    topic: str,
    ends: Mapping[int, PartitionOffsets],
    before_ms: int,
    timeout_s: float = 10.0,
) -> set[int]:
    """The partitions of `ends` (partition_offsets' answer) whose current leader appended a
    record stamped before `before_ms`: it has led them since a moment after that record was
    sent (failover_hold.first_reading_change). A partition still led by the leader it was
    created with (epoch 0) or of unknown epoch is not asked.

    The record read is the last one stamped before `before_ms` (the one before the offset that
    time's look-up gives): its batch carries the epoch of the leader that appended it. One
    short-lived consumer, no group, nothing committed; a partition whose records all come after
    `before_ms`, an empty one, or one whose record there is a transaction's marker is not in the
    answer. Raises KafkaReadError where Kafka cannot be read."""
    wanted = {p: o for p, o in ends.items() if o.leader_epoch}
    if not wanted:
        return set()
    try:
        futures = admin.list_offsets(
            {TopicPartition(topic, p): OffsetSpec.for_timestamp(before_ms) for p in wanted}, request_timeout=timeout_s
        )
        after = {tp.partition: f.result(timeout=timeout_s + FUTURE_MARGIN_S).offset for tp, f in futures.items()}
    except (KafkaException, TimeoutError) as exc:
        raise KafkaReadError(f"looking up {topic}'s records stamped before {before_ms} failed: {exc!r}") from exc
    # no record stamped at or after the time (-1): the last record is the one before it
    starts = {p: (o if o >= 0 else wanted[p].high) - 1 for p, o in after.items()}
    starts = {p: o for p, o in starts.items() if o >= wanted[p].low}
    if not starts:
        return set()
    try:
        consumer = Consumer(
            single_record_reader_config(
                bootstrap_servers, config, f"_audit.reconcile-epochs-{os.getpid()}", "read_uncommitted", timeout_s
            )
        )
        try:
            found = first_messages(consumer, topic, starts, timeout_s, "dating the leaders of")
        finally:
            consumer.close()
    except KafkaException as exc:
        raise KafkaReadError(f"dating the leaders of {topic} failed: {exc}") from exc
    return {
        p
        for p, msg in found.items()
        if msg.error() is None
        and msg.offset() == starts[p]
        and msg.timestamp()[1] < before_ms
        and msg.leader_epoch() == wanted[p].leader_epoch
    }


def first_committed_records(
    bootstrap_servers: str,
    config: dict[str, str] | None,
    topic: str,
    tails: dict[int, tuple[int, int]],
    timeout_s: float = 10.0,
) -> dict[int, tuple[str, int]]:
    """Per partition's [start, end), what read_committed finds from `start` on: ("record",
    offset) for its first committed record below `end`, ("log-end", offset) where the log now
    ends before `end`. A partition that holds only transaction markers and aborted records
    there, up to `end` or past it, is left out. One short-lived consumer, no group."""
    if not tails:
        return {}
    consumer = Consumer(
        single_record_reader_config(
            bootstrap_servers, config, f"_audit.reconcile-tail-{os.getpid()}", "read_committed", timeout_s
        )
    )
    found: dict[int, tuple[str, int]] = {}
    try:
        starts = {p: start for p, (start, _) in tails.items()}
        for partition, msg in first_messages(consumer, topic, starts, timeout_s, "reading the end of").items():
            offset = msg.offset()
            assert offset is not None, "a record and the end-of-partition event both have one"
            if offset < tails[partition][1]:
                found[partition] = ("log-end" if msg.error() is not None else "record", offset)
    finally:
        consumer.close()
    return found


def record_crc(key: bytes | None, value: bytes | None) -> int:
    return zlib.crc32(value or b"", zlib.crc32(key or b""))


def rewritten_partitions(
    bootstrap_servers: str,
    config: dict[str, str] | None,
    topic: str,
    bounds: dict[int, tuple[int, int]],
    read_to: dict[int, int],
    checkpoints: dict[int, list[int]],
    run_id: str | None,
    compacted: bool = False,
) -> dict[int, str]:
    """Partitions whose records a run already read were truncated or replaced since, with why.

    An unclean leader election truncates the old leader's tail and new records take the same
    offsets; a re-created topic starts again at 0. Trusting "offsets below X were read" would
    then miss the lost records and take the new ones for unseen. Two signs, per partition
    (bounds: its current [log start, log end)): the log now ends before where the run stopped
    reading, or the last record the run read (its checkpoint) is no longer at its offset. An
    offset below the log start cannot be checked (retention deleted it, which is no rewrite).
    On a compacted topic a checkpoint with no record at its offset any more (the next record
    has a higher one) is no sign either: the log cleaner removes records from the middle of the
    log once a later record has the same key. Only another record at its offset, or a log
    that ends before it, is.
    """
    reasons: dict[int, str] = {}
    to_check: dict[int, RecordPrint] = {}
    for partition, (low, high) in sorted(bounds.items()):
        stopped = read_to.get(partition)
        if stopped is None:
            continue
        if high < stopped:
            reasons[partition] = (
                f"the log now ends at offset {high}, before offset {stopped} where run {run_id} stopped reading"
            )
            continue
        checkpoint = checkpoints.get(partition)
        if checkpoint is not None and checkpoint[0] >= low:
            to_check[partition] = RecordPrint.from_json(checkpoint)
    now = record_prints(bootstrap_servers, config, topic, {p: c.offset for p, c in to_check.items()})
    for partition, printed in to_check.items():
        found = now.get(partition)
        if found is None and compacted:
            continue
        if found != printed:
            what = "no record any more" if found is None else "another record"
            reasons[partition] = f"offset {printed.offset}, read by run {run_id}, now holds {what}"
    return reasons
