"""What `__consumer_offsets` still tells of a group's offsets: who committed, and what is gone.

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

And whether the group had a member when each commit was made (`CommitRecord.empty`): an
admin tool's commit (an operator's reset) is accepted only by a group without members, and so
is a consumer's outside the membership (assign()). The commit's leader epoch tells them apart
where the client sends one (KIP-320, OffsetCommitValue version 3 and up): a consumer committing
the position it read to sends the read record's, an admin tool none (`CommitRecord.by_operator`). A
classic group's membership is one record (key 2, GroupMetadataValue: its member count), of
which the log cleaner keeps the last. A consumer-protocol group's (KIP-848, key 3 for the
group and key 5, ConsumerGroupMemberMetadataKey: int16 5, group and member id as int16-length
strings) is one record per member, written when it joins and a tombstone when it leaves; the
cleaner drops a member's join record once a later record of the member follows, and the
tombstone itself `delete.retention.ms` after it was written. So every member a group had when a
commit was made still has a record in the log while the commit is younger than that: its join
(or a later update) before the commit, or, past it, its tombstone. A commit counts as made
without members only then, with no member's record read before it standing, and no member's
tombstone read after it whose join was not read (`_Membership`). A group with a classic
member among its records (an upgrade in progress: the broker rewrites such a member's record
at each rejoin) is never taken for empty, nor a classic group whose last metadata record is a
tombstone (deleted, or made a consumer-protocol group). A consumer-protocol member whose join
the cleaner removed for a later rewrite of its record (its subscription or client settings
changed), its tombstone not written yet, goes unseen.
"""

from __future__ import annotations

import re
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, cast

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from spark_jobs.kafka_cleanup import CLOCK_SLACK_MS, read_topic_cleanup
from spark_jobs.kafka_offsets import KafkaReadError, partition_offsets, topic_partitions
from spark_jobs.kafka_reads import read_ranges

OFFSETS_TOPIC = "__consumer_offsets"
_OFFSET_COMMIT_KEYS = (0, 1)
_GROUP_METADATA_KEY = 2  # a classic group's metadata (its members)
_CONSUMER_GROUP_KEY = 3  # a consumer-protocol (KIP-848) group's metadata (its epoch)
_CONSUMER_MEMBER_KEY = 5  # one member of a consumer-protocol group (a tombstone once it left)
_MEMBERSHIP_KEYS = (_GROUP_METADATA_KEY, _CONSUMER_GROUP_KEY, _CONSUMER_MEMBER_KEY)
# a consumer-protocol member's id: a Uuid its client made, 22 characters of base64 without
# padding (librdkafka's standard alphabet, the Java client's URL-safe one); a classic member's,
# given by the broker, is its client id, a dash and a dashed UUID
_CONSUMER_MEMBER_ID = re.compile(r"[A-Za-z0-9+/_-]{22}")
READ_BUDGET_S = 30.0  # at most this long reading the offsets partitions (or the diagnosis's timeout)
# An audited consumer's commits name its session in their metadata (docs/contracts.md).
COMMIT_METADATA_PREFIX = "audit:v2:"


@lru_cache(maxsize=65536)  # records of one diagnosis share their instants (and each partition's)
def ms_to_iso(ms: int | None) -> str | None:
    if ms is None or ms < 0:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def metadata_session(metadata: str | None) -> str | None:
    """The probed consumer session a commit's metadata names (its last `audit:v2:` line,
    docs/contracts.md), or None."""
    if not metadata or COMMIT_METADATA_PREFIX not in metadata:
        return None
    for line in reversed(metadata.split("\n")):
        if line.startswith(COMMIT_METADATA_PREFIX) and len(line) > len(COMMIT_METADATA_PREFIX):
            return line[len(COMMIT_METADATA_PREFIX) :]
    return None


_UNPARSED = object()


