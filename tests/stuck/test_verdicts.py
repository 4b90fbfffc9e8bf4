"""The verdict rules on inline evidence: the paths the demo pipeline cannot reach on one broker
(broker-side loss, acks=0), deletions after a skip, completeness of the topic and ledgers."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from auditor.stuck.evidence import (
    ClusterView,
    Diagnosis,
    GroupState,
    KeyMemory,
    KeySightings,
    LedgerEntry,
    LedgerView,
    LocatedRecord,
    MissingReport,
    PartitionState,
    ProcessedMark,
    Sighting,
    StuckRow,
    UntracedSession,
    ms_to_iso,
)
from auditor.stuck.verdicts import diagnose
from spark_jobs.group_commits import SeenCommits, Span
from spark_jobs.kafka_cleanup import TopicCleanup
from spark_jobs.mark_rules import MarkRule
from spark_jobs.send_outcome import producer_outcome_ms
from tests.support.verdict_view import NOW_MS, PROBED_SINCE_MS, ROW, view


def acked(offset: int, partition: int = 0) -> LedgerEntry:
    return LedgerEntry("TCK-7", "s1", 7, "acked", partition, offset, None, "persisted", NOW_MS - 3500_000)


def test_it_says_broker_lost_when_an_acked_offset_is_still_covered_but_the_key_is_gone() -> None:
    d = diagnose(ROW, [], [acked(4)], {}, view())
    assert d.verdict == "broker-lost" and "tickets/0@4" in d.reason
    assert (d.evidence["partition"], d.evidence["offset"]) == (0, 4)


def test_an_ack_past_the_high_watermark_the_diagnosis_read_is_unknown_until_the_log_end_proves_it_lost() -> None:
    # acked (or seen by a reconciliation run) after this diagnosis listed the offsets, or acked
    # by a leader whose high watermark had not reached it: newer than the view, not lost
    for offset, end_now, grown in ((10, None, ""), (15, None, ""), (15, 20, ", and the log has grown past it since")):
        d = diagnose(ROW, [], [acked(offset)], {}, view(high=10, high_after=None if end_now is None else {0: end_now}))
        assert d.verdict == "unknown", (offset, d.reason)
        assert d.reason == (
            f"acked at tickets/0@{offset}, at or past the high watermark 10 this diagnosis read{grown}: newer than "
            "its view of the topic, the next diagnosis will see it"
        )
    # the log end read after the memory is still below it: beyond the log end, truncated
    d = diagnose(ROW, [], [acked(15)], {}, view(high=10, high_after={0: 10}))
    assert d.verdict == "broker-lost" and "tickets/0@15" in d.reason


def test_a_young_ack_beyond_the_log_end_may_be_held_back_by_a_follower_still_in_sync() -> None:
    # acked alone by the leader (acks=1, or acks not known) 40 s before the log end was read
    # again: a follower that stopped fetching before it stays in sync for up to 1.5 x
    # replica.lag.time.max.ms (30 s), plus 60 s for the producer's clock, holding the high watermark
    read_ms = NOW_MS + 2_000
    young = replace(acked(15), ts_ms=read_ms - 40_000)
    cluster = view(high=10, high_after={0: 10}, read_done_ms=read_ms)
    d = diagnose(ROW, [], [young], {}, cluster)
    assert d.verdict == "unknown", d.reason
    assert "not known to ack with acks=all" in d.reason and "lost or still held back cannot be told" in d.reason
    assert d.evidence["held_watermark"]["replica_lag_time_max_ms"] == 30_000

    # once longer ago than that, the high watermark would have passed it: truncated
    old = replace(acked(15), ts_ms=read_ms - 45_000 - 60_000 - 1)
    assert diagnose(ROW, [], [old], {}, cluster).verdict == "broker-lost"
    # a longer lag bound on the brokers holds it longer
    assert diagnose(ROW, [], [old], {}, replace(cluster, replica_lag_max_ms=60_000)).verdict == "unknown"
    # an acks=all producer's ack came once the high watermark had passed it
    assert diagnose(ROW, [], [young], {}, replace(cluster, acks_all_sessions=frozenset({"s1"}))).verdict == (
        "broker-lost"
    )
    # as did a reconciliation run's sighting of it
    seen = KeyMemory(sightings={"TCK-7": KeySightings((Sighting(0, 15, read_ms - 40_000, "run-1"),))})
    assert diagnose(ROW, [], [], {}, cluster, seen).verdict == "broker-lost"
    # inside the log (the high watermark passed the offset) and gone: truncated, however young
    assert diagnose(ROW, [], [replace(young, offset=4)], {}, cluster).verdict == "broker-lost"


def test_an_ack_beyond_the_log_end_of_a_partition_under_min_insync_replicas_is_unknown_however_old() -> None:
    # With fewer in-sync replicas than min.insync.replicas the leader does not advance the high
    # watermark at all: an acks=1 record it acked alone stays beyond it for as long as that lasts.
    stall = "tickets/0 has 1 in-sync replica(s) of 2, fewer than its min.insync.replicas (2): ..."
    cluster = view(high=10, high_after={0: 10}, read_done_ms=NOW_MS, stalled={0: stall})
    d = diagnose(ROW, [], [acked(15)], {}, cluster)  # acked an hour ago
    assert d.verdict == "unknown" and stall in d.reason and "lost or still held back cannot be told" in d.reason
    assert d.evidence["stalled_watermark"] == stall
    # in-sync replicas not known: the partition may be under min.insync.replicas
    unread = replace(cluster, stalled={}, stalled_error="the in-sync replicas of tickets could not be read")
    d = diagnose(ROW, [], [acked(15)], {}, unread)
    assert d.verdict == "unknown" and "could not be read" in d.reason
    # An acks=all ack, or a run's sighting, came once the high watermark had passed the record
    # under the leader of then: a high watermark below it now means a new leader without it (one
    # that held it would hold it below its epoch's start, which Kafka's answer for the log end
    # waits for the high watermark to pass). Lost.
    acks_all = replace(cluster, acks_all_sessions=frozenset({"s1"}))
    assert diagnose(ROW, [], [acked(15)], {}, acks_all).verdict == "broker-lost"
    seen = KeyMemory(sightings={"TCK-7": KeySightings((Sighting(0, 15, NOW_MS - 3500_000, "run-1"),))})
    assert diagnose(ROW, [], [], {}, cluster, seen).verdict == "broker-lost"
    # another partition's stall says nothing of this one; inside the log it is lost all the same
    assert diagnose(ROW, [], [acked(15)], {}, replace(cluster, stalled={1: stall})).verdict == "broker-lost"
    assert diagnose(ROW, [], [acked(4)], {}, cluster).verdict == "broker-lost"


def test_it_says_unknown_for_a_delivery_without_an_offset() -> None:
    entry = LedgerEntry("TCK-7", "s1", 7, "acked", -1, -1, None, "persisted", NOW_MS)
    assert diagnose(ROW, [], [entry], {}, view()).verdict == "unknown"


def test_a_record_deleted_after_the_group_skipped_it_is_still_skipped() -> None:
    cluster = view(low=8, high=10, committed=10)
    cluster.groups["g"].max_mark_below_low = {0: 6}  # it processed offset 6 ...
    cluster.groups["g"].seen = _seen((0, 6))  # ... and a run saw it pass offset 4 while it existed
    d = diagnose(ROW, [], [acked(4)], {}, cluster)
    assert d.verdict == "skipped" and d.evidence["groups"][0]["processed_after_it"] == 6


def test_marks_past_a_deleted_record_alone_do_not_prove_it_skipped() -> None:
    # The group may have been down while the record was deleted and resumed at the log start,
    # past it: its marks of the later records (deleted since too) prove nothing of this one.
    cluster = view(low=8, high=10, committed=10)
    cluster.groups["g"].max_mark_below_low = {0: 6}
    d = diagnose(ROW, [], [acked(4)], {}, cluster)
    assert d.verdict == "unknown" and "skipped (committed before processing) and expired" in d.reason, d.reason
    assert d.evidence["groups"][0]["processed_after_it"] == 6


def test_a_processed_mark_wins_over_a_deletion() -> None:
    mark = ProcessedMark("g", 0, 4, "c1", NOW_MS - 3000_000)
    d = diagnose(ROW, [], [acked(4)], {("g", 0, 4): mark}, view(low=8, committed=10))
    assert d.verdict == "processed-not-updated"


def test_a_deleted_record_the_group_never_reached_is_expired_without_the_consumer_ledger() -> None:
    cluster = view(low=8, committed=2, consumer_ledger=LedgerView("cl", False, "topic cl does not exist"))
    assert diagnose(ROW, [], [acked(4)], {}, cluster).verdict == "expired"


def test_a_session_that_never_closed_bounds_the_ledgers_silence_by_its_declared_alive_ms() -> None:
    """A contract-v2 session killed between two ledger flushes leaves what it sent since the
    last one without a trace: a row whose record it may have sent (created before it can have
    stopped, give or take the clock margin) is unknown once the topic no longer holds it."""
    created_ms = NOW_MS - 3600_000
    cluster = view(low=5)
    # holds nothing that old; one leader since it was created
    cluster.partitions[0] = PartitionState(0, 5, 10, 10, NOW_MS - 60_000, leader_epoch=0)

    def verdict(*untraced: tuple[str, int, int | None]) -> tuple[str, str]:
        cluster.producer_ledger = LedgerView(
            "pl",
            True,
            entries_for_topic=3,
            covers_topic_from_ms=PROBED_SINCE_MS,
            untraced_sessions=[UntracedSession(*u, ledgers_sends=True) for u in untraced],
        )
        d = diagnose(ROW, [], [], {}, cluster)
        return d.verdict, d.reason

    assert verdict()[0] == "never-produced"
    # Silent since 5 min before the row was created, declaring a record at least every 31 s
    # while it runs: it stopped long before (31 s + the 60 s margin).
    assert verdict(("s-old", created_ms - 300_000, 31_000))[0] == "never-produced"
    # Silent since 30 s before: it may have sent the row's record before it was killed.
    got, reason = verdict(("s-old", created_ms - 300_000, 31_000), ("s-killed", created_ms - 30_000, 31_000))
    assert got == "unknown" and "producer session s-killed ledgered nothing after" in reason, reason
    # Silent since long before, declaring nothing (older probes): it may have run on for any time.
    got, reason = verdict(("s-old", created_ms - 300_000, None))
    assert got == "unknown" and "declares no heartbeat" in reason, reason
    # Its last ledger record is a clock margin younger than the topic's oldest record: what it
    # sent after it would still be there.
    assert verdict(("s-recent", NOW_MS, None))[0] == "never-produced"


def test_a_record_an_unclosed_session_may_have_sent_untraced_is_not_never_produced_where_it_can_be_gone() -> None:
    """An idle contract-v2 session (heartbeats only) sends the row's record with acks=1 just
    after its last heartbeat; the leader acks it and the process is killed before its next
    ledger flush; the leader then fails before a follower fetched the record (or the log
    cleaner removes it). Nothing ledgered the send, the topic holds everything produced since
    the row was created: a probed producer's ledger would hold the ack, but this one's cannot."""
    created_ms = NOW_MS - 3600_000
    heartbeat_ms = created_ms + 5_000  # the session's last ledger record, after the row was created
    killed = ("s-killed", heartbeat_ms, 31_000)
    long_gone = ("s-gone", created_ms - 300_000, 31_000)  # stopped long before the row was created
    failed_over = PartitionState(0, 0, 10, 10, leader_epoch=2, leader_since_ms=created_ms + 600_000)

    def verdict(state: PartitionState, *untraced: tuple[str, int, int | None], **extra: object) -> Diagnosis:
        ledger = LedgerView(
            "pl",
            True,
            entries_for_topic=10,
            covers_topic_from_ms=PROBED_SINCE_MS,
            untraced_sessions=[UntracedSession(*u, ledgers_sends=True) for u in untraced],
        )
        cluster = view(producer_ledger=ledger, **extra)
        cluster.partitions = {0: state}
        return diagnose(ROW, [], [], {}, cluster)

    # No session that can have sent it untraced: the ledger's silence stands, leader change or not.
    assert verdict(failed_over).verdict == "never-produced"
    assert verdict(failed_over, long_gone).verdict == "never-produced"
    # The killed session may have sent it after its last heartbeat, and the partition changed
    # leader since (the old code: never-produced, trusting the ledger).
    d = verdict(failed_over, long_gone, killed)
    assert d.verdict == "unknown", d.reason
    assert "producer session s-killed ledgered nothing after" in d.reason, d.reason
    assert "tickets/0 has changed leader (leader epoch 2) and may have done so after its last ledger record" in (
        d.reason
    ), d.reason
    assert d.evidence["untraced_producer_session"]["session"] == "s-killed"
    assert d.evidence["leader_change"]["leader_epoch"] == 2
    # a leader change before its last ledger record cannot have lost what it sent after it
    earlier = replace(failed_over, leader_since_ms=heartbeat_ms - 120_000)
    assert verdict(earlier, killed).verdict == "never-produced"
    # the leader epoch unknown: a change may have lost it
    d = verdict(PartitionState(0, 0, 10, 10), killed)
    assert d.verdict == "unknown" and "the leader epoch of tickets/0 could not be read" in d.reason, d.reason
    # One leader, but compacted with the binding's key in the value: a later record with the same
    # record key (another item's) lets the log cleaner remove it.
    one_leader = PartitionState(0, 0, 10, 10, leader_epoch=0)
    assert verdict(one_leader, killed, record_key="json:$.ticket_id").verdict == "never-produced"
    d = verdict(one_leader, killed, record_key="json:$.ticket_id", cleanup=COMPACTED)
    assert d.verdict == "unknown" and "compacted away" in d.reason and "s-killed" in d.reason, d.reason

    # Retention took the topic's records up to 5 min after the row was created; the session
    # heartbeat until 10 min after: what it sent after that is still there, unless the leader
    # changed since (the old code skipped the session on the topic's completeness alone).
    later = ("s-killed", created_ms + 600_000, 31_000)
    trimmed = PartitionState(0, 3, 10, 10, created_ms + 300_000, leader_epoch=2, leader_since_ms=created_ms + 1200_000)
    d = verdict(trimmed, later)
    assert d.verdict == "unknown" and "tickets/0 has changed leader" in d.reason, d.reason
    assert "s-killed" in d.reason and "still holds everything produced since then" in d.reason, d.reason
    assert verdict(replace(trimmed, leader_epoch=0), later).verdict == "never-produced"
    d = verdict(replace(trimmed, leader_epoch=0), later, record_key="json:$.ticket_id", cleanup=COMPACTED)
    assert d.verdict == "unknown" and "compacted away" in d.reason, d.reason
    # a session silent since before the topic's oldest record: what it sent may have been deleted
    d = verdict(replace(trimmed, leader_epoch=0), ("s-killed", created_ms + 200_000, 31_000))
    assert d.verdict == "unknown" and "no longer holds records that old" in d.reason, d.reason


def test_a_v1_session_that_never_closed_may_have_sent_the_rows_record_before_its_last_ledger_record() -> None:
    """A contract-v1 session ledgers delivery reports, not sends: killed between two ledger
    flushes, it leaves the reports served since the last one unledgered, whenever it sent their
    records (a report comes up to message.timeout.ms later, or later still when the application
    does not poll). Its last ledger record bounds when it stopped (alive_ms), not what it sent
    before: the topic must hold everything since the row was created."""
    created_ms = NOW_MS - 3600_000
    # Retention took the records up to 5 min after the row was created; one leader throughout.
    trimmed = PartitionState(0, 3, 10, 10, created_ms + 300_000, leader_epoch=0)
    complete_since = PartitionState(0, 0, 10, 10, leader_epoch=0)

    def verdict(state: PartitionState, *untraced: UntracedSession) -> Diagnosis:
        ledger = LedgerView(
            "pl", True, entries_for_topic=10, covers_topic_from_ms=PROBED_SINCE_MS, untraced_sessions=list(untraced)
        )
        cluster = view(producer_ledger=ledger)
        cluster.partitions = {0: state}
        return diagnose(ROW, [], [], {}, cluster)

    # Ledgered a report 10 min after the row was created, then killed: a contract-v2 session
    # would have ledgered the row's record by then, if it sent it before.
    assert verdict(trimmed, UntracedSession("s-v2", created_ms + 600_000, 31_000, True)).verdict == "never-produced"
    # A v1 session may have sent it 4 min after the row was created and had its report
    # after that flush (the old code left v1 sessions out: never-produced).
    d = verdict(trimmed, UntracedSession("s-v1", created_ms + 600_000, 31_000, False))
    assert d.verdict == "unknown", d.reason
    assert "producer session s-v1 ledgered nothing after" in d.reason, d.reason
    assert "the deliveries reported since its last ledger flush, whenever it sent them" in d.reason, d.reason
    assert d.evidence["untraced_producer_session"] == {
        "session": "s-v1",
        "last_ledger_record": ms_to_iso(created_ms + 600_000),
        "alive_ms": 31_000,
        "ledgers_sends": False,
    }
    # An older v1 probe declares no liveness: it may have run on for any time.
    d = verdict(trimmed, UntracedSession("s-v1", created_ms - 300_000, None, False))
    assert d.verdict == "unknown" and "declares no heartbeat" in d.reason, d.reason
    # It stopped (31 s + the 60 s margin) long before the row was created.
    assert verdict(trimmed, UntracedSession("s-v1", created_ms - 300_000, 31_000, False)).verdict == "never-produced"
    # The topic holds everything since the row was created, with one leader: what the session
    # sent for it is still there.
    assert verdict(complete_since, UntracedSession("s-v1", created_ms + 600_000, 31_000, False)).verdict == (
        "never-produced"
    )


def test_it_waits_for_an_open_transaction() -> None:
    record = LocatedRecord("TCK-7", 0, 9, NOW_MS, "open")
    d = diagnose(ROW, [record], [], {}, view(stable=8, high=10, committed=5))
    assert d.verdict == "waiting" and "last stable offset 8" in d.reason


def test_a_committed_copy_wins_over_an_aborted_one() -> None:
    records = [LocatedRecord("TCK-7", 0, 3, NOW_MS, "aborted"), LocatedRecord("TCK-7", 0, 6, NOW_MS, "committed")]
    assert diagnose(ROW, records, [], {}, view(committed=2)).verdict == "waiting"


def test_it_never_says_never_produced_when_the_topic_lost_records_that_old() -> None:
    # The oldest remaining record is younger than the row: its record may have been deleted.
    cluster = view(low=5, producer_ledger=LedgerView("pl", True, complete_since_ms=None, entries_for_topic=3))
    cluster.partitions[0] = PartitionState(0, 5, 10, 10, NOW_MS - 60_000)
    d = diagnose(ROW, [], [], {}, cluster)
    assert d.verdict == "unknown" and "no longer holds records that old" in d.reason

    # A producer ledger complete since before the row was created still proves it.
    cluster.producer_ledger = LedgerView(
        "pl", True, complete_since_ms=0, entries_for_topic=3, covers_topic_from_ms=PROBED_SINCE_MS
    )
    assert diagnose(ROW, [], [], {}, cluster).verdict == "never-produced"

    # Unless its producer was probed only after the row was created (the auditor adopted on a
    # running pipeline): the row may have been produced unprobed, and its record deleted since.
    cluster.producer_ledger.covers_topic_from_ms = NOW_MS - 3600_000 - 30_000  # 30 s before the row: the clock margin
    d = diagnose(ROW, [], [], {}, cluster)
    assert d.verdict == "unknown" and "no ledger evidence" in d.reason
    assert d.evidence["ledger_covers_topic_from"] is not None


def test_it_does_not_call_a_skip_when_the_group_is_not_probed() -> None:
    cluster = view(committed=9)
    cluster.groups["g"].marks_on_topic = 0
    d = diagnose(ROW, [LocatedRecord("TCK-7", 0, 4, NOW_MS, "committed")], [], {}, cluster)
    assert d.verdict == "unknown" and "not probed" in d.reason


def test_processed_by_any_group_beats_waiting_in_another() -> None:
    cluster = view(committed=9)
    cluster.groups["h"] = GroupState("h", committed={0: 1}, members=0)
    mark = ProcessedMark("g", 0, 4, "c1", NOW_MS)
    d = diagnose(ROW, [LocatedRecord("TCK-7", 0, 4, NOW_MS)], [], {("g", 0, 4): mark}, cluster)
    assert d.verdict == "processed-not-updated"
    assert [g["outcome"] for g in d.evidence["groups"]] == ["processed", "waiting"]


def unconfirmed(partition: int = 0, sent_ms: int = NOW_MS - 3500_000, status: str = "unconfirmed") -> LedgerEntry:
    return LedgerEntry("TCK-7", "s1", 7, status, partition, -1, None, "possibly", sent_ms)


def test_an_absent_acks_0_send_is_a_failed_produce_never_broker_lost() -> None:
    d = diagnose(ROW, [], [unconfirmed()], {}, view())
    assert d.verdict == "produce-failed"
    assert "acks=0" in d.reason and "tickets/0" in d.reason and "never confirmed" in d.reason


def test_an_ack_without_an_offset_from_older_probes_is_read_as_unconfirmed() -> None:
    legacy = LedgerEntry("TCK-7", "s1", 7, "acked", 0, -1001, None, "persisted", NOW_MS - 3500_000)
    assert diagnose(ROW, [], [legacy], {}, view()).verdict == "produce-failed"


def test_an_unconfirmed_send_older_than_the_log_is_unknown() -> None:
    # The log starts at offset 8 with a record from two hours ago; the send was 3 hours ago.
    d = diagnose(ROW, [], [unconfirmed(sent_ms=NOW_MS - 3 * 3600_000)], {}, view(low=8))
    assert d.verdict == "unknown" and "retention" in d.reason


def test_an_acked_entry_still_wins_over_an_unconfirmed_one() -> None:
    assert diagnose(ROW, [], [unconfirmed(), acked(4)], {}, view()).verdict == "broker-lost"


# --- contract v2: acks in sequence ranges, the key from a `keys` record, no position ---------


def acked_range(from_ms: int, to_ms: int, status: str = "acked-range") -> LedgerEntry:
    return LedgerEntry("TCK-7", "s2", 7, status, -1, -1, None, None, from_ms, to_ms)


def test_a_v2_ack_missing_from_a_topic_that_holds_everything_since_is_broker_lost() -> None:
    d = diagnose(ROW, [], [acked_range(NOW_MS - 3500_000, NOW_MS - 3499_000)], {}, view())
    assert d.verdict == "broker-lost"
    assert "sequence 7 of producer session s2" in d.reason


def test_a_young_v2_ack_not_in_the_topic_may_be_held_back_beyond_any_partitions_high_watermark() -> None:
    # An acked range names no partition: a leader that acked the record alone (acks=1) may
    # still hold it beyond the high watermark of whichever partition it went to.
    read_ms = NOW_MS + 2_000
    cluster = view(read_done_ms=read_ms)
    young = acked_range(read_ms - 41_000, read_ms - 40_000)
    d = diagnose(ROW, [], [young], {}, cluster)
    assert d.verdict == "unknown", d.reason
    assert "not known to ack with acks=all" in d.reason and "lost or still held back cannot be told" in d.reason
    assert d.evidence["held_watermark"]["acked_at"] is not None
    # the span is counted from the end of the window it was produced in
    old = acked_range(read_ms - 200_000, read_ms - 45_000 - 60_000 - 1)
    assert diagnose(ROW, [], [old], {}, cluster).verdict == "broker-lost"
    # an acks=all producer's ack came once the high watermark had passed it
    assert diagnose(ROW, [], [young], {}, replace(cluster, acks_all_sessions=frozenset({"s2"}))).verdict == (
        "broker-lost"
    )
    # any partition under min.insync.replicas (or in-sync replicas unread) may hold it, however old
    stall = "tickets/1 has 1 in-sync replica(s) of 2, fewer than its min.insync.replicas (2): ..."
    d = diagnose(ROW, [], [old], {}, replace(cluster, stalled={1: stall}))
    assert d.verdict == "unknown" and stall in d.reason and "which partition" in d.reason, d.reason
    unread = replace(cluster, stalled_error="the in-sync replicas of tickets could not be read")
    assert diagnose(ROW, [], [old], {}, unread).verdict == "unknown"
    # a partition emptied up to its high watermark is no proof it was deleted: the record may lie beyond it
    emptied = view(low=10, high=10, read_done_ms=read_ms)
    emptied.partitions[0] = PartitionState(0, 10, 10, 10, None)
    d = diagnose(ROW, [], [young], {}, emptied)
    assert d.verdict == "unknown" and "lost or still held back cannot be told" in d.reason, d.reason


def test_a_v2_send_acked_long_after_it_was_produced_is_held_from_when_its_ack_was_ledgered() -> None:
    # Produced 200 s before the log end was read (to_ms), but librdkafka kept it (linger, or
    # retries through a leader failover) and the broker acked it only 40 s before the read: its
    # ledger record saying so was written then. A follower may hold it back from that write.
    read_ms = NOW_MS + 2_000
    cluster = view(read_done_ms=read_ms)
    late = replace(acked_range(read_ms - 201_000, read_ms - 200_000), acked_by_ms=read_ms - 40_000)
    d = diagnose(ROW, [], [late], {}, cluster)
    assert d.verdict == "unknown", d.reason  # the old code: broker-lost, from the 200 s old to_ms
    assert "lost or still held back cannot be told" in d.reason
    assert d.evidence["held_watermark"]["acked_at"] == ms_to_iso(read_ms - 40_000)
    # ledgered longer ago than the span: truncated
    ledgered_long_ago = replace(late, acked_by_ms=read_ms - 45_000 - 60_000 - 1)
    assert diagnose(ROW, [], [ledgered_long_ago], {}, cluster).verdict == "broker-lost"


def test_a_v2_ack_older_than_every_partition_the_group_never_reached_is_expired() -> None:
    # Produced 3500 s ago; every record that old is gone (the oldest left was written 60 s
    # ago); the group resumed past the log start, and the last record it marked of the deleted
    # part was processed an hour before this one was produced.
    cluster = view(low=8, high=10, committed=10)
    cluster.partitions[0] = PartitionState(0, 8, 10, 10, NOW_MS - 60_000)
    cluster.groups["g"].last_mark_below_low_ms = NOW_MS - 7200_000
    d = diagnose(ROW, [], [acked_range(NOW_MS - 3500_000, NOW_MS - 3499_000)], {}, cluster)
    assert d.verdict == "expired", d.reason


def test_a_v2_ack_deleted_after_the_group_processed_records_near_it_is_unknown() -> None:
    cluster = view(low=8, high=10, committed=10)
    cluster.partitions[0] = PartitionState(0, 8, 10, 10, NOW_MS - 60_000)
    cluster.groups["g"].last_mark_below_low_ms = NOW_MS - 1000_000  # after the record was produced
    d = diagnose(ROW, [], [acked_range(NOW_MS - 3500_000, NOW_MS - 3499_000)], {}, cluster)
    assert d.verdict == "unknown" and "processed records of the deleted part after it was produced" in d.reason


def test_a_v2_ack_deleted_is_unknown_when_the_group_is_not_probed() -> None:
    cluster = view(low=8, high=10, committed=10)
    cluster.partitions[0] = PartitionState(0, 8, 10, 10, NOW_MS - 60_000)
    cluster.groups["g"].marks_on_topic = 0
    d = diagnose(ROW, [], [acked_range(NOW_MS - 3500_000, NOW_MS - 3499_000)], {}, cluster)
    assert d.verdict == "unknown" and "not probed" in d.reason


def test_a_v2_ack_is_unknown_when_only_some_partitions_lost_records_that_old() -> None:
    cluster = view()
    cluster.partitions[1] = PartitionState(1, 8, 10, 10, NOW_MS - 60_000)
    d = diagnose(ROW, [], [acked_range(NOW_MS - 3500_000, NOW_MS - 3499_000)], {}, cluster)
    assert d.verdict == "unknown" and "cannot be told apart" in d.reason


def test_a_v2_send_never_confirmed_is_a_failed_produce_only_while_the_topic_holds_everything() -> None:
    entry = acked_range(NOW_MS - 3500_000, NOW_MS - 3499_000, status="sent")
    assert diagnose(ROW, [], [entry], {}, view()).verdict == "produce-failed"
    cluster = view()
    cluster.partitions[0] = PartitionState(0, 8, 10, 10, NOW_MS - 60_000)
    assert diagnose(ROW, [], [entry], {}, cluster).verdict == "unknown"


def test_a_v2_send_never_confirmed_may_still_be_in_flight_for_a_message_timeout() -> None:
    # Sent a minute ago and not confirmed yet (a leader failover's retries): it may still land.
    recent = acked_range(NOW_MS - 61_000, NOW_MS - 60_000, status="sent")
    d = diagnose(ROW, [], [recent], {}, view())
    assert d.verdict == "unknown" and "may still be written" in d.reason
    # Six and a half minutes ago: past librdkafka's default message and socket timeouts.
    old = acked_range(NOW_MS - 391_000, NOW_MS - 390_000, status="sent")
    assert diagnose(ROW, [], [old], {}, view()).verdict == "produce-failed"
    # Version 1's acks=0 entries name their partition; the same holds for them.
    d = diagnose(ROW, [], [unconfirmed(sent_ms=NOW_MS - 60_000)], {}, view())
    assert d.verdict == "unknown" and "may still be written" in d.reason
    assert diagnose(ROW, [], [unconfirmed(sent_ms=NOW_MS - 390_000)], {}, view()).verdict == "produce-failed"


def test_a_producer_that_retries_longer_keeps_its_sends_in_flight_longer() -> None:
    """The cluster's probed producers reported message.timeout.ms=900000 (15 min): a send
    six and a half minutes old may still land; twenty minutes old it is judged. With
    message.timeout.ms=0 (retries without limit) none ever is."""
    patient = view()
    patient.send_outcome_ms = producer_outcome_ms({"message.timeout.ms": "900000"})
    for entry in (
        acked_range(NOW_MS - 391_000, NOW_MS - 390_000, status="sent"),
        unconfirmed(sent_ms=NOW_MS - 390_000),
    ):
        d = diagnose(ROW, [], [entry], {}, patient)
        assert d.verdict == "unknown" and "may still be written" in d.reason and "965 s" in d.reason
    old = acked_range(NOW_MS - 1_201_000, NOW_MS - 1_200_000, status="sent")
    assert diagnose(ROW, [], [old], {}, patient).verdict == "produce-failed"
    forever = view()
    forever.send_outcome_ms = producer_outcome_ms({"message.timeout.ms": "0"})
    d = diagnose(ROW, [], [acked_range(NOW_MS - 3500_000, NOW_MS - 3499_000, status="sent")], {}, forever)
    assert d.verdict == "unknown" and "without a time limit" in d.reason


def test_a_v2_failure_report_for_the_key_wins_over_its_unconfirmed_range() -> None:
    failed = LedgerEntry("TCK-7", "s2", 7, "failed", 0, -1, "Message timed out", "not", NOW_MS - 3500_000)
    sent = acked_range(NOW_MS - 3500_000, NOW_MS - 3499_000, status="sent")
    d = diagnose(ROW, [], [sent, failed], {}, view(low=8))
    assert d.verdict == "produce-failed" and "Message timed out" in d.reason


def test_a_v2_ack_is_deleted_where_each_partition_starts_at_a_later_sequence_of_its_session() -> None:
    # The oldest record left is as recent as the ack's window (clocks cannot tell), but it is a
    # later sequence of the same producer session: the acked record lay below it.
    cluster = view(low=8, high=10, committed=10)
    cluster.partitions[0] = PartitionState(0, 8, 10, 10, NOW_MS - 3499_000, ("s2", 9))
    cluster.groups["g"].last_mark_below_low_ms = NOW_MS - 7200_000
    entry = acked_range(NOW_MS - 3500_000, NOW_MS - 3499_000)
    assert diagnose(ROW, [], [entry], {}, cluster).verdict == "expired"
    cluster.partitions[0] = PartitionState(0, 8, 10, 10, NOW_MS - 3499_000, ("other-session", 9))
    assert diagnose(ROW, [], [entry], {}, cluster).verdict == "unknown"


def test_waiting_says_when_an_active_group_never_committed_where_the_record_is() -> None:
    located = [LocatedRecord("TCK-7", 0, 4, NOW_MS, "committed")]
    cluster = view()  # the group has no committed offset on partition 0
    cluster.groups["g"].assigned = frozenset({0})  # and its member reads partition 0
    d = diagnose(ROW, located, [], {}, cluster)
    assert d.verdict == "waiting"
    assert (
        "no committed offset" in d.reason and "with auto.offset.reset=latest they started past this record" in d.reason
    )
    # where it committed, or where its members do not read, the position is known or not its members'
    for committed, assigned in ((2, frozenset({0})), (None, frozenset({1})), (None, None)):
        cluster = view(committed=committed)
        cluster.groups["g"].assigned = assigned
        reason = diagnose(ROW, located, [], {}, cluster).reason
        assert "auto.offset.reset" not in reason, (committed, assigned, reason)


def test_a_lag_whose_oldest_record_has_no_known_time_is_unknown_not_zero() -> None:
    located = [LocatedRecord("TCK-7", 0, 4, NOW_MS, "committed")]
    cluster = view()  # no committed offset; the log start's record time was not read
    d = diagnose(ROW, located, [], {}, cluster)
    assert d.verdict == "waiting"
    assert "partition lag 10 record(s) / ? s" in d.reason
    [group] = d.evidence["groups"]
    assert (group["lag_records"], group["lag_seconds"]) == (10, None)
    dated = view(low=2)  # the log start's record is two hours old: that is the lag in time
    [group] = diagnose(ROW, located, [], {}, dated).evidence["groups"]
    assert (group["lag_records"], group["lag_seconds"]) == (8, 7200.0)


def _reported_missing(state: PartitionState) -> str:
    """The verdict on a row a run reported missing, with no ledger, for one partition state."""
    cluster = view(producer_ledger=None, consumer_ledger=None)
    cluster.partitions = {0: state}
    memory = KeyMemory(missing={"TCK-7": MissingReport("run-1", NOW_MS - 600_000, {0: 10})})
    d = diagnose(ROW, [], [], {}, cluster, memory)
    return f"{d.verdict}: {d.reason}"


def test_a_run_s_missing_report_is_never_produced_only_if_no_leader_can_have_changed_since_the_row() -> None:
    # the row was created an hour ago; a partition whose leader changed may have lost its record
    # (acked by the leader alone, acks=1) without a trace
    kept = PartitionState(0, 0, 10, 10, leader_epoch=0)
    before = PartitionState(0, 0, 10, 10, leader_epoch=3, leader_since_ms=NOW_MS - 7200_000)
    just_before = PartitionState(0, 0, 10, 10, leader_epoch=3, leader_since_ms=NOW_MS - 3630_000)
    after = PartitionState(0, 0, 10, 10, leader_epoch=3, leader_since_ms=NOW_MS - 1800_000)
    nothing_yet = PartitionState(0, 0, 10, 10, leader_epoch=4)
    not_known = PartitionState(0, 0, 10, 10)
    assert _reported_missing(kept).startswith("never-produced: reconciliation run run-1")
    assert _reported_missing(before).startswith("never-produced")
    # within the clock margin (60 s) of the row's creation: not certainly before it
    assert _reported_missing(just_before).startswith("unknown")
    assert "tickets/0 has changed leader (leader epoch 3)" in _reported_missing(after)
    assert "run run-1" in _reported_missing(after)
    assert "has appended no record yet" in _reported_missing(nothing_yet)
    assert "the leader epoch of tickets/0 could not be read" in _reported_missing(not_known)


def test_an_unprobed_producer_s_row_is_never_produced_only_if_no_leader_can_have_changed_since() -> None:
    # the ledger is readable but holds nothing for the topic: its completeness says nothing
    changed = PartitionState(0, 0, 10, 10, leader_epoch=2, leader_since_ms=NOW_MS - 1800_000)
    adopted_ms = NOW_MS - 1800_000  # probed from half an hour ago, after the row was created
    for entries_for_topic, covers_ms, state, verdict in (
        (0, None, PartitionState(0, 0, 10, 10, leader_epoch=0), "never-produced"),
        (0, None, changed, "unknown"),
        (10, PROBED_SINCE_MS, changed, "never-produced"),  # a probed producer's ledger would hold the lost ack
        (10, adopted_ms, changed, "unknown"),  # not if the row's producer may not have been probed then
    ):
        ledger = LedgerView("pl", True, entries_for_topic=entries_for_topic, covers_topic_from_ms=covers_ms)
        cluster = view(producer_ledger=ledger)
        cluster.partitions = {0: state}
        d = diagnose(ROW, [], [], {}, cluster)
        assert d.verdict == verdict, (entries_for_topic, state, d.reason)
        if verdict == "unknown":
            assert "tickets/0 has changed leader" in d.reason
            assert ("its producer is not probed" if not entries_for_topic else "may not have been probed") in d.reason
            assert d.evidence["leader_change"]["leader_epoch"] == 2


COMPACTED = TopicCleanup("compact", compaction_lag_ms=0)


def _absent(record_key: str, cleanup: TopicCleanup | None, **extra: object) -> tuple[str, str]:
    """The verdict on a row whose key is nowhere in the topic, for a binding key and cleanup."""
    cluster = view(record_key=record_key, cleanup=cleanup, **extra)
    cluster.partitions = {0: PartitionState(0, 0, 10, 10, leader_epoch=0)}
    d = diagnose(ROW, [], [], {}, cluster)
    return d.verdict, d.reason


def test_an_item_absent_from_a_compacted_topic_keyed_otherwise_is_unknown_not_never_produced() -> None:
    # the producer is not probed: the topic's completeness is all there is, and the log cleaner
    # removes an item's record once a later record has the same record key (another item's)
    plain = {"producer_ledger": LedgerView("pl", True, entries_for_topic=0)}
    verdict, reason = _absent("json:$.ticket_id", COMPACTED, **plain)
    assert verdict == "unknown"
    assert "is compacted (cleanup.policy=compact, min.compaction.lag.ms=0)" in reason
    assert "json:$.ticket_id" in reason
    # keyed by the record key, the cleaner keeps the key's last record: absence still counts
    assert _absent("key", COMPACTED, **plain)[0] == "never-produced"
    # not compacted, or the row younger than min.compaction.lag.ms (less the clock margin)
    assert _absent("json:$.ticket_id", TopicCleanup("delete"), **plain)[0] == "never-produced"
    assert _absent("json:$.ticket_id", TopicCleanup("compact", compaction_lag_ms=7200_000), **plain)[0] == (
        "never-produced"
    )
    assert _absent("json:$.ticket_id", TopicCleanup("compact,delete", compaction_lag_ms=3600_000), **plain)[0] == (
        "unknown"
    )
    # the policy could not be read: it may be compacted
    verdict, reason = _absent("header:id", None, cleanup_error="DescribeConfigs denied", **plain)
    assert verdict == "unknown" and "DescribeConfigs denied" in reason


def test_an_item_keyed_by_the_record_key_may_have_lost_every_record_to_a_cleaned_tombstone() -> None:
    # the row is an hour old and nothing read the topic in between: a tombstone written after
    # its record, cleaned and then removed delete.retention.ms later, leaves no trace
    plain = {"producer_ledger": LedgerView("pl", True, entries_for_topic=0)}
    short = TopicCleanup("compact", delete_retention_ms=1_800_000)
    verdict, reason = _absent("key", short, **plain)
    assert verdict == "unknown"
    assert "delete.retention.ms=1800000" in reason and "cleaned away with its tombstone" in reason
    # Kafka's default keeps a tombstone a day: an hour-old item cannot have been emptied
    assert _absent("key", COMPACTED, **plain)[0] == "never-produced"
    # ... nor, with a little more than an hour, one the diagnosis read as it was taken; but a
    # tombstone removed while it read the records went unseen: its read's end counts
    longer = TopicCleanup("compact", delete_retention_ms=3_700_000)
    assert _absent("key", longer, **plain)[0] == "never-produced"
    assert _absent("key", longer, read_done_ms=NOW_MS + 60_000, **plain)[0] == "unknown"
    # a run found no record with the key ten minutes ago: a record written since cannot be gone
    # with its tombstone unless delete.retention.ms is shorter than that
    cluster = view(record_key="key", cleanup=short, producer_ledger=None, consumer_ledger=None)
    cluster.partitions = {0: PartitionState(0, 0, 10, 10, leader_epoch=0)}
    memory = KeyMemory(missing={"TCK-7": MissingReport("run-1", NOW_MS - 600_000, {0: 10})})
    assert diagnose(ROW, [], [], {}, cluster, memory).verdict == "never-produced"
    cluster.cleanup = TopicCleanup("compact", delete_retention_ms=300_000)
    d = diagnose(ROW, [], [], {}, cluster, memory)
    assert d.verdict == "unknown" and "reconciliation run run-1" in d.reason
    assert d.evidence["compaction"]["delete_retention_ms"] == 300_000
    # the policy could not be read: it may be compacted, and its tombstones cleaned
    verdict, reason = _absent("key", None, cleanup_error="DescribeConfigs denied", **plain)
    assert verdict == "unknown" and "tombstone" in reason


def test_a_record_seen_or_acked_then_gone_from_a_compacted_topic_is_not_broker_lost() -> None:
    seen = KeyMemory(sightings={"TCK-7": KeySightings((Sighting(0, 4, NOW_MS - 3500_000, "run-1"),))})
    for cleanup, record_key, verdict in (
        (COMPACTED, "json:$.ticket_id", "unknown"),
        (COMPACTED, "key", "broker-lost"),  # its key's last record cannot have been cleaned
        (TopicCleanup("delete"), "json:$.ticket_id", "broker-lost"),
    ):
        cluster = view(record_key=record_key, cleanup=cleanup, producer_ledger=None)
        d = diagnose(ROW, [], [], {}, cluster, seen)
        assert d.verdict == verdict, (cleanup, record_key, d.reason)
        if verdict == "unknown":
            assert "seen by reconciliation run run-1 at tickets/0@4" in d.reason and "compacted" in d.reason
            assert d.evidence["compaction"]["cleanup_policy"] == "compact"
        d = diagnose(ROW, [], [acked(4)], {}, view(record_key=record_key, cleanup=cleanup))
        assert d.verdict == verdict, (cleanup, record_key, d.reason)
    # an acks=0 send absent from a compacted topic keyed otherwise: not a failed produce either
    d = diagnose(ROW, [], [unconfirmed()], {}, view(record_key="json:$.id", cleanup=COMPACTED))
    assert d.verdict == "unknown" and "compacted" in d.reason


# --- a consumer probed later, a consumer ledger that lost marks --------------------------


def test_a_record_below_the_groups_first_mark_is_unknown_not_skipped() -> None:
    # The application read offsets 0-5 before its consumer was wrapped: its first mark is at 6.
    cluster = view(committed=10)
    cluster.groups["g"].first_mark = {0: 6}
    d = diagnose(ROW, [LocatedRecord("TCK-7", 0, 4, NOW_MS - 3500_000)], [], {}, cluster)
    assert d.verdict == "unknown" and "first processed mark on tickets/0 is at offset 6" in d.reason
    cluster.groups["g"].first_mark = {0: 3}
    assert diagnose(ROW, [LocatedRecord("TCK-7", 0, 4, NOW_MS - 3500_000)], [], {}, cluster).verdict == "skipped"


def test_a_deleted_record_below_the_groups_first_mark_is_unknown_not_skipped() -> None:
    cluster = view(low=8, high=10, committed=10)
    cluster.groups["g"].max_mark_below_low = {0: 6}
    cluster.groups["g"].first_mark = {0: 5}
    d = diagnose(ROW, [], [acked(4)], {}, cluster)
    assert d.verdict == "unknown" and "before its consumer was probed" in d.reason


def test_a_deleted_record_whose_mark_may_have_gone_with_the_ledger_is_unknown() -> None:
    # The consumer ledger's oldest record left was written after this record was produced.
    cluster = view(low=8, high=10, committed=10, consumer_ledger=LedgerView("cl", True, complete_since_ms=NOW_MS))
    cluster.groups["g"].max_mark_below_low = {0: 6}
    d = diagnose(ROW, [], [acked(4)], {}, cluster)
    assert d.verdict == "unknown" and "no longer holds marks that old" in d.reason


def test_a_record_in_the_topic_stamped_within_the_clock_margin_of_the_consumer_ledgers_edge_is_not_skipped() -> None:
    # The group committed past the record with no mark for it; the consumer ledger's oldest
    # record left was written 30 s before the record's timestamp, which is its producer's clock:
    # a producer 30 s ahead, and the mark, written before the ledger's edge, may be gone.
    edge = NOW_MS - 600_000
    record = LocatedRecord("TCK-7", 0, 4, edge + 30_000)
    cluster = view(committed=9, consumer_ledger=LedgerView("cl", True, complete_since_ms=edge))
    d = diagnose(ROW, [record], [], {}, cluster)
    assert d.verdict == "unknown" and "no longer holds marks that old" in d.reason, d.reason
    # past the margin (60 s, as for deleted records), the ledger speaks for it
    assert diagnose(ROW, [replace(record, timestamp_ms=edge + 60_000)], [], {}, cluster).verdict == "skipped"
    # a record without a timestamp only where the ledger holds everything since its start
    assert diagnose(ROW, [replace(record, timestamp_ms=None)], [], {}, cluster).verdict == "unknown"
    cluster.consumer_ledger = LedgerView("cl", True, complete_since_ms=0)
    assert diagnose(ROW, [replace(record, timestamp_ms=None)], [], {}, cluster).verdict == "skipped"


def test_a_v2_ack_deleted_before_the_group_was_probed_is_unknown_not_expired() -> None:
    cluster = view(low=8, high=10, committed=10)
    cluster.partitions[0] = PartitionState(0, 8, 10, 10, NOW_MS - 60_000)
    cluster.groups["g"].last_mark_below_low_ms = None
    cluster.groups["g"].first_mark_ms = NOW_MS - 1000_000  # first marked after it was produced
    d = diagnose(ROW, [], [acked_range(NOW_MS - 3500_000, NOW_MS - 3499_000)], {}, cluster)
    assert d.verdict == "unknown" and "before its consumer was probed" in d.reason


def test_a_mark_recalled_from_a_run_says_processed_and_names_the_run() -> None:
    mark = ProcessedMark("g", 0, 4, None, None, seen_by_run="run-1")
    d = diagnose(ROW, [LocatedRecord("TCK-7", 0, 4, NOW_MS - 3500_000)], [], {("g", 0, 4): mark}, view(committed=10))
    assert d.verdict == "processed-not-updated"
    assert "as reconciliation run run-1 read" in d.reason and d.evidence["groups"][0]["processed"] == {
        "seen_by_run": "run-1"
    }


def test_marks_and_their_absence_before_a_topic_was_created_again_decide_nothing() -> None:
    """The topic was deleted and created again; the new id was first seen 10 minutes ago.
    Offsets started again at 0, so a mark at a record's offset made before then may be the
    deleted topic's record's. After it, marks and commits of the new topic decide as usual."""
    until = NOW_MS - 600_000
    recreated = {"recreated_until_ms": until, "recreated_reason": "topic tickets was deleted and created again"}
    old_mark = {("g", 0, 4): ProcessedMark("g", 0, 4, "old-session", NOW_MS - 3_000_000)}
    new_mark = {("g", 0, 4): ProcessedMark("g", 0, 4, "new-session", NOW_MS - 60_000)}
    early = [LocatedRecord("TCK-7", 0, 4, until - 120_000, "committed")]
    late = [LocatedRecord("TCK-7", 0, 4, NOW_MS - 120_000, "committed")]

    # the old mark is not taken for this record's: it is waiting, or unknown once committed past
    assert diagnose(ROW, early, [], old_mark, view(committed=2, **recreated)).verdict == "waiting"
    d = diagnose(ROW, early, [], old_mark, view(committed=6, **recreated))
    assert d.verdict == "unknown" and "deleted and created again" in d.reason, d.reason
    assert diagnose(ROW, early, [], {}, view(committed=6, **recreated)).verdict == "unknown"
    # a mark made after the new id was seen is the new record's
    assert diagnose(ROW, early, [], new_mark, view(committed=6, **recreated)).verdict == "processed-not-updated"
    # records written after it are judged as ever
    assert diagnose(ROW, late, [], {}, view(committed=6, **recreated)).verdict == "skipped"
    assert diagnose(ROW, late, [], new_mark, view(committed=6, **recreated)).verdict == "processed-not-updated"
    # without the re-creation, the same evidence is what it says
    assert diagnose(ROW, early, [], old_mark, view(committed=6)).verdict == "processed-not-updated"
    assert diagnose(ROW, early, [], {}, view(committed=6)).verdict == "skipped"


def test_an_ack_or_sighting_of_a_record_produced_before_the_topic_was_created_again_is_not_broker_lost() -> None:
    until = NOW_MS - 600_000
    recreated = {"recreated_until_ms": until, "recreated_reason": "topic tickets was deleted and created again"}
    d = diagnose(ROW, [], [acked(4)], {}, view(**recreated))
    assert d.verdict == "unknown" and "deleted and created again" in d.reason, d.reason
    seen = KeyMemory(sightings={"TCK-7": KeySightings((Sighting(0, 4, NOW_MS - 3500_000, "run-1"),))})
    assert diagnose(ROW, [], [], {}, view(**recreated), seen).verdict == "unknown"
    assert diagnose(ROW, [], [], {}, view(), seen).verdict == "broker-lost"


def test_a_sighting_at_an_offset_the_log_covers_is_unknown_when_the_topic_id_could_not_be_read() -> None:
    # Gone from an offset the log still covers: truncated, or the topic deleted and created
    # again since, whose new records took the offset. Only the topic's id tells them apart.
    seen = KeyMemory(sightings={"TCK-7": KeySightings((Sighting(0, 4, NOW_MS - 3500_000, "run-1"),))})
    assert diagnose(ROW, [], [], {}, view(), seen).verdict == "broker-lost"
    unread = {"topic_id_error": "topic 'tickets' cannot be described: timed out"}
    for entries, memory in (([], seen), ([acked(4)], KeyMemory())):
        d = diagnose(ROW, [], entries, {}, view(**unread), memory)
        assert d.verdict == "unknown" and "the topic's id could not be read (topic 'tickets'" in d.reason, d.reason
        assert d.evidence["topic_id_error"] == unread["topic_id_error"]


def test_a_sighting_of_the_topic_before_a_run_found_it_created_again_is_never_judged_against_the_new_log() -> None:
    # The run's state says the new topic's records are stamped since an hour and a half ago:
    # the record seen at 0@4 before that was the deleted topic's, whatever 0@4 holds now.
    old = Sighting(0, 4, NOW_MS - 7_000_000, "run-1", deleted_topic_until_ms=NOW_MS - 5_400_000)
    for cluster in (view(), view(low=8, committed=2)):  # its offset in the new log, or below its start
        d = diagnose(ROW, [], [], {}, cluster, KeyMemory(sightings={"TCK-7": KeySightings((old,))}))
        assert d.verdict == "unknown" and "deleted and created again" in d.reason, d.reason


def _copies(*copies: Sighting, unplaced: int = 0) -> KeyMemory:
    return KeyMemory(sightings={"TCK-7": KeySightings(copies, unplaced)})


def test_of_several_records_runs_saw_with_the_key_the_one_that_got_furthest_decides() -> None:
    # Two partitions: the group committed 2 on partition 0 and 10 on partition 1; both deleted.
    cluster = view(low=8, committed=2)
    cluster.partitions[1] = PartitionState(1, 8, 10, 10, NOW_MS - 7200_000)
    cluster.groups["g"].committed[1] = 10
    cluster.groups["g"].first_mark[1] = 0
    first = Sighting(0, 4, NOW_MS - 3500_000, "run-1")  # deleted before the group reached it
    resent = Sighting(1, 5, NOW_MS - 3400_000, None)  # committed past
    processed = {("g", 1, 5): ProcessedMark("g", 1, 5, "c1", NOW_MS - 3000_000)}

    assert diagnose(ROW, [], [], {}, cluster, _copies(first)).verdict == "expired"
    d = diagnose(ROW, [], [], processed, cluster, _copies(first, resent))
    assert d.verdict == "processed-not-updated", d.reason
    assert "records with this key (0@4 expired, 1@5 processed-not-updated)" in d.reason, d.reason
    assert [c["verdict"] for c in d.evidence["copies"]] == ["expired", "processed-not-updated"]
    assert (d.evidence["partition"], d.evidence["offset"]) == (1, 5)
    # no mark: the re-send was committed past while its neighbours were read (skipped), which
    # got further than the first copy's expiry
    cluster.groups["g"].seen = {1: SeenCommits((Span(0, 7, "run-1", "run-1", NOW_MS - 3000_000),))}
    assert diagnose(ROW, [], [], {}, cluster, _copies(first, resent)).verdict == "skipped"
    # a copy whose fate is unknown may have been the one processed
    cluster.groups["g"].seen = {}
    cluster.consumer_ledger = LedgerView("cl", False, "topic cl does not exist")
    d = diagnose(ROW, [], [], {}, cluster, _copies(first, resent))
    assert d.verdict == "unknown" and "may have been the copy processed" in d.reason, d.reason
    # as may one whose place the state no longer keeps; a processed copy still settles it
    cluster.consumer_ledger = LedgerView("cl", True)
    d = diagnose(ROW, [], [], {}, cluster, _copies(first, unplaced=1))
    assert d.verdict == "unknown" and "where the other 1 were is not kept" in d.reason, d.reason
    assert diagnose(ROW, [], [], processed, cluster, _copies(first, resent, unplaced=1)).verdict == (
        "processed-not-updated"
    )


def test_every_record_a_producer_acked_with_the_key_is_weighed_with_those_runs_saw() -> None:
    """Copy 1 is processed and the row's update is lost; the application sends the record
    again; copy 2 is acked and deleted before the group reaches it (or truncated). Both are gone
    now. The item reached the consumer: processed-not-updated, not the latest ack's verdict."""
    cluster = view(low=8, committed=5)  # the group committed past copy 1 (offset 4), not copy 2 (6)
    processed = {("g", 0, 4): ProcessedMark("g", 0, 4, "c1", NOW_MS - 3000_000)}
    copy_2 = replace(acked(6), seq=8, ts_ms=NOW_MS - 3400_000)

    assert diagnose(ROW, [], [copy_2], processed, cluster).verdict == "expired"  # alone
    d = diagnose(ROW, [], [acked(4), copy_2], processed, cluster)
    assert d.verdict == "processed-not-updated", d.reason
    assert "producer session s1 acked 2 records with this key (0@4 processed-not-updated, 0@6 expired)" in d.reason
    assert [(c["offset"], c["verdict"]) for c in d.evidence["copies"]] == [
        (4, "processed-not-updated"),
        (6, "expired"),
    ]
    assert (d.evidence["partition"], d.evidence["offset"]) == (0, 4)
    # copy 1 known from a run's sighting only (deleted since), copy 2 acked and truncated (at an
    # offset the log still covers)
    covered = view(low=5, committed=5)
    truncated = replace(acked(6), ts_ms=NOW_MS - 3400_000)
    assert diagnose(ROW, [], [truncated], processed, covered).verdict == "broker-lost"
    d = diagnose(ROW, [], [truncated], processed, covered, _copies(Sighting(0, 4, NOW_MS - 3500_000, "run-1")))
    assert d.verdict == "processed-not-updated", d.reason
    assert "producer session s1 acked and reconciliation run run-1 saw 2 records with this key" in d.reason, d.reason
    # An ack keeps its held-watermark rule among copies: acked (acks=1) beyond the log end 40 s
    # before the log end was read again, it may still be held back, so it may be the copy that
    # gets processed; the expired sighting does not decide.
    read_ms = NOW_MS + 2_000
    held = replace(acked(15), ts_ms=read_ms - 40_000)
    young = view(low=8, high=10, committed=5, high_after={0: 10}, read_done_ms=read_ms)
    d = diagnose(ROW, [], [held], {}, young, _copies(Sighting(0, 6, NOW_MS - 3500_000, "run-1")))
    assert d.verdict == "unknown" and "lost or still held back cannot be told" in d.reason, d.reason
    assert [c["verdict"] for c in d.evidence["copies"]] == ["unknown", "expired"]
    # One record, acked and seen: judged as one (the ack's verdict and reason, both listed).
    d = diagnose(ROW, [], [copy_2], {}, cluster, _copies(Sighting(0, 6, NOW_MS - 3400_000, "run-1")))
    assert d.verdict == "expired" and d.reason.startswith("acked at tickets/0@6"), d.reason
    assert d.evidence["copies_seen"] == 1 and len(d.evidence["copies"]) == 2
    # a transactional session's ack is a copy whose fate is unknown; a processed copy still settles it
    cluster.transactional_sessions = frozenset({"s1"})
    assert diagnose(ROW, [], [acked(4), copy_2], {}, cluster).verdict == "unknown"
    tx = diagnose(ROW, [], [copy_2], processed, cluster, _copies(Sighting(0, 4, NOW_MS - 3500_000, "run-1")))
    assert tx.verdict == "processed-not-updated", tx.reason


