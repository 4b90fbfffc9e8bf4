"""The offsets a plain consumer's commit took a group past (spark_jobs.commit_history.plain_passed),
checked offset by offset against the rule it derives from: the commit that passed each offset
(passing_commit, the stuck diagnosis's rule) names no probed session. Pure functions."""

from __future__ import annotations

import random
import struct
from itertools import pairwise

from spark_jobs.commit_history import (
    CommitRecord,
    _string_field,
    last_passed,
    parse_commit_epoch,
    parse_commit_metadata,
    parse_committed_offset,
    parse_group_key,
    parse_group_members,
    parse_member_key,
    parse_offset_key,
    passing_commit,
    plain_passed,
    plain_passed_spans,
    probed_passed_spans,
    session_passed,
    wanted_commit_key,
)
from spark_jobs.reconcile_inputs import died_passed, still_unjudged


def commit(
    offset: int | None,
    session: str | None = None,
    unbroken: bool = False,
    empty: bool = False,
    epoch: int = -1,
    ts: int = 0,
) -> CommitRecord:
    return CommitRecord(offset, None if session is None else f"audit:v2:{session}", ts, unbroken, empty, epoch)


def all_old(session: str) -> int:
    """judged_until for a run long after every commit: none is recent."""
    return 1 << 62


def random_history(rng: random.Random, sessions: list[str]) -> tuple[list[CommitRecord], int | None]:
    """One to eight commits (a tenth of them removals) by the sessions or a plain member, and
    the group's committed offset now (none, the last commit's, or any)."""
    records = []
    for _ in range(rng.randint(1, 8)):
        offset = None if rng.random() < 0.1 else rng.randint(0, 30)
        session = rng.choice([None, *sessions])
        records.append(commit(offset, session, unbroken=rng.random() < 0.5, empty=rng.random() < 0.2))
    return records, rng.choice([None, records[-1].offset, rng.randint(0, 30)])


def by_offset(records: list[CommitRecord], committed_now: int | None, top: int) -> set[int]:
    plain = set()
    for offset in range(top):
        passed = passing_commit(records, committed_now, offset)
        if passed is not None and passed.session() is None and not (passed.empty and passed.epoch < 0):
            plain.add(offset)
    return plain


def expand(spans: list[tuple[int, int]]) -> set[int]:
    return {offset for first, last in spans for offset in range(first, last + 1)}


def test_a_plain_instance_after_a_probed_one() -> None:
    # the probed session commits 3, a plain instance then commits 9
    records = [commit(3, "s1", unbroken=True), commit(9)]
    assert plain_passed(records, 9) == [(3, 8)]
    assert plain_passed_spans({"g": {0: records}}, {("g", 0): 9}, {"g"}) == [("g", 0, 3, 8)]


def test_a_group_whose_commits_never_named_a_session_has_no_spans() -> None:
    # older probes, or none: the marks alone speak for the group
    assert plain_passed_spans({"g": {0: [commit(3, unbroken=True), commit(9)]}}, {("g", 0): 9}, set()) == []


def test_a_group_an_earlier_run_saw_name_sessions_keeps_its_plain_spans_once_the_cleaner_took_them() -> None:
    # the probe rolled back: the cleaner left only the plain instances' last commit, 120; an
    # earlier run saw the group's probed commits and judged what lay below 100 (its commit then)
    cleaned = {"g": {0: [commit(120)]}}
    assert plain_passed_spans(cleaned, {("g", 0): 120}, {"g"}, {("g", 0): 100}) == [("g", 0, 100, 119)]
    # what an earlier run judged below 100 is never taken back by the thinned history
    assert plain_passed_spans(cleaned, {("g", 0): 120}, {"g"}, {("g", 0): 130}) == []


def test_a_commit_made_while_the_group_had_no_member_is_an_operators_not_a_plain_instances() -> None:
    # the probed session commits 10, the group empties, an operator resets it to 30, a probed
    # session commits on: the 20 jumped over are judged by the marks
    records = [commit(10, "s1", unbroken=True), commit(30, empty=True), commit(35, "s2")]
    assert plain_passed(records, 35) == []