@dataclass(frozen=True)
class CommitRecord:
    """One record of a group's offset on a partition in `__consumer_offsets`: a commit, or the
    offset's removal (offset None, a tombstone)."""

    offset: int | None
    metadata: str | None  # the commit's metadata (None: empty); `audit:v2:<session>` names a probed consumer
    ts_ms: int
    # every record of its `__consumer_offsets` partition before it was read, none missing but
    # lone offsets (transaction markers): no commit of the key before it was cleaned away (the
    # first one read is the group's first; a lone cleaned commit reads as a marker)
    unbroken: bool = False
    # made while the group had no member (_Membership.empty: for a classic group, its last
    # metadata record before this one lists none; for a consumer-protocol group, every member
    # record before it is a tombstone, all read). Such a commit is an admin tool's (an operator's reset: kafka-consumer-groups
    # --reset-offsets, AdminClient.alter_consumer_group_offsets) or a consumer's outside the
    # group's membership (assign()), never a member's: a group with members refuses both.
    empty: bool = False
    # the leader epoch the commit carries (-1: none): a consumer committing the position it read
    # to (librdkafka's commit() of its position or of a message, its auto-commit; the Java
    # consumer's commitSync() of its position) sends the epoch of the record it read; an admin
    # tool's commit (kafka-consumer-groups --reset-offsets, alter_consumer_group_offsets) and an
    # explicit offset without one do not
    epoch: int = -1
    # metadata_session(metadata), parsed on first use and kept: the span walks ask it of every
    # commit several times, and a reader that never asks pays nothing
    _session: object = field(init=False, repr=False, compare=False, default=_UNPARSED)

    def session(self) -> str | None:
        """The probed consumer session this commit names in its metadata (docs/contracts.md), or None."""
        named = self._session
        if named is _UNPARSED:
            named = metadata_session(self.metadata)
            object.__setattr__(self, "_session", named)
        return cast(str | None, named)

    def by_operator(self) -> bool:
        """Made while the group had no member and without a read record's leader epoch: an
        operator's reset (an admin tool), or a consumer outside the group's membership (assign())
        committing an offset it set itself. A consumer that committed the position it read to
        carries the epoch of what it read (a plain consumer outside the membership, which may
        have processed what it passed)."""
        return self.empty and self.epoch < 0

    def by_plain_member(self) -> bool:
        """A commit naming no probed session, not an operator's (by_operator): a plain consumer
        of the group made it, which may have processed what it passed (a commit whose group's
        membership is not known counts as one too: the reading that alarms no one)."""
        return self.offset is not None and not self.session() and not self.by_operator()

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"offset": self.offset, "session": self.session(), "at": ms_to_iso(self.ts_ms)}
        if self.empty:
            data["group_had_no_member"] = True
        if self.epoch >= 0:
            data["leader_epoch"] = self.epoch
        return data


@dataclass(frozen=True)
class RemovedOffsets:
    """A group's committed offset on a partition, removed: the tombstone `__consumer_offsets`
    holds for it, and the last commit before it where the log cleaner has not taken it yet."""

    partition: int
    removed_ms: int  # the tombstone's timestamp: when the coordinator removed the offset
    last_offset: int | None = None  # the last commit before the removal (None: cleaned away)
    last_committed_ms: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "removed_at": ms_to_iso(self.removed_ms),
            "last_committed_offset": self.last_offset,
            "last_committed_at": ms_to_iso(self.last_committed_ms),
        }

    def describe(self) -> str:
        before = (
            "the commit before it is cleaned away"
            if self.last_offset is None
            else f"it had committed {self.last_offset} before ({ms_to_iso(self.last_committed_ms)})"
        )
        return (
            f"__consumer_offsets shows its offset there removed at {ms_to_iso(self.removed_ms)} (deleted by hand, or "
            f"expired), and {before}"
        )


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
    """(group, topic, partition) of an offset commit's key; None for any other record. The
    whole decode, kept as the reference `wanted_commit_key` is checked against (the history's
    read skips other groups' keys undecoded)."""
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


def _string_field(text: str) -> bytes:
    """`text` as a record key holds it: an int16 length, then its UTF-8 bytes."""
    data = text.encode("utf-8")
    return struct.pack(">h", len(data)) + data


def wanted_commit_key(key: bytes | None, groups: dict[bytes, str], topic_field: bytes) -> tuple[str, int] | None:
    """(group, partition) of an offset commit's key (its version already read) whose group
    field is among `groups` (_string_field of each) and whose topic field is `topic_field`;
    None for any other, found without decoding its strings (parse_offset_key's answer, for the
    wanted keys only)."""
    if key is None or len(key) < 4:
        return None
    end = 4 + max(int.from_bytes(key[2:4], "big", signed=True), 0)
    group = groups.get(key[2:end])
    if group is None or not key.startswith(topic_field, end):
        return None
    at = end + len(topic_field)
    if len(key) < at + 4:
        return None
    return group, int.from_bytes(key[at : at + 4], "big", signed=True)