def test_an_ack_a_run_read_aborted_is_aborted_once_deleted_and_other_acks_of_its_session_unknown() -> None:
    """The log starts at 8; the group committed 8 and marked records up to 9 (the acked record
    alone would be expired). Run run-1 read 0@4 only in an aborted transaction."""
    cluster = view(low=8, committed=8)
    read = LocatedRecord("TCK-7", 0, 4, NOW_MS - 3500_000, "aborted", "s1", 7, "run-1")
    memory = KeyMemory(aborted={"TCK-7": (read,)}, aborting_sessions={"s1": "run-1"})
    assert diagnose(ROW, [], [acked(4)], {}, cluster).verdict == "expired"

    d = diagnose(ROW, [], [acked(4)], {}, cluster, memory)
    assert d.verdict == "aborted" and "run-1" in d.reason, d.reason
    assert d.evidence["aborted_seen"]["seen_by_run"] == "run-1"
    # known only from the run (no ack), it is aborted too
    assert diagnose(ROW, [], [], {}, cluster, memory).verdict == "aborted"
    # another record of the session no run read: its ack proves no commit
    other = replace(acked(6), seq=9)
    d = diagnose(ROW, [], [other], {}, cluster, replace(memory, aborted={}))
    assert d.verdict == "unknown" and "transactional" in d.reason and "run-1" in d.reason, d.reason
    # a re-send that got further decides; an aborted copy never makes another unknown
    resent = replace(acked(6), session="s2", seq=0)
    d = diagnose(ROW, [], [acked(4), resent], {}, cluster, memory)
    assert d.verdict == "expired" and [c["verdict"] for c in d.evidence["copies"]] == ["aborted", "expired", "aborted"]
    # another session's record at that offset (rewritten since) is not the one the run read
    assert diagnose(ROW, [], [resent], {}, cluster, replace(memory, aborting_sessions={})).verdict == "expired"
    # a run also saw a committed record there: the offset was rewritten, the sighting is judged
    seen = replace(memory, sightings={"TCK-7": KeySightings((Sighting(0, 4, NOW_MS - 3500_000, "run-2"),))})
    assert diagnose(ROW, [], [], {}, cluster, seen).verdict == "expired"
    # a transactional session's ack of a record a run saw committed is judged as any ack
    cluster.transactional_sessions = frozenset({"s1"})
    assert diagnose(ROW, [], [other], {}, cluster).verdict == "unknown"
    committed = KeyMemory(sightings={"TCK-7": KeySightings((Sighting(0, 6, NOW_MS - 3500_000, "run-1"),))})
    assert diagnose(ROW, [], [other], {}, cluster, committed).verdict == "expired"


