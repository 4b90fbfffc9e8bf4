"""What `__consumer_offsets` still tells of a group's offsets that are gone.

A group with no committed offset on a partition may never have read it, or may have had its
offsets removed: expired (`offsets.retention.minutes` after the group became empty, which
`verdict_outcomes.no_commit` bounds) or deleted by hand (`kafka-consumer-groups
--delete-offsets`, `--delete`, AdminClient.delete_consumer_group_offsets), which nothing
bounds. Either removal is written to the group's partition of `__consumer_offsets` as a
tombstone for the key (group, topic, partition), kept `delete.retention.ms` (a day by
default) after the log cleaner reaches it, and the commit it removed may still be there too.

The diagnosis reads that partition only for groups missing a committed offset on some
partition of the topic. A read it is refused (an auditor without Read on the internal
topic) or that fails leaves a note and the rule as before.

Record formats (Kafka's `OffsetCommitKey` and `OffsetCommitValue` message specs, group
coordinator): the key is int16 version (0 or 1: an offset commit; 2 and above: group
metadata and the new protocol's records), then group and topic as int16-length strings,
then the int32 partition; every value version (0 to 4) starts with its int16 version and the
int64 committed offset. A null value is the tombstone. The commit's metadata string follows
the offset (after the int32 leader epoch from version 3; a compact string, its length an
unsigned varint plus one, from the flexible version 4).

The same read gives each group's commits on the topic in order (`CommitRecord`s): an audited
consumer names its session in its commits' metadata (`audit:v2:<session>`, docs/contracts.md),
which tells a probed consumer's commit from a plain one's (verdict_outcomes.passing_commit).
"""

from __future__ import annotations

import struct
import time

from confluent_kafka.admin import AdminClient

from auditor.probes.wrapping import COMMIT_METADATA_PREFIX
from auditor.stuck.evidence import CommitRecord, RemovedOffsets, metadata_session
from spark_jobs.kafka_offsets import KafkaReadError, partition_offsets, topic_partitions

OFFSETS_TOPIC = "__consumer_offsets"
_OFFSET_COMMIT_KEYS = (0, 1)
READ_BUDGET_S = 30.0  # at most this long reading the offsets partitions (or the diagnosis's timeout)