def test_a_commit_of_an_empty_group_carrying_a_read_records_epoch_is_a_plain_consumers() -> None:
    # a consumer outside the membership (assign()) committed the position it read to: the epoch
    # of the record it read comes with it, which an admin tool's reset does not carry
    records = [commit(10, "s1", unbroken=True), commit(30, empty=True, epoch=0), commit(35, "s2")]
    assert plain_passed(records, 35) == [(10, 29)]
    assert not records[1].by_operator() and records[1].by_plain_member()
    assert records[1].as_json()["leader_epoch"] == 0 and records[1].as_json()["group_had_no_member"]
    # an offset the consumer set itself, without an epoch, reads as an operator's
    assert commit(30, empty=True).by_operator() and "leader_epoch" not in commit(30, empty=True).as_json()
    # a member's commit is a plain member's whatever it carries
    assert commit(30, epoch=3).by_plain_member() and not commit(30).by_operator()


def test_it_reads_the_leader_epoch_of_each_offset_commit_value_version() -> None:
    # OffsetCommitValue: int16 version, int64 offset, then from version 3 the int32 leader epoch
    v1 = struct.pack(">hqh", 1, 42, 0) + struct.pack(">qq", 1, -1)
    v3 = struct.pack(">hqih", 3, 42, 7, 0) + struct.pack(">q", 1)
    v4 = struct.pack(">hqi", 4, 42, 5) + bytes([1]) + struct.pack(">q", 1) + bytes([0])
    no_epoch = struct.pack(">hqih", 3, 42, -1, 0) + struct.pack(">q", 1)
    assert [parse_commit_epoch(v) for v in (v1, v3, v4, no_epoch, None, b"\x00\x03")] == [-1, 7, 5, -1, -1, -1]
    assert parse_committed_offset(v4) == 42 and parse_commit_metadata(v4) is None


def test_a_first_commit_the_cleaner_may_have_preceded_proves_nothing() -> None:
    # not the group's first commit there (records before it are missing), not its commit now
    assert plain_passed([commit(5), commit(9, "s1")], 9) == []
    # the group's commit now: the cleaner keeps the last commit per key, so it passed 0..4
    assert plain_passed([commit(5)], 5) == [(0, 4)]


def test_it_agrees_with_the_passing_commit_of_every_offset() -> None:
    rng = random.Random(73)
    for _ in range(3000):
        records, committed_now = random_history(rng, ["s1", "s2"])
        assert expand(plain_passed(records, committed_now)) == by_offset(records, committed_now, 40), records


def test_the_last_commit_of_each_session_in_a_crash_loop() -> None:
    # an at-most-once consumer commits each record before processing it: session s1 commits 1, 2
    # and 3 and is killed, s2 goes on with 5 and 6. What s1's last commit passed (offset 2) may
    # have been processed with its mark lost; what s1's earlier commits passed was marked before
    # its next commit; s2's last commit passed offset 5.
    records = [commit(1, "s1", unbroken=True), commit(2, "s1"), commit(3, "s1"), commit(5, "s2"), commit(6, "s2")]
    assert last_passed(records) == [(2, 2, "s1"), (5, 5, "s2")]
    assert probed_passed_spans({"g": {0: records}}, {("g", 0): 5})[0] == [("g", 0, 5, 5, "s2", 0)]
    # a plain instance's and an operator's commits are no session's
    assert last_passed([commit(3, "s1", unbroken=True), commit(9), commit(12, empty=True)]) == [(0, 2, "s1")]


def attributed(records: list[CommitRecord], committed_now: int | None, offset: int) -> CommitRecord | None:
    """passing_commit, or where it cannot tell because the commits before the first one read
    were cleaned away, that first one: it may have passed the offset (the spans hold back)."""
    passed = passing_commit(records, committed_now, offset)
    if passed is not None:
        return passed
    first = records[0] if records else None
    if first is not None and all(r.offset is not None and r.offset > offset for r in records):
        return first
    return None


def test_the_last_passed_offsets_agree_with_the_passing_commit_of_every_offset() -> None:
    rng = random.Random(76)
    for _ in range(3000):
        records, committed_now = random_history(rng, ["s1", "s2", "s3"])
        last: dict[str, CommitRecord] = {}
        for record in records:
            if record.session() is not None and record.offset is not None:
                last[record.session() or ""] = record
        want = {
            (offset, passed.session())
            for offset in range(40)
            if (passed := attributed(records, committed_now, offset)) is not None
            and passed.session() is not None
            and last.get(passed.session() or "") is passed
        }
        got = {(offset, session) for first, end, session in last_passed(records) for offset in range(first, end + 1)}
        assert got == want, records