def test_marks_past_where_the_broker_rewrote_a_partition_are_judged_by_their_time() -> None:
    """Reconciliation found partition 0 truncated and rewritten past offset 1, its first new
    record written 10 minutes ago (the rule's bound). The mark made at offset 4 before then is
    the lost record's; a record written there after the bound is judged without it."""
    until = NOW_MS - 600_000
    rules = {"mark_rules": [MarkRule(0, 1, until)]}
    old = ProcessedMark("g", 0, 4, "old-session", NOW_MS - 3_000_000)
    new = ProcessedMark("g", 0, 4, "new-session", NOW_MS - 60_000)
    early = [LocatedRecord("TCK-7", 0, 4, until - 120_000, "committed")]
    late = [LocatedRecord("TCK-7", 0, 4, NOW_MS - 120_000, "committed")]

    # the lost record's mark is nobody's proof: a later record committed past without its own is skipped
    assert diagnose(ROW, late, [], {("g", 0, 4): old}, view(committed=6, **rules)).verdict == "skipped"
    # one written before the bound cannot be judged without a mark made after it ...
    d = diagnose(ROW, early, [], {("g", 0, 4): old}, view(committed=6, **rules))
    assert d.verdict == "unknown" and "truncated and rewritten past offset 1" in d.reason, d.reason
    # ... which counts, even behind the lost record's earlier one at the same offset
    both = {("g", 0, 4): old.merged(new)}
    d = diagnose(ROW, early, [], both, view(committed=6, **rules))
    assert d.verdict == "processed-not-updated" and "new-session" in d.reason, d.reason
    # at or below the offset the rule proved, marks are what they say
    below = [LocatedRecord("TCK-7", 0, 1, until - 120_000, "committed")]
    assert diagnose(ROW, below, [], {("g", 0, 1): replace(old, offset=1)}, view(committed=6, **rules)).verdict == (
        "processed-not-updated"
    )
    # without the rule, the same evidence is what it says
    assert diagnose(ROW, late, [], {("g", 0, 4): old}, view(committed=6)).verdict == "processed-not-updated"