def _key_version(key: bytes | None) -> int | None:
    """A record's key version (its kind: 0-1 offset commits, 2 classic group metadata, 3 and up
    the newer protocols' records); None for a key too short to hold one."""
    if key is None or len(key) < 2:
        return None
    return int(struct.unpack_from(">h", key, 0)[0])


def parse_group_key(key: bytes | None) -> str | None:
    """The group of a classic group's metadata record (key version 2); None for any other."""
    if key is None or len(key) < 4:
        return None
    try:
        (version,) = struct.unpack_from(">h", key, 0)
        return _string(key, 2)[0] if version == _GROUP_METADATA_KEY else None
    except struct.error:
        return None


def parse_member_key(key: bytes | None) -> tuple[str, str | None] | None:
    """(group, member id) of a consumer-protocol group's member record (key 5), (group, None) of
    its group record (key 3); None for any other record."""
    if key is None or len(key) < 4:
        return None
    try:
        (version,) = struct.unpack_from(">h", key, 0)
        if version == _CONSUMER_GROUP_KEY:
            return _string(key, 2)[0], None
        if version != _CONSUMER_MEMBER_KEY:
            return None
        group, at = _string(key, 2)
        (length,) = struct.unpack_from(">h", key, at)
        if length < 0 or at + 2 + length > len(key):
            return None
        return group, _string(key, at)[0]
    except struct.error:
        return None


@dataclass
class _Membership:
    """What the records read so far tell of one group's members."""

    classic: int | None = None  # the member count its last classic metadata record gives (None: none read)
    consumer: bool = False  # a consumer-protocol record of the group was read
    live: set[str] = field(default_factory=set)  # consumer-protocol members joined and not left
    # a member id not of the consumer protocol's form: a classic member of a consumer-protocol
    # group (an upgrade in progress), whose record the broker rewrites at each rejoin, so the
    # cleaner may have removed the one before a commit: such a group is never taken for empty
    mixed: bool = False

    def read(self, member: str | None, joined: bool) -> bool:
        """Take one consumer-protocol record (member None: the group's own). False where it is
        the tombstone of a member whose join record was not read: the membership before it
        was not known."""
        self.consumer = True
        if member is None:
            return True
        if not _CONSUMER_MEMBER_ID.fullmatch(member):
            self.mixed = True
        if joined:
            self.live.add(member)
            return True
        known = member in self.live
        self.live.discard(member)
        return known

    def empty(self, young: bool) -> bool:
        """The group had no member (the reading that alarms no one where it cannot be told).
        young: the commit is younger than `__consumer_offsets`' delete.retention.ms, so no
        consumer-protocol member of the group then has lost its every record since."""
        if self.consumer:
            return young and not self.mixed and not self.live and self.classic in (None, 0)
        return self.classic == 0


class _TombstonesKept:
    """How long `__consumer_offsets` keeps a tombstone (its delete.retention.ms, less the clock
    slack): a consumer-protocol group's commit younger than that shows every member it had.
    Read once, when first asked; unreadable, no commit is younger."""

    def __init__(self, admin: AdminClient, timeout_s: float) -> None:
        self._admin, self._timeout_s = admin, timeout_s
        self._kept_ms: int | None = None
        self._read = False

    def younger(self, age_ms: int) -> bool:
        if not self._read:
            self._read = True
            try:
                cleanup = read_topic_cleanup(self._admin, OFFSETS_TOPIC, self._timeout_s)
                self._kept_ms = cleanup.delete_retention_ms - CLOCK_SLACK_MS
            except KafkaReadError:  # not known: none is taken for an empty group's
                self._kept_ms = None
        return self._kept_ms is not None and age_ms < self._kept_ms