def test_every_commit_of_a_session_in_an_asynchronous_crash_loop() -> None:
    # s1 commits each record asynchronously (1 to 4) and is killed; s2 goes on with 6 and 7.
    # Every offset a session's commit passed is that session's, consecutive commits merged.
    records = [commit(1, "s1", unbroken=True), commit(2, "s1"), commit(3, "s1"), commit(4, "s1"), commit(6, "s2")]
    records.append(commit(7, "s2"))
    assert session_passed(records) == [(0, 3, "s1"), (4, 6, "s2")]
    assert probed_passed_spans({"g": {0: records}}, {("g", 0): 2})[1] == [
        ("g", 0, 2, 3, "s1", 0),
        ("g", 0, 4, 6, "s2", 0),
    ]
    # a plain instance's commit in between splits a session's spans and is no session's
    records = [commit(2, "s1", unbroken=True), commit(5), commit(8, "s1")]
    assert session_passed(records) == [(0, 1, "s1"), (5, 7, "s1")]
    # the first commit read, earlier ones cleaned away: it may have passed any offset below it,
    # and the span only holds judgement back
    assert session_passed([commit(3, "s1"), commit(5, "s1")]) == [(0, 4, "s1")]


def test_the_session_passed_offsets_agree_with_the_passing_commit_of_every_offset() -> None:
    rng = random.Random(83)
    for _ in range(3000):
        records, committed_now = random_history(rng, ["s1", "s2", "s3"])
        want = {
            (offset, passed.session())
            for offset in range(40)
            if (passed := attributed(records, committed_now, offset)) is not None and passed.session() is not None
        }
        spans = session_passed(records)
        got = [(offset, session) for first, end, session in spans for offset in range(first, end + 1)]
        assert len(got) == len(set(got)) and set(got) == want, records
        # adjacent spans of one session are merged
        assert all(not (a[2] == b[2] and a[1] + 1 == b[0]) for a, b in pairwise(spans)), spans


def test_what_a_session_that_did_not_close_passed_is_unjudged_above_its_highest_mark() -> None:
    last = [("g", 0, 9, 9, "s1", 0), ("g", 0, 12, 12, "s2", 0)]
    passed = [("g", 0, 0, 9, "s1", 0), ("g", 0, 10, 12, "s2", 0), ("g", 1, 0, 4, "s1", 0)]
    # s1 marked up to 5 on partition 0 and nothing on partition 1; s2 closed
    highest = {("g", 0, "s1"): 5, ("g", 0, "s2"): 12}
    assert died_passed(last, passed, {"s2"}, highest, all_old) == [
        ("g", 0, 6, 9, "s1", 0),
        ("g", 0, 9, 9, "s1", 0),
        ("g", 1, 0, 4, "s1", 0),
    ]
    # a session that marked past everything it committed, its last commit's span included, leaves
    # nothing (its marks are written in order: a later one means the earlier ones were written)
    done = {("g", 0, "s1"): 9, ("g", 1, "s1"): 4, ("g", 0, "s2"): 12}
    assert died_passed(last, passed, set(), done, all_old) == []
    # what is left above the highest marks is what each last commit passed
    assert died_passed(last, passed, set(), {("g", 0, "s1"): 8, ("g", 1, "s1"): 4, ("g", 0, "s2"): 11}, all_old) == [
        ("g", 0, 9, 9, "s1", 0),
        ("g", 0, 12, 12, "s2", 0),
    ]