def test_marks_at_one_position_keep_the_first_and_the_latest() -> None:
    a = ProcessedMark("g", 0, 4, "a", 1000)
    b = ProcessedMark("g", 0, 4, "b", 3000)
    c = ProcessedMark("g", 0, 4, "c", 2000)
    merged = a.merged(b).merged(c)
    assert (merged.consumer_session, merged.ts_ms, merged.latest_session, merged.latest_ms) == ("a", 1000, "b", 3000)
    assert c.merged(b).merged(a) == merged  # in any order
    assert (merged.latest().consumer_session, merged.latest().ts_ms) == ("b", 3000)
    assert a.merged(a) == a and a.latest() == a


def test_a_deleted_record_at_a_rewritten_offset_is_judged_by_the_time_of_its_marks() -> None:
    """Reconciliation found partition 0 truncated and rewritten past offset 1 (its first new
    record written 10 minutes ago, the bound); retention has since moved the log start to 8.
    A mark at offset 4 made before the bound may be a lost record's, and so may marks past 4."""
    until = NOW_MS - 600_000
    rules = {"mark_rules": [MarkRule(0, 1, until)]}
    old = ProcessedMark("g", 0, 4, "old-session", NOW_MS - 3_000_000)
    new = ProcessedMark("g", 0, 4, "new-session", NOW_MS - 60_000)
    before = acked(4)  # acked 58 minutes ago, before the rewrite
    after = replace(acked(4), ts_ms=NOW_MS - 300_000)  # acked 5 minutes ago, at a rewritten offset

    def deleted(**extra: object) -> ClusterView:
        return view(low=8, high=10, committed=10, **extra)

    # acked before the bound past the proven offset: lost with the rewritten part, or kept and
    # deleted since, cannot be told, whatever marks say
    for marks in ({}, {("g", 0, 4): old}, {("g", 0, 4): old.merged(new)}):
        d = diagnose(ROW, [], [before], marks, deleted(**rules))
        assert d.verdict == "unknown" and "truncated and rewritten past offset 1" in d.reason, d.reason
    # acked after it: the lost record's mark is not its own ...
    cluster = deleted(**rules)
    d = diagnose(ROW, [], [after], {("g", 0, 4): old}, cluster)
    assert d.verdict == "expired", d.reason
    # ... a mark made after the bound is
    d = diagnose(ROW, [], [after], {("g", 0, 4): old.merged(new)}, cluster)
    assert d.verdict == "processed-not-updated" and "new-session" in d.reason, d.reason
    # and marks past it may be lost records': no proof that the group skipped it
    cluster.groups["g"].max_mark_below_low = {0: 6}
    d = diagnose(ROW, [], [after], {("g", 0, 4): old}, cluster)
    assert d.verdict == "unknown" and "may be of records the broker lost" in d.reason, d.reason
    # without the rule, the same evidence is what it says
    assert diagnose(ROW, [], [before], {("g", 0, 4): old}, deleted()).verdict == "processed-not-updated"
    plain = deleted()
    plain.groups["g"].max_mark_below_low = {0: 6}
    plain.groups["g"].seen = _seen((0, 6))  # a run saw the group pass offset 4 while it existed
    assert diagnose(ROW, [], [after], {}, plain).verdict == "skipped"
    # below the proven offset a deleted record is judged as ever
    assert diagnose(ROW, [], [acked(1)], {("g", 0, 1): replace(old, offset=1)}, deleted(**rules)).verdict == (
        "processed-not-updated"
    )