def parse_group_members(value: bytes | None) -> int | None:
    """How many members a classic group's metadata value lists (GroupMetadataValue versions 0 to
    4: protocol type, generation, protocol, leader, the state's time from version 2, then the
    members; compact strings and arrays from the flexible version 4); 0 for a tombstone (the
    group deleted); None for a value it cannot parse."""
    if value is None:
        return 0
    try:
        (version,) = struct.unpack_from(">h", value, 0)
        at = 2
        if version >= 4:
            length, at = _uvarint(value, at)  # protocol type: length + 1
            at += max(length - 1, 0) + 4  # and the generation
            for _ in range(2):  # protocol, leader: nullable, 0 for null
                length, at = _uvarint(value, at)
                at += max(length - 1, 0)
            count, at = _uvarint(value, at + 8)  # after the state's time: members + 1, 0 for null
            members = max(count - 1, 0)
        else:
            (length,) = struct.unpack_from(">h", value, at)
            at += 2 + length + 4
            for _ in range(2):
                (length,) = struct.unpack_from(">h", value, at)
                at += 2 + max(length, 0)
            at += 8 if version >= 2 else 0
            (members,) = struct.unpack_from(">i", value, at)
        return max(int(members), 0) if at <= len(value) else None
    except (struct.error, IndexError):
        return None


def parse_committed_offset(value: bytes | None) -> int | None:
    """The committed offset of an offset commit's value; None for a tombstone or a value too
    short to hold one."""
    if value is None or len(value) < 10:
        return None
    return int(struct.unpack_from(">q", value, 2)[0])


def parse_commit_epoch(value: bytes | None) -> int:
    """The leader epoch an offset commit's value carries (OffsetCommitValue version 3 and up,
    after the offset); -1 where it carries none, for a tombstone, or a value too short."""
    if value is None or len(value) < 14 or struct.unpack_from(">h", value, 0)[0] < 3:
        return -1
    return max(int(struct.unpack_from(">i", value, 10)[0]), -1)


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
    group_prefix: str = "auditor-read",
) -> tuple[dict[str, dict[int, RemovedOffsets]], dict[str, dict[int, list[CommitRecord]]]]:
    """Per group, the partitions of `topic` whose committed offset `__consumer_offsets` shows
    removed (its last record for the key is a tombstone), read one partition of the internal
    topic per distinct partition the groups hash to, read_committed (a transaction's offsets
    count once committed); and per group and partition the commits and removals
    `__consumer_offsets` still holds, in the order the coordinator wrote them (the log cleaner
    keeps at least the last per key). Raises KafkaReadError when it cannot be read."""
    count = len(topic_partitions(admin, OFFSETS_TOPIC, timeout_s))
    if count == 0:
        raise KafkaReadError(f"{OFFSETS_TOPIC} has no partitions")
    homes = {group: offsets_partition(group, count) for group in groups}
    offsets = partition_offsets(admin, OFFSETS_TOPIC, sorted(set(homes.values())), timeout_s)
    wanted = set(groups)
    # the groups and the topic as an offset commit's key holds them: its other records are
    # skipped without decoding their strings (a busy partition holds mostly other groups')
    wanted_fields = {_string_field(group): group for group in wanted}
    topic_field = _string_field(topic)
    # A busy cluster's offsets partition can hold millions of commits: the read is bounded,
    # and one that does not end in time is a read that failed (noted; the rule as before).
    budget_s = max(READ_BUDGET_S, timeout_s)
    deadline = time.monotonic() + budget_s
    last: dict[tuple[str, int], tuple[int | None, int]] = {}  # (group, partition) -> (offset or None, ts)
    commits: dict[tuple[str, int], tuple[int, int]] = {}  # the last commit seen before each key's last record
    history: dict[str, dict[int, list[CommitRecord]]] = {}
    # per group, its members as the records read so far show them (_Membership): for a classic
    # group the log cleaner keeps its last metadata record, and every later one, so the last
    # one read before a commit is the group's state when it was made; none read: not known
    members: dict[str, _Membership] = {}
    # commits read as made by an empty consumer-protocol group, and where a member's tombstone
    # came without its join record (its membership before that was not known)
    empty_commits: list[tuple[str, int, int, int]] = []  # group, partition, index in history, offset read at
    unknown_before: dict[str, int] = {}
    # per partition of the internal topic: the next offset where every record since its log
    # start was read, but for lone offsets (a transaction's marker takes one, and a read_committed
    # reader never sees it); None once a longer run was missing (the log cleaner took records,
    # or an aborted transaction's): a commit read before that is the key's first since the start
    unbroken: dict[int, int | None] = {p: o.low for p, o in offsets.items()}
    now_ms = int(time.time() * 1000)
    # asked only where a consumer-protocol group's commit is judged (classic groups need it not)
    tombstones_kept = _TombstonesKept(admin, timeout_s)
    try:
        for msg in read_ranges(  # KafkaReadError when the read fails
            bootstrap,
            config,
            OFFSETS_TOPIC,
            {p: (o.low, o.stable) for p, o in offsets.items()},
            isolation="read_committed",
            idle_timeout_s=max(timeout_s, 10.0),
            group_prefix=group_prefix,  # the reader's group id: assigned, it never commits
        ):
            if time.monotonic() > deadline:
                raise KafkaReadError(f"reading it took longer than {budget_s:.0f} s")
            at, home = msg.offset(), msg.partition() or 0  # a record has both
            expected = unbroken.get(home)
            whole = at is not None and expected is not None and expected <= at <= expected + 1
            unbroken[home] = at + 1 if whole and at is not None else None
            raw_key = msg.key()
            kind = _key_version(raw_key)  # read once: the parsers below each check their own
            if kind not in _OFFSET_COMMIT_KEYS and kind not in _MEMBERSHIP_KEYS:
                continue
            metadata_of = parse_group_key(raw_key) if kind == _GROUP_METADATA_KEY else None
            if metadata_of is not None:
                if metadata_of in wanted:
                    # a tombstone: the group deleted, or made a consumer-protocol group (whose
                    # records the cleaner may have taken since): its members are not known
                    value = msg.value()
                    members.setdefault(metadata_of, _Membership()).classic = (
                        None if value is None else parse_group_members(value)
                    )
                continue
            member_of = parse_member_key(raw_key) if kind in _MEMBERSHIP_KEYS else None
            if member_of is not None:
                if member_of[0] in wanted:
                    group_members = members.setdefault(member_of[0], _Membership())
                    if not group_members.read(member_of[1], msg.value() is not None):
                        unknown_before[member_of[0]] = at or 0
                continue
            parsed = wanted_commit_key(raw_key, wanted_fields, topic_field) if kind in _OFFSET_COMMIT_KEYS else None
            if parsed is None:
                continue
            key = parsed
            ts = msg.timestamp()[1]
            value = msg.value()
            committed = parse_committed_offset(value)
            if committed is not None:
                commits[key] = (committed, ts)
            last[key] = (committed, ts)
            # only the line naming a session is kept: an application's own metadata (up to 4 KB a
            # commit) would otherwise be held for every commit read
            state = members.get(parsed[0])
            empty = state is not None and state.empty(state.consumer and tombstones_kept.younger(now_ms - ts))
            commits_of = history.setdefault(parsed[0], {}).setdefault(parsed[1], [])
            if empty and state is not None and state.consumer:
                empty_commits.append((parsed[0], parsed[1], len(commits_of), at or 0))
            commits_of.append(
                CommitRecord(
                    committed, _session_line(parse_commit_metadata(value)), ts, whole, empty, parse_commit_epoch(value)
                )
            )
    except (KafkaReadError, KafkaException) as exc:  # a read that failed
        raise KafkaReadError(f"{OFFSETS_TOPIC} could not be read: {exc}") from exc
    for group, partition, index, at in empty_commits:
        # a member it did not know of may have been in the group
        if members[group].mixed or at < unknown_before.get(group, -1):
            commit = history[group][partition][index]
            history[group][partition][index] = replace(commit, empty=False)
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


