"""The canary's accounting, without Kafka: fixed session, partitions and clock values."""

from __future__ import annotations

import pytest

from auditor.canary.accounting import CanaryAccounting
from auditor.canary.latency import LatencyDigest
from auditor.canary.payload import CanaryRecord, decode_record, encode_record

SESSION = "a" * 32
SLA_MS = 2000.0


def send(accounting: CanaryAccounting, partition: int, at_ms: float, acked: bool = True) -> CanaryRecord:
    """Send a record; by default the broker acknowledges it at once (the healthy case)."""
    record = accounting.next_record(partition, at_ms)
    accounting.record_sent(record)
    if acked:
        accounting.record_acked(partition, record.seq, at_ms)
    return record


def counts(accounting: CanaryAccounting, partition: int) -> dict[str, object]:
    return accounting.report()["partitions"][str(partition)]  # type: ignore[index]


@pytest.fixture
def accounting() -> CanaryAccounting:
    return CanaryAccounting(SESSION, [0, 1], sla_ms=SLA_MS)


def test_it_numbers_each_partition_from_zero_without_gaps(accounting):
    seqs = [send(accounting, 0, 1000 + i).seq for i in range(3)]
    assert seqs == [0, 1, 2]
    assert send(accounting, 1, 1000).seq == 0


def test_it_counts_records_received_in_order(accounting):
    records = [send(accounting, 0, 1000 + i) for i in range(5)]
    for record in records:
        accounting.record_received(record, 0, 1010 + record.seq)
    result = counts(accounting, 0)
    assert (result["sent"], result["received"], result["lost"], result["duplicated"], result["out_of_order"]) == (
        5,
        5,
        0,
        0,
        0,
    )
    assert result["pending"] == 0


def test_it_counts_a_second_copy_as_a_duplicate_not_a_receipt(accounting):
    record = send(accounting, 0, 1000)
    accounting.record_received(record, 0, 1005)
    accounting.record_received(record, 0, 1006)
    accounting.record_received(record, 0, 1007)
    result = counts(accounting, 0)
    assert result["received"] == 1
    assert result["duplicated"] == 2
    assert result["out_of_order"] == 0


def test_it_counts_a_lower_sequence_after_a_higher_one_as_out_of_order(accounting):
    first, second, third = (send(accounting, 0, 1000 + i) for i in range(3))
    accounting.record_received(first, 0, 1010)
    accounting.record_received(third, 0, 1011)
    accounting.record_received(second, 0, 1012)
    result = counts(accounting, 0)
    assert result["received"] == 3
    assert result["out_of_order"] == 1
    assert result["duplicated"] == 0


def test_it_declares_a_loss_only_after_the_sla(accounting):
    send(accounting, 0, 1000)
    send(accounting, 0, 1500)
    assert accounting.expire(1000 + SLA_MS) == 0  # exactly at the SLA: still in time
    assert counts(accounting, 0)["lost"] == 0
    assert accounting.expire(1000 + SLA_MS + 1) == 1
    result = counts(accounting, 0)
    assert (result["lost"], result["pending"]) == (1, 1)
    assert accounting.expire(1500 + SLA_MS + 1) == 1
    assert counts(accounting, 0)["lost"] == 2


def test_it_never_declares_a_record_received_within_the_sla_lost(accounting):
    record = send(accounting, 0, 1000)
    accounting.record_received(record, 0, 1000 + SLA_MS - 1)
    accounting.expire(1000 + 10 * SLA_MS)
    assert counts(accounting, 0)["lost"] == 0


def test_it_counts_a_record_after_its_sla_as_late_then_further_copies_as_duplicates(accounting):
    record = send(accounting, 0, 1000)
    accounting.expire(1000 + SLA_MS + 1)
    accounting.record_received(record, 0, 1000 + SLA_MS + 50)
    result = counts(accounting, 0)
    assert (result["lost"], result["late"], result["received"], result["duplicated"]) == (1, 1, 0, 0)
    accounting.record_received(record, 0, 1000 + SLA_MS + 60)
    assert counts(accounting, 0)["duplicated"] == 1


def test_it_declares_an_acknowledged_record_not_read_within_the_sla_lost(accounting):
    record = send(accounting, 0, 1000, acked=False)
    accounting.record_acked(0, record.seq, 1005)
    assert accounting.expire(1005 + SLA_MS) == 0
    assert accounting.expire(1005 + SLA_MS + 1) == 1
    result = counts(accounting, 0)
    assert (result["lost"], result["received"], result["produce_errors"], result["pending"]) == (1, 0, 0, 0)