def test_a_failed_send_the_broker_may_have_written_is_produce_failed_only_while_nothing_that_old_was_deleted() -> None:
    # A timeout after the broker wrote the record: librdkafka reports it possibly persisted.
    possibly = LedgerEntry("TCK-7", "s1", 7, "failed", 0, -1, "Message timed out", "possibly", NOW_MS - 3500_000)
    assert diagnose(ROW, [], [possibly], {}, view()).verdict == "produce-failed"  # the log holds all since
    cluster = view()
    cluster.partitions[0] = PartitionState(0, 8, 10, 10, NOW_MS - 60_000)  # its oldest record a minute old
    d = diagnose(ROW, [], [possibly], {}, cluster)
    assert d.verdict == "unknown" and "may have written it" in d.reason and "retention" in d.reason
    # The report comes up to a message timeout (300 s by default) after the write: a log whose
    # oldest record is 2 minutes older than the report may have lost a record written before it.
    late = replace(possibly, ts_ms=NOW_MS - 10_000)
    cluster.partitions[0] = PartitionState(0, 8, 10, 10, NOW_MS - 130_000)
    assert diagnose(ROW, [], [late], {}, cluster).verdict == "unknown"
    cluster.partitions[0] = PartitionState(0, 8, 10, 10, NOW_MS - 600_000)  # ten minutes: holds it all
    assert diagnose(ROW, [], [late], {}, cluster).verdict == "produce-failed"
    # One the broker certainly did not write stays a failed produce, whatever was deleted since.
    certain = LedgerEntry("TCK-7", "s1", 7, "failed", 0, -1, "Message timed out", "not", NOW_MS - 3500_000)
    assert diagnose(ROW, [], [certain], {}, cluster).verdict == "produce-failed"