def passing_commit(records: list[CommitRecord] | None, committed_now: int | None, offset: int) -> CommitRecord | None:
    """The commit that last took a group past `offset` on a partition, as `__consumer_offsets`
    still shows it (`records`: the group's commits and removals there, oldest first): the first
    commit above it after the last commit (or removal) at or below it; where none at or below it
    is left, the first known one when no record before it is missing from its
    `__consumer_offsets` partition (the group's first commit there: it passed the record) or
    when it is the group's commit now (`committed_now`: the log cleaner keeps the last commit
    per partition). None: the history does not tell (not read, cleaned away, or passed before
    the commits left)."""
    if not records:
        return None
    passed: CommitRecord | None = None
    below = False
    for record in records:
        if record.offset is None or record.offset <= offset:
            below, passed = True, None
        elif passed is None and below:
            passed = record
    if passed is not None:
        return passed
    first = records[0]
    if not below and first.offset is not None and (first.unbroken or first.offset == committed_now):
        return first
    return None


def names_sessions(commits: dict[int, list[CommitRecord]] | None) -> bool:
    """A commit of the group on the topic names a probed session: its probes write the commit
    metadata (docs/contracts.md), so a commit naming none is a plain consumer's."""
    return any(c.session() for records in (commits or {}).values() for c in records)