def test_it_counts_a_failed_delivery_as_a_produce_error_never_as_lost(accounting):
    failed = send(accounting, 0, 1000, acked=False)
    kept = send(accounting, 0, 1001, acked=False)
    accounting.record_produce_error(0, failed.seq)
    accounting.record_acked(0, kept.seq, 1002)
    accounting.record_received(kept, 0, 1010)
    assert accounting.expire(1000 + 100 * SLA_MS) == 0
    result = counts(accounting, 0)
    assert (result["sent"], result["produce_errors"], result["lost"], result["received"]) == (2, 1, 0, 1)
    assert (result["pending"], result["unacked"]) == (0, 0)  # no longer expected


def test_it_counts_a_copy_of_a_failed_record_read_anyway_as_received_not_lost_or_late(accounting):
    record = send(accounting, 0, 1000, acked=False)
    accounting.record_produce_error(0, record.seq)  # e.g. timed out, yet written
    accounting.expire(1000 + 10 * SLA_MS)
    accounting.record_received(record, 0, 1000 + 10 * SLA_MS + 1)
    accounting.record_received(record, 0, 1000 + 10 * SLA_MS + 2)
    result = counts(accounting, 0)
    assert (result["produce_errors"], result["received"], result["duplicated"]) == (1, 1, 1)
    assert (result["lost"], result["late"]) == (0, 0)


def test_it_never_declares_a_record_without_a_delivery_report_lost(accounting):
    record = send(accounting, 0, 1000, acked=False)
    assert accounting.expire(1000 + SLA_MS + 1) == 0
    assert accounting.expire(1000 + 50 * SLA_MS) == 0
    result = counts(accounting, 0)
    assert (result["lost"], result["pending"]) == (0, 1)
    assert result["unacked"] == 1  # counted once, when its SLA ran out
    assert record.seq == 0


def test_it_declares_a_record_acknowledged_after_its_sla_lost_if_still_unread_an_sla_after_the_ack(accounting):
    record = send(accounting, 0, 1000, acked=False)
    accounting.expire(1000 + 3 * SLA_MS)
    assert counts(accounting, 0)["lost"] == 0
    acked_ms = 1000 + 3 * SLA_MS + 10  # the partition had a leader again
    accounting.record_acked(0, record.seq, acked_ms)
    # The consumer gets the SLA to read what was held back and acknowledged all at once.
    assert accounting.expire(acked_ms + 1) == 0
    assert accounting.expire(acked_ms + SLA_MS) == 0
    assert accounting.expire(acked_ms + SLA_MS + 1) == 1
    result = counts(accounting, 0)
    assert (result["lost"], result["unacked"], result["pending"]) == (1, 1, 0)


def test_it_counts_a_record_acknowledged_late_and_read_in_time_as_received(accounting):
    record = send(accounting, 0, 1000, acked=False)
    accounting.expire(1000 + 3 * SLA_MS)
    accounting.record_acked(0, record.seq, 1000 + 3 * SLA_MS + 10)
    accounting.record_received(record, 0, 1000 + 3 * SLA_MS + 50)
    accounting.expire(1000 + 10 * SLA_MS)
    result = counts(accounting, 0)
    assert (result["received"], result["lost"], result["late"], result["unacked"]) == (1, 0, 0, 1)
    assert result["max_ms"] == pytest.approx(3 * SLA_MS + 50, rel=0.01)  # latency runs from the send


def test_it_counts_an_acknowledged_record_that_is_read_as_received(accounting):
    record = send(accounting, 0, 1000, acked=False)
    accounting.record_acked(0, record.seq, 1004)
    accounting.record_received(record, 0, 1020)
    accounting.expire(1000 + 10 * SLA_MS)
    result = counts(accounting, 0)
    assert (result["received"], result["lost"], result["pending"], result["p50_ms"]) == (1, 0, 0, 20)


def test_it_counts_a_record_read_before_its_delivery_report_as_received(accounting):
    record = send(accounting, 0, 1000, acked=False)
    accounting.record_received(record, 0, 1003)  # the consumer beat the producer's poll
    accounting.record_acked(0, record.seq, 1005)
    accounting.expire(1000 + 10 * SLA_MS)
    result = counts(accounting, 0)
    assert (result["received"], result["lost"], result["duplicated"], result["pending"]) == (1, 0, 0, 0)