def test_a_deleted_record_of_a_group_without_a_committed_offset_is_expired_only_while_no_commit_can_have_expired() -> (
    None
):
    # Acked an hour ago at offset 4, now below the log start; the group has no committed offset.
    cluster = view(low=8, consumer_ledger=LedgerView("cl", False, "topic cl does not exist"))
    cluster.offsets_retention_minutes = 7 * 24 * 60  # Kafka's default: a commit past it would still be there
    assert diagnose(ROW, [], [acked(4)], {}, cluster).verdict == "expired"
    cluster.offsets_retention_minutes = 30  # an empty group's offsets go after 30 minutes: they may have
    d = diagnose(ROW, [], [acked(4)], {}, cluster)
    assert d.verdict == "unknown" and "offsets.retention.minutes: 30 min" in d.reason
    cluster.offsets_retention_minutes = None  # not readable
    assert diagnose(ROW, [], [acked(4)], {}, cluster).verdict == "unknown"


SEEN_MS = NOW_MS - 1800_000  # a reconciliation run read the group's offsets half an hour ago


def _seen(*spans: tuple[int, int]) -> dict[int, SeenCommits]:
    """Spans [log start, committed offset) runs saw the group's offset pass while in the log."""
    return {0: SeenCommits(tuple(Span(a, b, "run-7", "run-7", SEEN_MS) for a, b in spans))}