def java_string_hash(text: str) -> int:
    """Java's String.hashCode of `text` (UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition(group: str, partitions: int) -> int:
    """The partition of `__consumer_offsets` holding `group`'s offsets: Kafka's
    Utils.abs(groupId.hashCode()) % partitions (Integer.MIN_VALUE's abs taken as 0)."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def _string(data: bytes, at: int) -> tuple[str, int]:
    (length,) = struct.unpack_from(">h", data, at)
    at += 2
    return data[at : at + length].decode("utf-8", "replace"), at + length


def parse_offset_key(key: bytes | None) -> tuple[str, str, int] | None:
    """(group, topic, partition) of an offset commit's key; None for any other record."""
    if key is None or len(key) < 2:
        return None
    try:
        (version,) = struct.unpack_from(">h", key, 0)
        if version not in _OFFSET_COMMIT_KEYS:
            return None
        group, at = _string(key, 2)
        topic, at = _string(key, at)
        (partition,) = struct.unpack_from(">i", key, at)
    except struct.error:
        return None
    return group, topic, partition


def parse_committed_offset(value: bytes | None) -> int | None:
    """The committed offset of an offset commit's value; None for a tombstone or a value too
    short to hold one."""
    if value is None or len(value) < 10:
        return None
    return int(struct.unpack_from(">q", value, 2)[0])


def _uvarint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def parse_commit_metadata(value: bytes | None) -> str | None:
    """The metadata string of an offset commit's value (OffsetCommitValue versions 0 to 4);
    None for a tombstone, an empty or null string, or a value it cannot parse."""
    if value is None or len(value) < 10:
        return None
    try:
        (version,) = struct.unpack_from(">h", value, 0)
        at = 10 + (4 if version >= 3 else 0)  # int16 version, int64 offset, int32 leader epoch (3+)
        if version >= 4:
            length, at = _uvarint(value, at)
            length -= 1  # compact string: length + 1, 0 for null
        else:
            (length,) = struct.unpack_from(">h", value, at)
            at += 2
        if length <= 0 or at + length > len(value):
            return None
        # librdkafka sends the string with its C terminator (the admin API strips it)
        return value[at : at + length].decode("utf-8", "replace").rstrip("\x00") or None
    except (struct.error, IndexError):
        return None


def offsets_history(
    admin: AdminClient,
    bootstrap: str,
    config: dict[str, str],
    groups: list[str],
    topic: str,
    timeout_s: float = 10.0,
) -> tuple[dict[str, dict[int, RemovedOffsets]], dict[str, dict[int, list[CommitRecord]]]]:
    """Per group, the partitions of `topic` whose committed offset `__consumer_offsets` shows
    removed (its last record for the key is a tombstone), read one partition of the internal
    topic per distinct partition the groups hash to, read_committed (a transaction's offsets
    count once committed); and per group and partition the commits and removals
    `__consumer_offsets` still holds, in the order the coordinator wrote them (the log cleaner
    keeps at least the last per key). Raises KafkaReadError when it cannot be read."""
    from auditor.stuck.locate_python import read_ranges  # it imports kafka_view, which imports this module

    count = len(topic_partitions(admin, OFFSETS_TOPIC, timeout_s))
    if count == 0:
        raise KafkaReadError(f"{OFFSETS_TOPIC} has no partitions")
    homes = {group: offsets_partition(group, count) for group in groups}
    offsets = partition_offsets(admin, OFFSETS_TOPIC, sorted(set(homes.values())), timeout_s)
    wanted = set(groups)
    # A busy cluster's offsets partition can hold millions of commits: the read is bounded,
    # and one that does not end in time is a read that failed (noted; the rule as before).
    budget_s = max(READ_BUDGET_S, timeout_s)
    deadline = time.monotonic() + budget_s
    last: dict[tuple[str, int], tuple[int | None, int]] = {}  # (group, partition) -> (offset or None, ts)
    commits: dict[tuple[str, int], tuple[int, int]] = {}  # the last commit seen before each key's last record
    history: dict[str, dict[int, list[CommitRecord]]] = {}
    # per partition of the internal topic: the next offset where every record since its log
    # start was read, but for lone offsets (a transaction's marker takes one, and a read_committed
    # reader never sees it); None once a longer run was missing (the log cleaner took records,
    # or an aborted transaction's): a commit read before that is the key's first since the start
    unbroken: dict[int, int | None] = {p: o.low for p, o in offsets.items()}
    try:
        for msg in read_ranges(
            bootstrap,
            config,
            OFFSETS_TOPIC,
            {p: (o.low, o.stable) for p, o in offsets.items()},
            isolation="read_committed",
            idle_timeout_s=max(timeout_s, 10.0),
        ):
            if time.monotonic() > deadline:
                raise KafkaReadError(f"reading it took longer than {budget_s:.0f} s")
            at, home = msg.offset(), msg.partition() or 0  # a record has both
            expected = unbroken.get(home)
            whole = at is not None and expected is not None and expected <= at <= expected + 1
            unbroken[home] = at + 1 if whole and at is not None else None
            parsed = parse_offset_key(msg.key())
            if parsed is None or parsed[0] not in wanted or parsed[1] != topic:
                continue
            key = (parsed[0], parsed[2])
            ts = msg.timestamp()[1]
            value = msg.value()
            committed = parse_committed_offset(value)
            if committed is not None:
                commits[key] = (committed, ts)
            last[key] = (committed, ts)
            # only the line naming a session is kept: an application's own metadata (up to 4 KB a
            # commit) would otherwise be held for every commit read
            history.setdefault(parsed[0], {}).setdefault(parsed[2], []).append(
                CommitRecord(committed, _session_line(parse_commit_metadata(value)), ts, whole)
            )
    except Exception as exc:  # KafkaReadError, LocateError, KafkaException: a read that failed
        raise KafkaReadError(f"{OFFSETS_TOPIC} could not be read: {exc}") from exc
    removed: dict[str, dict[int, RemovedOffsets]] = {}
    for (group, partition), (committed, ts) in last.items():
        if committed is None:
            before = commits.get((group, partition))
            removed.setdefault(group, {})[partition] = RemovedOffsets(
                partition, ts, before[0] if before else None, before[1] if before else None
            )
    return removed, history


def _session_line(metadata: str | None) -> str | None:
    """The `audit:v2:` line of a commit's metadata that CommitRecord.session reads, or None."""
    session = metadata_session(metadata)
    return None if session is None else COMMIT_METADATA_PREFIX + session