def test_it_reports_records_in_flight_at_the_end_as_pending_not_lost(accounting):
    send(accounting, 0, 1000)
    send(accounting, 1, 1000)
    accounting.expire(1000 + SLA_MS)
    report = accounting.report()
    assert report["totals"]["lost"] == 0  # type: ignore[index]
    assert report["totals"]["pending"] == 2  # type: ignore[index]


def test_it_ignores_records_of_other_sessions(accounting):
    send(accounting, 0, 1000)
    earlier_run = CanaryRecord("b" * 32, 0, 0, 900)
    accounting.record_received(earlier_run, 0, 1001)
    accounting.record_received(earlier_run, 0, 1002)
    result = counts(accounting, 0)
    assert (result["received"], result["duplicated"], result["pending"]) == (0, 0, 1)
    assert accounting.report()["totals"]["other_sessions"] == 2  # type: ignore[index]


def test_it_counts_unreadable_records_and_sequences_never_sent_as_invalid(accounting):
    send(accounting, 0, 1000)
    accounting.record_received(None, 0, 1001)
    accounting.record_received(CanaryRecord(SESSION, 0, 7, 1000), 0, 1001)  # seq 7 was never sent
    accounting.record_received(CanaryRecord(SESSION, 1, 0, 1000), 0, 1001)  # names another partition
    assert accounting.report()["totals"]["invalid"] == 3  # type: ignore[index]
    assert counts(accounting, 0)["received"] == 0


def test_it_computes_latency_percentiles_from_send_to_receipt(accounting):
    for latency in range(1, 101):  # 1..100 ms
        record = send(accounting, 0, 10_000 + latency * 1000)
        accounting.record_received(record, 0, record.sent_ms + latency)
    result = counts(accounting, 0)
    assert (result["p50_ms"], result["p99_ms"], result["max_ms"]) == (50, 99, 100)
    assert counts(accounting, 1)["p99_ms"] is None  # nothing received: no latency, not zero


def test_it_attributes_counts_to_the_window_in_which_they_were_observed(accounting):
    record = send(accounting, 0, 1000)
    send(accounting, 0, 1100)
    first = accounting.close_window()
    assert (first[0].sent, first[0].received) == (2, 0)
    accounting.record_received(record, 0, 1200)
    accounting.expire(1100 + SLA_MS + 1)
    second = accounting.close_window()
    assert (second[0].sent, second[0].received, second[0].lost) == (0, 1, 1)
    assert second[0].latency.summary()["max_ms"] == 200
    assert accounting.close_window()[0].sent == 0
    total = counts(accounting, 0)
    assert (total["sent"], total["received"], total["lost"]) == (2, 1, 1)


def test_it_accepts_partitions_added_while_running(accounting):
    accounting.add_partition(2)
    record = send(accounting, 2, 1000)
    accounting.record_received(record, 2, 1001)
    assert counts(accounting, 2)["received"] == 1


def test_it_rejects_a_non_positive_sla():
    with pytest.raises(ValueError, match="SLA"):
        CanaryAccounting(SESSION, [0], sla_ms=0)


def test_it_round_trips_the_payload_and_rejects_foreign_values():
    record = CanaryRecord(SESSION, 3, 41, 1718000000123.456)
    assert decode_record(encode_record(record)) == record
    for foreign in (
        None,
        b"",
        b"not json",
        b"[]",
        b'{"v":2,"session":"x","partition":0,"seq":0,"ts":1}',
        b'{"v":1,"session":"x","partition":-1,"seq":0,"ts":1}',
        b'{"v":1,"session":"x","partition":0,"seq":true,"ts":1}',
        b'{"v":1,"partition":0,"seq":0,"ts":1}',
        b"\xff\xfe",
    ):
        assert decode_record(foreign) is None


def test_it_keeps_latency_percentiles_close_in_bounded_memory():
    digest = LatencyDigest()
    values = [0.001 * i for i in range(1, 200_001)]  # 0.001 .. 200 ms
    for value in values:
        digest.add(value)
    assert len(digest._counts) < 3000
    exact_p99 = values[int(0.99 * len(values)) - 1]
    assert digest.percentile(99) == pytest.approx(exact_p99, rel=0.005)
    assert digest.max_ms == 200.0