def test_a_record_a_run_saw_the_group_commit_past_is_not_waiting_once_its_offset_is_gone() -> None:
    # The group's offsets were deleted (kafka-consumer-groups --delete-offsets) after a run saw
    # it commit 6, past the record at offset 4; nobody marked it processed; no member is up.
    record = LocatedRecord("TCK-7", 0, 4, NOW_MS - 3500_000, "committed")
    cluster = view(offsets_retention_minutes=7 * 24 * 60)
    cluster.groups["g"].members, cluster.groups["g"].state, cluster.groups["g"].simple = 0, "empty", False
    assert diagnose(ROW, [record], [], {}, cluster).verdict == "waiting"  # what the cluster alone says
    cluster.groups["g"].seen = _seen((0, 6))
    d = diagnose(ROW, [record], [], {}, cluster)
    assert d.verdict == "skipped", d.reason
    assert "run run-7" in d.reason and "no committed offset there now" in d.reason
    assert d.evidence["groups"][0]["seen_commits"] == [[0, 6, "run-7", "run-7", SEEN_MS]]
    # without a processed ledger: committed past, processed or skipped cannot be told
    cluster.groups["g"].marks_on_topic = 0
    assert diagnose(ROW, [record], [], {}, cluster).verdict == "unknown"
    # a sighting not past the record changes nothing
    cluster.groups["g"].seen = _seen((0, 4))
    assert diagnose(ROW, [record], [], {}, cluster).verdict == "waiting"


def test_a_record_whose_group_moved_back_below_it_waits_to_be_read_again() -> None:
    record = LocatedRecord("TCK-7", 0, 4, NOW_MS - 3500_000, "committed")
    cluster = view(committed=2)  # reset to 2 (a replay): the group reads offset 4 again
    cluster.groups["g"].members = 0
    cluster.groups["g"].seen = _seen((0, 6))
    assert diagnose(ROW, [record], [], {}, cluster).verdict == "waiting"


def test_a_deleted_record_a_run_saw_the_group_commit_past_in_the_log_is_skipped_not_expired() -> None:
    cluster = view(low=8, committed=10, offsets_retention_minutes=7 * 24 * 60)
    # the cluster alone: committed past, no mark, no later record processed: the log start
    # may have moved past it before the group reached it
    assert diagnose(ROW, [], [acked(4)], {}, cluster).verdict == "expired"
    cluster.groups["g"].seen = _seen((0, 6))  # a run saw the group pass 0-5 while they were in the log
    d = diagnose(ROW, [], [acked(4)], {}, cluster)
    assert d.verdict == "skipped" and "pass offsets 0-5" in d.reason, d.reason
    assert d.evidence["groups"][0]["passed_in_log"] == [0, 6, "run-7", "run-7", SEEN_MS]
    # an earlier span proves it too, after one where retention had passed it first
    cluster.groups["g"].seen = _seen((2, 5), (7, 9))
    assert diagnose(ROW, [], [acked(4)], {}, cluster).verdict == "skipped"
    # seen past it only once the log start had passed it: nothing proves it was read in time
    cluster.groups["g"].seen = _seen((5, 9))
    assert diagnose(ROW, [], [acked(4)], {}, cluster).verdict == "expired"


def test_a_deleted_record_is_not_expired_unread_when_a_run_saw_the_group_past_it_before_its_offset_went() -> None:
    # no committed offset now, and young enough that no commit can have expired: the cluster
    # alone says the group never reached it
    cluster = view(low=8, offsets_retention_minutes=7 * 24 * 60)
    assert diagnose(ROW, [], [acked(4)], {}, cluster).verdict == "expired"
    cluster.groups["g"].seen = _seen((0, 6))
    d = diagnose(ROW, [], [acked(4)], {}, cluster)
    assert d.verdict == "skipped", d.reason
    # moved back below it since (a reset to replay): the record cannot be read again, the sighting stands
    cluster.groups["g"].committed = {0: 3}
    assert diagnose(ROW, [], [acked(4)], {}, cluster).verdict == "skipped"
    # a plain consumer: processed or skipped cannot be told
    cluster.groups["g"].marks_on_topic = 0
    d = diagnose(ROW, [], [acked(4)], {}, cluster)
    assert d.verdict == "unknown" and "run run-7" in d.reason and "now 3" in d.reason, d.reason


def test_a_deleted_record_is_not_expired_when_the_offset_a_run_saw_short_of_it_is_gone() -> None:
    # A run saw the group at 4 (the record's offset); its offsets are gone since: it may have
    # gone past the record first, which no retention setting bounds.
    cluster = view(low=8, offsets_retention_minutes=7 * 24 * 60)
    cluster.groups["g"].seen = _seen((0, 4))
    d = diagnose(ROW, [], [acked(4)], {}, cluster)
    assert d.verdict == "unknown" and "saw it at 4" in d.reason, d.reason
    cluster.groups["g"].committed = {0: 3}  # an offset now, short of it: expired as before
    assert diagnose(ROW, [], [acked(4)], {}, cluster).verdict == "expired"


def test_a_sighting_stands_in_only_where_nobody_can_be_reading_the_partition() -> None:
    record = LocatedRecord("TCK-7", 0, 4, NOW_MS - 3500_000, "committed")
    cluster = view(offsets_retention_minutes=7 * 24 * 60)
    group = cluster.groups["g"]
    group.seen = _seen((0, 6))
    cases = [  # members, state, simple, assigned -> skipped (the sighting stands in) or waiting
        (0, "empty", False, frozenset(), "skipped"),
        (0, "dead", False, frozenset(), "skipped"),
        (1, "stable", False, frozenset({1}), "skipped"),
        (1, "stable", False, frozenset({0}), "waiting"),
        (1, "stable", False, None, "waiting"),
        (2, "completing_rebalance", False, frozenset(), "waiting"),  # assignment not shown mid-rebalance
        (0, "empty", True, frozenset(), "waiting"),  # a simple group's consumers never show as members
        (None, None, None, None, "waiting"),  # not described
    ]
    for members, state, simple, assigned, verdict in cases:
        group.members, group.state, group.simple, group.assigned = members, state, simple, assigned
        assert diagnose(ROW, [record], [], {}, cluster).verdict == verdict, (members, state, simple, assigned)


def test_a_v2_ack_deleted_is_unknown_when_runs_saw_the_group_commit_offsets_gone_since() -> None:
    entry = acked_range(NOW_MS - 3500_000, NOW_MS - 3500_000)
    cluster = view(low=8, offsets_retention_minutes=7 * 24 * 60)
    cluster.partitions[0] = PartitionState(0, 8, 10, 10, NOW_MS - 600_000)  # ten minutes: the ack is older
    assert diagnose(ROW, [], [entry], {}, cluster).verdict == "expired"  # never committed, as far as it shows
    cluster.groups["g"].seen = _seen((0, 6))
    d = diagnose(ROW, [], [entry], {}, cluster)
    assert d.verdict == "unknown" and "saw it commit on partition(s) 0" in d.reason, d.reason


def test_a_row_whose_creation_time_is_not_known_is_never_produced_only_where_nothing_was_deleted() -> None:
    # The binding names no created column: the row's since (its age column) may be an update
    # long after its record was produced and deleted.
    touched = replace(ROW, since=datetime.fromtimestamp((NOW_MS - 600_000) / 1000, UTC), created=None)
    cluster = view(low=5)
    cluster.partitions[0] = PartitionState(0, 5, 10, 10, NOW_MS - 3000_000)  # older than the update
    d = diagnose(touched, [], [], {}, cluster)
    assert d.verdict == "unknown" and "when the row was created is not known" in d.reason, d.reason
    assert d.evidence["row_created"] is None
    # a topic that lost nothing, under one leader, holds its record whenever it was created
    whole = view()
    whole.partitions[0] = PartitionState(0, 0, 10, 10, leader_epoch=0)
    assert diagnose(touched, [], [], {}, whole).verdict == "never-produced"


def test_an_ack_of_a_transactional_session_does_not_prove_the_record_committed() -> None:
    # The record at offset 4 is gone (log start 8) and a run saw the group pass it in the log:
    # skipped, were it committed; a transactional session's ack holds for an aborted record too.
    cluster = view(low=8, high=10, committed=10, offsets_retention_minutes=7 * 24 * 60)
    cluster.groups["g"].seen = _seen((0, 6))
    assert diagnose(ROW, [], [acked(4)], {}, cluster).verdict == "skipped"
    cluster.transactional_sessions = frozenset({"s1"})
    d = diagnose(ROW, [], [acked(4)], {}, cluster)
    assert d.verdict == "unknown" and "aborted transaction" in d.reason, d.reason
    assert d.evidence["transactional_session"] == "s1"


def test_a_young_row_is_not_never_produced_while_a_partition_refuses_writes() -> None:
    # Created 3 minutes ago (the rule's older_than is 2 minutes), within the send outcome bound
    # (365 s, librdkafka's defaults): a probed contract-v1 producer whose send is refused with
    # NOT_ENOUGH_REPLICAS retries it and ledgers nothing until its report comes. Before stop 70:
    # never-produced, and the record landed once the replica came back.
    created = datetime.fromtimestamp((NOW_MS - 180_000) / 1000, UTC)
    row = StuckRow("TCK-7", "NEW", 180.0, created, created=created)
    stalled = "tickets/0 has 1 in-sync replica(s) of 3, fewer than its min.insync.replicas (2): ..."
    cluster = view(stalled={0: stalled})
    d = diagnose(row, [], [], {}, cluster)
    assert d.verdict == "unknown" and "may be refused and retried still" in d.reason and stalled in d.reason
    # nothing refuses writes: a send made since would be in the log by now
    assert diagnose(row, [], [], {}, view()).verdict == "never-produced"
    # the in-sync replicas could not be read: not known
    assert diagnose(row, [], [], {}, view(stalled_error="no answer")).verdict == "unknown"
    # a producer that retries without limit (message.timeout.ms=0): any age
    assert diagnose(ROW, [], [], {}, view(stalled={0: stalled}, send_outcome_ms=0)).verdict == "unknown"
    # created an hour ago: past the bound, a send refused since would have failed by now
    assert diagnose(ROW, [], [], {}, view(stalled={0: stalled})).verdict == "never-produced"