def test_a_span_committed_within_its_sessions_processing_bound_waits_whatever_it_marked_since() -> None:
    # s1 committed [0, 9] at 1,000 and [10, 14] at 5,000; its latest mark record read was made
    # at 6,000 and its bound is 2,000 (judged until 4,000): the older span is settled by its
    # marks, the recent one waits whole though s1 marked 14 (a worker pool marks in the order its
    # records finish, and a mark of a record it processed within the bound may come after 6,000)
    passed = [("g", 0, 0, 9, "s1", 1_000), ("g", 0, 10, 14, "s1", 5_000), ("g", 0, 15, 16, "s2", 5_000)]
    highest = {("g", 0, "s1"): 14, ("g", 0, "s2"): 16}
    bounds = {"s1": 2_000, "s2": 0}

    def judged_until(session: str) -> int:
        return 6_000 - bounds[session]

    assert died_passed([], passed, set(), highest, judged_until) == [("g", 0, 10, 14, "s1", 5_000)]
    # its close settles it whenever it was committed
    assert died_passed([], passed, {"s1"}, highest, judged_until) == []
    # a carried span waits the same way, then is settled once the bound has passed
    assert still_unjudged(passed[1:2], [], set(), highest, {"g"}, judged_until) == passed[1:2]
    assert still_unjudged(passed[1:2], [], set(), highest, {"g"}, lambda s: 7_000) == []


def test_a_sessions_commits_merge_only_within_a_bucket_of_commit_time() -> None:
    # s1 commits every offset from 1 to 8, 1,000 ms apart; in buckets of 5,000 ms the commits at
    # 1,000-4,000 merge into one span, those at 5,000-8,000 into another, each with its latest
    # time: a session that never pauses does not keep its older commits recent
    records = [commit(i, "s1", unbroken=i == 1, ts=i * 1_000) for i in range(1, 9)]
    _, sessions = probed_passed_spans({"g": {0: records}}, None, 5_000)
    assert sessions == [("g", 0, 0, 3, "s1", 4_000), ("g", 0, 4, 7, "s1", 8_000)]
    # without buckets every consecutive commit merges, the latest time kept
    assert probed_passed_spans({"g": {0: records}})[1] == [("g", 0, 0, 7, "s1", 8_000)]


def test_what_a_session_left_unjudged_waits_for_its_later_marks_or_its_close() -> None:
    earlier = [("g", 0, 6, 9, "s1", 0), ("g", 1, 0, 4, "s1", 0), ("g", 0, 20, 25, "s2", 0), ("h", 0, 3, 3, "s3", 0)]
    now = [("g", 0, 30, 31, "s4", 0)]
    # s1 marked up to 7 on partition 0 since (later marks settle the span below them) and
    # nothing on partition 1 (it may have died there: the span stays); s2 closed; h no longer named
    got = still_unjudged(earlier, now, {"s2"}, {("g", 0, "s1"): 7, ("g", 1, "s2"): 9}, {"g"}, all_old)
    assert got == [("g", 0, 8, 9, "s1", 0), ("g", 0, 30, 31, "s4", 0), ("g", 1, 0, 4, "s1", 0)]
    # a mark past the whole span settles it; another session's marks settle nothing
    assert still_unjudged(earlier[:1], [], set(), {("g", 0, "s1"): 9, ("g", 0, "s9"): 50}, {"g"}, all_old) == []
    assert still_unjudged(earlier[:1], [], set(), {("g", 0, "s9"): 50}, {"g"}, all_old) == earlier[:1]
    # a span this run found again is kept once
    assert still_unjudged(earlier[:1], earlier[:1], set(), {}, {"g"}, all_old) == earlier[:1]


def _s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def _cs(text: str | None) -> bytes:  # a compact (nullable) string: length + 1, 0 for null
    return bytes([0]) if text is None else bytes([len(text) + 1]) + text.encode()


def test_it_counts_the_members_of_each_group_metadata_value_version() -> None:
    """GroupMetadataValue as Kafka's schemas lay it out (kafka-group-coordinator's generated
    GroupMetadataValue, versions 0 to 4), built here field by field; a member's own fields
    follow the count and are not read."""
    member = b"\x00" * 12
    for version, members in ((0, 2), (1, 1), (2, 0), (3, 3)):
        value = struct.pack(">h", version) + _s("consumer") + struct.pack(">i", 7) + _s("range")
        value += struct.pack(">h", -1)  # no leader
        value += struct.pack(">q", 1_700_000_000_000) if version >= 2 else b""
        value += struct.pack(">i", members) + member * members
        assert parse_group_members(value) == members, version
    flexible = struct.pack(">h", 4) + _cs("consumer") + struct.pack(">i", 7) + _cs(None) + _cs(None)
    assert parse_group_members(flexible + struct.pack(">q", 0) + bytes([0 + 1]) + b"\x00") == 0
    assert parse_group_members(flexible + struct.pack(">q", 0) + bytes([2 + 1]) + member * 2) == 2
    assert parse_group_members(None) == 0  # the group deleted
    assert parse_group_members(b"\x00\x03\x00") is None  # cut short
    assert parse_group_key(struct.pack(">h", 2) + _s("billing")) == "billing"
    assert parse_group_key(struct.pack(">h", 1) + _s("billing") + _s("t") + struct.pack(">i", 0)) is None