def test_it_never_reports_a_percentile_above_the_maximum():
    from auditor.canary.latency import LatencyDigest

    digest = LatencyDigest()
    digest.add(12.36)  # its 3-digit bucket, 12.4, lies above the value itself
    assert digest.summary() == {"p50_ms": 12.36, "p99_ms": 12.36, "max_ms": 12.36}


def test_it_counts_a_loss_under_the_leader_the_record_was_sent_to(accounting):
    # Broker 1 led when these were sent and acknowledged them, then died; broker 2 leads
    # when their SLA runs out. The loss is broker 1's; read records count for nobody.
    sent_to_1 = []
    for i in range(3):
        record = accounting.next_record(0, 1000 + i)
        accounting.record_sent(record, leader=1)
        accounting.record_acked(0, record.seq, record.sent_ms)
        sent_to_1.append(record)
    accounting.record_received(sent_to_1[0], 0, 1010)
    after = accounting.next_record(0, 1500)
    accounting.record_sent(after, leader=2)
    accounting.record_acked(0, after.seq, 1500)
    unknown = accounting.next_record(0, 1600)
    accounting.record_sent(unknown)  # no leader known: lost, but under no broker
    accounting.record_acked(0, unknown.seq, 1600)
    accounting.record_received(after, 0, 1520)

    assert accounting.expire(1000 + SLA_MS + 1000) == 3
    window = accounting.close_window()[0]
    assert (window.lost, window.lost_by_leader) == (3, {1: 2})
    assert accounting.totals()[0].lost_by_leader == {1: 2}
    assert accounting.close_window()[0].lost_by_leader == {}


def test_records_read_at_offsets_that_later_hold_other_records_are_truncated(accounting):
    # Offsets 10-14 hold seqs 0-4, read; an unclean election cuts the log at 12 and the
    # producer's next records (5, 6) land at 12 and 13.
    records = [send(accounting, 0, 1000 + i) for i in range(7)]
    for offset, record in zip(range(10, 15), records[:5], strict=True):
        accounting.record_received(record, 0, 1100, offset=offset)
    accounting.record_received(records[5], 0, 1200, offset=12)
    accounting.record_received(records[6], 0, 1201, offset=13)
    result = counts(accounting, 0)
    assert (result["received"], result["truncated"], result["lost"], result["duplicated"]) == (7, 3, 0, 0)
    assert accounting.report()["totals"]["truncated"] == 3  # type: ignore[index]
    assert accounting.close_window()[0].truncated == 3


def test_a_record_read_again_at_its_own_offset_is_no_truncation(accounting):
    records = [send(accounting, 0, 1000 + i) for i in range(3)]
    for offset, record in enumerate(records):
        accounting.record_received(record, 0, 1100, offset=offset)
    for offset, record in enumerate(records):  # the consumer went back (reset to the log start)
        accounting.record_received(record, 0, 1200, offset=offset)
    result = counts(accounting, 0)
    assert (result["truncated"], result["duplicated"]) == (0, 3)


@pytest.mark.parametrize("occupant", ["another-session", "not-a-canary-record"])
def test_a_cut_is_seen_whoever_wrote_the_record_now_at_the_offset(accounting, occupant):
    records = [send(accounting, 0, 1000 + i) for i in range(2)]
    for offset, record in enumerate(records):
        accounting.record_received(record, 0, 1100, offset=offset)
    other = CanaryRecord("b" * 32, 0, 0, 1150) if occupant == "another-session" else None
    accounting.record_received(other, 0, 1200, offset=1)
    assert counts(accounting, 0)["truncated"] == 1


def test_without_offsets_nothing_is_compared(accounting):
    records = [send(accounting, 0, 1000 + i) for i in range(2)]
    accounting.record_received(records[0], 0, 1100)
    accounting.record_received(records[1], 0, 1100)
    assert counts(accounting, 0)["truncated"] == 0


def test_a_duplicated_record_cut_from_the_log_counts_once(accounting):
    first, second = send(accounting, 0, 1000), send(accounting, 0, 1001)
    accounting.record_received(first, 0, 1100, offset=0)
    accounting.record_received(first, 0, 1101, offset=1)  # the producer's retry wrote it twice
    accounting.record_received(second, 0, 1102, offset=2)
    accounting.record_received(CanaryRecord("b" * 32, 0, 0, 1150), 0, 1200, offset=0)  # cut at 0
    result = counts(accounting, 0)
    assert (result["truncated"], result["duplicated"]) == (2, 1)