def plain_passed(records: list[CommitRecord] | None, committed_now: int | None) -> list[tuple[int, int]]:
    """The offsets [first, last] of a partition whose passing commit (passing_commit) is a plain
    member's (CommitRecord.by_plain_member), merged, lowest first: in O(len(records)), not per
    offset.

    The last record at or below an offset r is the last whose offset is at or below r (a
    removal counts as below every offset), and the commit past r the record right after it. So
    with m[i] the least offset of records i.. (a removal: minus infinity), the commit past r is
    record i+1 for m[i] <= r < m[i+1], and for r < m[0] the first record, if it is known to
    have passed r (passing_commit's condition)."""
    if not records:
        return []
    least = _least_offsets(records)
    spans: list[tuple[int, int]] = []

    def add(start: int, end: int) -> None:  # [start, end) of offsets >= 0
        start = max(start, 0)
        if end <= start:
            return
        if spans and spans[-1][1] + 1 >= start:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end - 1))
        else:
            spans.append((start, end - 1))

    if _first_known(records, committed_now) and records[0].by_plain_member():
        add(0, least[0])
    for i in range(len(records) - 1):
        if records[i + 1].by_plain_member():
            add(least[i], least[i + 1])
    return spans


def _first_known(records: list[CommitRecord], committed_now: int | None) -> bool:
    """The first record read is known to have passed every offset below it: it is the group's
    first commit there (none before it cleaned away), or its commit now (the cleaner keeps the
    last commit per key)."""
    return records[0].unbroken or records[0].offset == committed_now


def _least_offsets(records: list[CommitRecord]) -> list[int]:
    """m[i]: the least offset of records i.. (a removal: minus infinity), and m[len] = +infinity:
    the commit past an offset r is record i+1 for m[i] <= r < m[i+1] (plain_passed)."""
    unbounded = -(1 << 63)
    least = [0] * (len(records) + 1)
    least[-1] = 1 << 63
    for i in range(len(records) - 1, -1, -1):
        offset = records[i].offset
        least[i] = min(unbounded if offset is None else offset, least[i + 1])
    return least


def _session_spans(records: list[CommitRecord]) -> Iterator[tuple[int, int, int, str]]:
    """(index, first, last offset, session): the offsets each commit naming a probed session
    passed (passing_commit: record i passed [m[i-1], m[i]), _least_offsets), in order; empty
    spans left out. Where earlier commits were cleaned away, the first record's span starts at
    0 all the same: it may have passed any offset below it, and these spans only hold judgement
    back (reconcile_inputs.died_passed; the reader floors them at what earlier runs judged)."""
    least = _least_offsets(records)
    for i, record in enumerate(records):
        session = record.session()
        if session is None or record.offset is None:
            continue
        if i == 0:
            start = 0
        else:
            start = max(least[i - 1], 0)
        if least[i] > start:
            yield i, start, least[i] - 1, session


def last_passed(records: list[CommitRecord] | None) -> list[tuple[int, int, str]]:
    """The offsets [first, last] of a partition whose passing commit (passing_commit) is the last
    one a probed session made there, with that session, lowest first.

    A consumer that commits a record's offset before it processes it (at-most-once, auto-commit)
    marks what it processed after the commit; killed, it takes the marks it had not flushed yet
    with it, and the records its last commit passed may have been processed, unmarked (lab
    `live-consumer-crash-loop-at-most-once`: 5 false `unprocessed` of 6 kills). A later commit of
    the same session hands the earlier marks to the ledger first (a synchronous one waits for
    them), so only the last one leaves that doubt; and only when the session did not close (a
    consumer's close() writes its marks, then a `closed` session-end: the reader checks that)."""
    return [span[:3] for span in _probed_spans(records or [])[0]]


def session_passed(records: list[CommitRecord] | None) -> list[tuple[int, int, str]]:
    """The offsets [first, last] of a partition whose passing commit (passing_commit) is any one
    a probed session made there, with that session, lowest first; the spans of one session's
    consecutive commits merged (a consumer committing each record makes thousands).

    An asynchronous commit, like an auto-commit, does not wait for the marks the probe handed to
    its ledger producer before it: a session killed -9 may take the marks of several of its
    commits with it, not only its last's (lab `live-consumer-crash-loop-async`, stop 82: 5 false
    `unprocessed` passed by commits before a killed session's last). The probe's ledger writes a
    session's marks in order (one key, an idempotent producer), so what it lost is what it
    marked after the last mark read: the reader leaves unjudged what these spans hold above the
    session's highest mark (reconcile_inputs.died_passed)."""
    return [span[:3] for span in _probed_spans(records or [])[1]]


