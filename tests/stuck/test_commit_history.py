"""Who committed past a record: the commit metadata an audited consumer writes (docs/contracts.md,
"Commit metadata"), parsed from `__consumer_offsets` values, and the commit that took a group past
an offset (spark_jobs/commit_history.py, verdict_outcomes.passing_commit)."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from auditor.stuck.evidence import CommitRecord, GroupState
from auditor.stuck.verdict_outcomes import committed_by, passing_commit
from spark_jobs.commit_history import parse_commit_metadata, parse_committed_offset


def _value(version: int, offset: int, metadata: str | None) -> bytes:
    data = struct.pack(">hq", version, offset)
    if version >= 3:
        data += struct.pack(">i", 4)  # leader epoch
    raw = None if metadata is None else metadata.encode() + b"\x00"  # librdkafka sends the C terminator
    if version >= 4:
        data += bytes([0 if raw is None else len(raw) + 1])  # compact string: uvarint length + 1
    else:
        data += struct.pack(">h", -1 if raw is None else len(raw))
    data += raw or b""
    return data + struct.pack(">q", 1_700_000_000_000)


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_it_reads_the_metadata_of_each_offset_commit_value_version(version: int) -> None:
    value = _value(version, 42, "audit:v2:abc")
    assert parse_committed_offset(value) == 42
    assert parse_commit_metadata(value) == "audit:v2:abc"
    assert parse_commit_metadata(_value(version, 42, None)) is None
    assert parse_commit_metadata(_value(version, 42, "")) is None
    assert parse_commit_metadata(None) is None
    assert parse_commit_metadata(value[:11]) is None  # cut short


def test_a_commit_names_the_session_on_its_last_audit_line() -> None:
    assert CommitRecord(1, "audit:v2:s1", 0).session() == "s1"
    assert CommitRecord(1, "app-state\naudit:v2:s1", 0).session() == "s1"
    assert CommitRecord(1, "app-state", 0).session() is None
    assert CommitRecord(1, None, 0).session() is None


def _group(committed: int, *records: tuple[int | None, str | None]) -> GroupState:
    history = [CommitRecord(o, None if s is None else f"audit:v2:{s}", i) for i, (o, s) in enumerate(records)]
    return GroupState("g", committed={0: committed}, commits={0: history})


def test_the_commit_that_passed_a_record_is_the_first_above_it_after_the_last_at_or_below_it() -> None:
    group = _group(30, (5, "p"), (12, None), (3, "p"), (20, "q"), (30, "q"))
    assert passing_commit(group, 0, 10) == CommitRecord(20, "audit:v2:q", 3)
    # a removal (tombstone) puts the group below any record
    group = _group(30, (12, "p"), (None, None), (30, "q"))
    assert passing_commit(group, 0, 10) == CommitRecord(30, "audit:v2:q", 2)


def test_where_no_commit_at_or_below_it_is_left_only_the_group_s_commit_now_tells() -> None:
    assert passing_commit(_group(30, (30, "q")), 0, 10) == CommitRecord(30, "audit:v2:q", 0)
    assert passing_commit(_group(30, (20, "q"), (30, "q")), 0, 10) is None  # the crossing may have been cleaned away
    # nothing missing before the first: the group's first commit passed it
    group = GroupState("g", committed={0: 30}, commits={0: [CommitRecord(20, "audit:v2:p", 1, unbroken=True)]})
    assert passing_commit(group, 0, 10) == CommitRecord(20, "audit:v2:p", 1, unbroken=True)
    assert passing_commit(GroupState("g", committed={0: 30}), 0, 10) is None  # not read


def _passed_by(group: GroupState, info: dict[str, Any]) -> str | None:
    """committed_by for offset 10 of partition 0 of topic "t", with the commit that passed it."""
    return committed_by(group, "t", 0, 10, info, passing_commit(group, 0, 10))


def test_a_plain_commit_past_a_record_is_unknown_only_where_the_group_s_probes_name_their_commits() -> None:
    info: dict[str, Any] = {}
    # the other partition's probed commits show its probes write the metadata
    group = _group(30, (5, "p"), (20, None))
    assert group.commits is not None
    group.commits[1] = [CommitRecord(7, "audit:v2:p", 0)]
    reason = _passed_by(group, info)
    assert reason is not None and "names no probed consumer session" in reason
    assert info["passed_by_commit"] == {"offset": 20, "session": None, "at": "1970-01-01T00:00:00.001+00:00"}
    # no commit names a session: older probes, the rule as before
    info = {}
    assert _passed_by(_group(30, (5, None), (20, None)), info) is None
    assert "older probes" in info["committed_by"]
    # a probed session's commit passed it
    assert _passed_by(_group(30, (5, None), (20, "p")), {}) is None


def test_a_commit_of_an_empty_group_is_an_operators_only_without_a_read_records_epoch() -> None:
    def group(epoch: int) -> GroupState:
        # a probed commit at 5, then one at 20 naming no session, made while the group had no member
        history = [CommitRecord(5, "audit:v2:p", 0), CommitRecord(20, None, 1, empty=True, epoch=epoch)]
        return GroupState("g", committed={0: 20}, commits={0: history})

    info: dict[str, Any] = {}
    # no epoch: an admin tool's reset, or an offset set by hand: the marks alone judge
    assert _passed_by(group(-1), info) is None
    assert "nor a read record's leader epoch" in info["committed_by"]
    assert info["passed_by_commit"]["group_had_no_member"] and "leader_epoch" not in info["passed_by_commit"]
    # the epoch of a record read: a plain consumer outside the membership committed its position
    info = {}
    reason = _passed_by(group(4), info)
    assert reason is not None and "names no probed consumer session" in reason
    assert info["passed_by_commit"]["leader_epoch"] == 4 and "committed_by" not in info