def test_it_reads_the_group_and_member_of_a_consumer_protocol_groups_records() -> None:
    """Keys as the broker wrote them for a KIP-848 group (read back from __consumer_offsets:
    int16 5, the group, the member id; int16 3 and the group for the group's own record)."""
    member = struct.pack(">h", 5) + _s("billing") + _s("umx1hE3tST2BS3nPumXmRQ")
    assert parse_member_key(member) == ("billing", "umx1hE3tST2BS3nPumXmRQ")
    assert parse_member_key(struct.pack(">h", 3) + _s("billing")) == ("billing", None)
    assert parse_member_key(struct.pack(">h", 2) + _s("billing")) is None  # a classic group's
    assert parse_member_key(struct.pack(">h", 8) + _s("billing") + _s("m")) is None  # its assignment
    assert parse_member_key(struct.pack(">h", 5) + _s("billing") + b"\x00\x09ab") is None  # cut short
    assert parse_member_key(None) is None


def test_a_consumer_protocol_group_is_empty_only_while_its_members_records_must_still_be_there() -> None:
    """The membership of a KIP-848 group, record by record: a member joined and left; a
    commit older than __consumer_offsets' delete.retention.ms may predate a member whose every
    record is gone; a tombstone whose join was not read shows a member the read missed; a
    classic member in the group (its id the broker's, its record rewritten at each rejoin)
    leaves the membership unknown."""
    from spark_jobs.commit_history import _Membership

    m1, m2 = "umx1hE3tST2BS3nPumXmRQ", "K3iEbQ/FT9iLjTGmaaS7TQ"  # ids as a consumer-protocol client makes them
    group = _Membership()
    assert group.read(None, True) and group.read(m1, True)
    assert not group.empty(young=True)  # m1 is in the group
    assert group.read(m1, False)
    assert group.empty(young=True) and not group.empty(young=False)
    assert not group.read(m2, False)  # m2's join was not read: the membership before was not known
    upgrading = _Membership()
    upgrading.read("consumer-billing-1-0b7a3c36-5f55-4f2c-9a8e-4b8d3f0f2a11", True)
    upgrading.read("consumer-billing-1-0b7a3c36-5f55-4f2c-9a8e-4b8d3f0f2a11", False)
    assert not upgrading.empty(young=True)
    classic_then = _Membership(classic=2)
    assert not classic_then.empty(young=True)
    assert _Membership(classic=0).empty(young=False)  # a classic group's one record says it all
    assert not _Membership(classic=None).empty(young=True)  # a deleted (tombstoned) classic group's: not known


def test_the_wanted_commit_keys_are_the_ones_parse_offset_key_names() -> None:
    """wanted_commit_key skips other groups' keys without decoding them; for every key it agrees
    with parse_offset_key filtered by group and topic."""
    rng = random.Random(7)
    names = ["g", "g1", "gg", "", "é", "orders", "orders2"]
    wanted = {"g", "é", "orders"}
    fields = {_string_field(g): g for g in wanted}

    def key(version: int, group: str, topic: str, partition: int) -> bytes:
        return struct.pack(">h", version) + _string_field(group) + _string_field(topic) + struct.pack(">i", partition)

    keys = [
        key(rng.choice((0, 1)), rng.choice(names), rng.choice(names), rng.randrange(-2, 70000)) for _ in range(2000)
    ]
    keys += [k[: rng.randrange(len(k))] for k in keys[:300]]  # cut short
    keys += [struct.pack(">hh", 1, -1), b"", b"\x00\x01\x00"]
    for raw in keys:
        parsed = parse_offset_key(raw)
        expected = (parsed[0], parsed[2]) if parsed and parsed[0] in wanted and parsed[1] == "orders" else None
        assert wanted_commit_key(raw, fields, _string_field("orders")) == expected, raw