def test_produce_failed_needs_every_send_of_the_key_to_have_failed_for_sure() -> None:
    t = NOW_MS - 3500_000
    # everything produced since 10 minutes ago still there; older records deleted
    deleted = view(low=5, high=10, committed=10)
    deleted.partitions[0] = PartitionState(0, 5, 10, 10, NOW_MS - 600_000, leader_epoch=0)
    # v1: the first send timed out after the broker may have written it, the re-send was
    # refused; retention has deleted records of that time since. Before stop 70 the last report
    # alone decided: produce-failed.
    possibly = LedgerEntry("TCK-7", "s1", 7, "failed", 0, -1, "Local: Message timed out", "possibly", t)
    refused = LedgerEntry("TCK-7", "s1", 8, "failed", 0, -1, "Local: Queue full", "not", t + 5000)
    d = diagnose(ROW, [], [possibly, refused], {}, deleted)
    assert d.verdict == "unknown" and "persisted: possibly" in d.reason, d.reason
    # both refused for sure: produce-failed, naming both
    refused_first = replace(possibly, persisted="not", error="Broker: Message size too large")
    d = diagnose(ROW, [], [refused_first, refused], {}, deleted)
    assert d.verdict == "produce-failed" and d.reason.startswith("2 sends failed"), d.reason
    # v2: refused for sure (its sequence also in an unconfirmed range, as contract v2 ledgers a
    # failure), then a re-send 10 s ago still unresolved (`sent`): in flight
    refused_v2 = LedgerEntry("TCK-7", "s1", 7, "failed", -1, -1, "Broker: Message size too large", "not", t)
    its_window = LedgerEntry("TCK-7", "s1", 7, "sent", -1, -1, None, None, t - 100, t)
    assert diagnose(ROW, [], [refused_v2, its_window], {}, view()).verdict == "produce-failed"
    resent = LedgerEntry("TCK-7", "s1", 9, "sent", -1, -1, None, None, NOW_MS - 10_000, NOW_MS - 10_000)
    d = diagnose(ROW, [], [refused_v2, its_window, resent], {}, view())
    assert d.verdict == "unknown" and "another send of it was sent" in d.reason, d.reason
    # the same re-send an hour ago, every partition complete since: it never reached the log either
    resent_long_ago = replace(resent, ts_ms=t + 1000, to_ms=t + 1000)
    assert diagnose(ROW, [], [refused_v2, its_window, resent_long_ago], {}, view()).verdict == "produce-failed"


def test_a_row_created_before_the_topic_is_known_to_exist_is_not_never_produced_for_its_log_starting_at_0() -> None:
    """The topic was deleted and created again before the auditor first saw its id: no id to
    differ from, and every partition starts at offset 0. Its first record (or the auditor's
    first sighting of its id) is the earliest it is known to have existed; a row created
    before may have had its record in the deleted topic (stop 70's review)."""
    known_since = NOW_MS - 1800_000  # half an hour ago; the row was created an hour ago
    why = "tickets is known to exist only since 30 minutes ago (its oldest first record is stamped then)"
    unprobed = LedgerView("pl", True, entries_for_topic=0)
    whole = PartitionState(0, 0, 10, 10, leader_epoch=0)
    cluster = view(producer_ledger=unprobed)
    cluster.partitions = {0: whole}
    assert diagnose(ROW, [], [], {}, cluster).verdict == "never-produced"  # no bound: as before
    cluster.incarnation_since_ms, cluster.incarnation_reason = known_since, why
    d = diagnose(ROW, [], [], {}, cluster)
    assert d.verdict == "unknown" and why in d.reason, d.reason
    assert d.evidence["topic_known_since"] == ms_to_iso(known_since)
    # a row created after it: the topic holds its record if it was ever produced
    young = replace(ROW, created=datetime.fromtimestamp((known_since + 1) / 1000, UTC))
    assert diagnose(young, [], [], {}, cluster).verdict == "never-produced"
    # a probed producer's ledger, complete since before the row, still speaks for its sessions
    probed = view(producer_ledger=LedgerView("pl", True, entries_for_topic=10, covers_topic_from_ms=PROBED_SINCE_MS))
    probed.partitions = {0: whole}
    probed.incarnation_since_ms, probed.incarnation_reason = known_since, why
    d = diagnose(ROW, [], [], {}, probed)
    assert d.verdict == "never-produced" and why in d.reason, d.reason


def test_a_v1_ack_from_before_the_topic_is_known_to_exist_is_not_broker_lost_at_an_offset_its_log_reuses() -> None:
    why = "tickets is known to exist only since 30 minutes ago"
    cluster = view(incarnation_since_ms=NOW_MS - 1800_000, incarnation_reason=why)
    d = diagnose(ROW, [], [acked(4)], {}, cluster)  # acked 58 minutes ago
    assert d.verdict == "unknown" and why in d.reason and "tickets/0@4" in d.reason, d.reason
    # acked after the topic's first record was written: the same log, truncated since
    later = view(incarnation_since_ms=NOW_MS - 3600_000, incarnation_reason=why)
    assert diagnose(ROW, [], [acked(4)], {}, later).verdict == "broker-lost"
    # a run's sighting is of a topic id the auditor read: the bound is not its to apply
    seen = KeyMemory(sightings={"TCK-7": KeySightings((Sighting(0, 4, NOW_MS - 3500_000, "run-1"),))})
    assert diagnose(ROW, [], [], {}, cluster, seen).verdict == "broker-lost"


def test_a_source_clock_ahead_of_kafkas_does_not_make_a_deleted_record_never_produced() -> None:
    """The database stamps rows 20 minutes ahead of the producers' and brokers' clocks: the row
    reads as created 30 minutes ago, its record was written 50 minutes ago and deleted since;
    the oldest record left was written 45 minutes ago."""
    stamped = datetime.fromtimestamp((NOW_MS - 1800_000) / 1000, UTC)
    row = StuckRow("TCK-7", "NEW", 1800.0, stamped, created=stamped)
    cluster = view(low=5, producer_ledger=LedgerView("pl", True, entries_for_topic=0))
    cluster.partitions[0] = PartitionState(0, 5, 10, 10, NOW_MS - 2700_000, leader_epoch=0)
    assert diagnose(row, [], [], {}, cluster).verdict == "never-produced"  # the clocks not compared
    cluster.source_clock_ahead_ms = 1200_000
    d = diagnose(row, [], [], {}, cluster)
    assert d.verdict == "unknown" and "no longer holds records that old" in d.reason, d.reason
    assert d.evidence["source_clock_ahead_ms"] == 1200_000
    # a source clock behind the auditor's: its rows are judged by their own time, none earlier
    cluster.source_clock_ahead_ms = -1200_000
    assert diagnose(row, [], [], {}, cluster).verdict == "never-produced"


def test_the_ledger_s_silence_does_not_speak_for_a_session_whose_audit_ids_are_not_the_binding_s_keys() -> None:
    # Stop 70's review: a binding keyed by a value field over records keyed otherwise, produced
    # by a probe without key_fn. The ledger names the record keys, never a stuck item's key;
    # the row's record went with retention (the oldest remaining record is younger than the row).
    def deleted_before_the_row(**extra: object) -> ClusterView:
        cluster = view(
            low=5,
            record_key="json:$.ticket_id",
            producer_ledger=LedgerView(
                "pl", True, complete_since_ms=0, entries_for_topic=3, covers_topic_from_ms=PROBED_SINCE_MS
            ),
            **extra,
        )
        cluster.partitions[0] = PartitionState(0, 5, 10, 10, NOW_MS - 60_000)
        return cluster

    # every record read carries its binding key as its audit id: the ledger speaks for it
    assert diagnose(ROW, [], [], {}, deleted_before_the_row()).verdict == "never-produced"
    # a record read whose audit id is not its binding key (written a minute ago by session s9)
    cluster = deleted_before_the_row(miskeyed_record_ms=NOW_MS - 60_000, miskeyed_session="s9")
    d = diagnose(ROW, [], [], {}, cluster)
    assert d.verdict == "unknown", d.reason
    assert "audit id is not their key by the binding's record_key json:$.ticket_id" in d.reason
    assert "producer session s9" in d.reason and "no ledger evidence for this key" in d.reason
    assert d.evidence["miskeyed_record"] == {"ts": ms_to_iso(NOW_MS - 60_000), "session": "s9"}
    # where the topic still holds everything since the row was created, the topic decides
    # (its leaders did not change): never produced, the ledger's silence not counted
    whole = deleted_before_the_row(miskeyed_record_ms=NOW_MS - 60_000, miskeyed_session="s9")
    whole.partitions = {0: PartitionState(0, 0, 10, 10, leader_epoch=0)}
    d = diagnose(ROW, [], [], {}, whole)
    assert d.verdict == "never-produced" and "audit id is not their key" in d.reason, d.reason
    # ... and a leader change since leaves nothing to decide by
    whole.partitions = {0: PartitionState(0, 0, 10, 10, leader_epoch=2, leader_since_ms=NOW_MS - 1800_000)}
    d = diagnose(ROW, [], [], {}, whole)
    assert d.verdict == "unknown" and "tickets/0 has changed leader" in d.reason, d.reason


def test_an_ack_whose_session_the_unread_clients_topic_may_show_transactional_is_unknown() -> None:
    # Stop 70's review: the record at offset 4 is gone (log start 8) and a run saw the group pass
    # it in the log: skipped, were it committed. The clients topic, which says a v1 session is
    # transactional (its aborted records are acked too), could not be read.
    cluster = view(low=8, high=10, committed=10, offsets_retention_minutes=7 * 24 * 60)
    cluster.groups["g"].seen = _seen((0, 6))
    assert diagnose(ROW, [], [acked(4)], {}, cluster).verdict == "skipped"
    unread = "the clients topic _audit.clients could not be read (KafkaError{code=TOPIC_AUTHORIZATION_FAILED})"
    cluster.clients_unread = unread
    d = diagnose(ROW, [], [acked(4)], {}, cluster)
    assert d.verdict == "unknown", d.reason
    assert unread in d.reason and "whether the session is transactional" in d.reason
    assert d.evidence["clients_unread"] == unread
    # the same for an ack the log still covers (else broker-lost)
    covered = view(clients_unread=unread)
    d = diagnose(ROW, [], [acked(4)], {}, covered)
    assert d.verdict == "unknown" and unread in d.reason, d.reason
    # a run that read the record committed there settles it
    seen = KeyMemory(sightings={"TCK-7": KeySightings((Sighting(0, 4, NOW_MS - 3500_000, "run-1"),))})
    assert diagnose(ROW, [], [acked(4)], {}, covered, seen).verdict == "broker-lost"