def _probed_spans(
    records: list[CommitRecord], bucket_ms: int | None = None
) -> tuple[list[tuple[int, int, str, int]], list[tuple[int, int, str, int]]]:
    """last_passed and session_passed of one partition's commits, from one walk of them, each
    span with the time of the latest commit in it (ms). `bucket_ms`: a session's consecutive
    commits merge only within one bucket of that many ms (commit time // bucket_ms), so a span's
    time stays within that of each commit's in it (a reader that judges a span by its commit
    time, reconcile_inputs.died_passed, judges a session that committed without pause for an
    hour by its older commits too); None: all merge."""
    last_of = {}
    for i, record in enumerate(records):
        session = record.session()
        if session is not None and record.offset is not None:
            last_of[session] = i
    last: list[tuple[int, int, str, int]] = []
    merged: list[tuple[int, int, str, int]] = []
    bucket = -1
    for i, first, end, session in _session_spans(records):
        ts = records[i].ts_ms
        if last_of[session] == i:
            last.append((first, end, session, ts))
        here = 0 if bucket_ms is None else ts // bucket_ms
        if merged and merged[-1][2] == session and merged[-1][1] + 1 == first and here == bucket:
            merged[-1] = (merged[-1][0], end, session, max(ts, merged[-1][3]))
        else:
            merged.append((first, end, session, ts))
        bucket = here
    return sorted(last), merged


# (group, partition, first, last offset, session, the latest time (ms) a commit of the session
# in it was made)
PassedSpan = tuple[str, int, int, int, str, int]
# (group, partition, session, the highest offset it marked there, the time (ms) of its latest mark
# record read: reconcile_state.StateMeta.session_marks)
SessionMark = tuple[str, int, str, int, int]


def probed_passed_spans(
    history: dict[str, dict[int, list[CommitRecord]]],
    judged_below: dict[tuple[str, int], int] | None = None,
    bucket_ms: int | None = None,
) -> tuple[list[PassedSpan], list[PassedSpan]]:
    """(group, partition, first, last offset, session, commit time) of last_passed, then of
    session_passed, for every group and partition of the history, from where earlier runs
    judged (plain_passed_spans' `judged_below`); one walk of each partition's commits
    (`bucket_ms`: _probed_spans)."""
    last: list[PassedSpan] = []
    sessions: list[PassedSpan] = []
    for group, commits in sorted(history.items()):
        for partition, records in sorted(commits.items()):
            floor = (judged_below or {}).get((group, partition), 0)
            for found, spans in zip(
                _probed_spans(records, bucket_ms),
                (last, sessions),
                strict=True,
            ):
                spans.extend(
                    (group, partition, max(first, floor), end, session, ts)
                    for first, end, session, ts in found
                    if end >= floor
                )
    return last, sessions


def plain_passed_spans(
    history: dict[str, dict[int, list[CommitRecord]]],
    committed: dict[tuple[str, int], int],
    named: set[str],
    judged_below: dict[tuple[str, int], int] | None = None,
) -> list[tuple[str, int, int, int]]:
    """(group, partition, first, last offset) where a commit naming no probed session took the
    group past the records, for the groups in `named`: those some of whose commits name one,
    in this history or as an earlier run saw (a group only partly probed: a plain instance of
    it, which may have processed them, committed past them). A group none of whose commits
    ever named a session (older probes, or none) has none: its marks alone speak for it.

    `judged_below` (group, partition) -> offset: below it an earlier run judged the records
    with the history it read then (the highest committed offset a run saw,
    group_commits.SeenCommits.offset); spans start there, so a history the log cleaner has
    thinned since (whose first commit left stands in for the ones it removed) never takes back
    what a run reported."""
    spans: list[tuple[str, int, int, int]] = []
    for group, commits in sorted(history.items()):
        if group not in named:
            continue
        for partition, records in sorted(commits.items()):
            floor = (judged_below or {}).get((group, partition), 0)
            for first, last in plain_passed(records, committed.get((group, partition))):
                if last >= floor:
                    spans.append((group, partition, max(first, floor), last))
    return spans
