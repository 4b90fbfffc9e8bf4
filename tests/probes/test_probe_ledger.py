"""Pure ledger analysis: summaries, sequence gaps, duplicates, reprocessing."""

from __future__ import annotations

from auditor.probes import (
    ConsumerBatch,
    ConsumerEntry,
    HeaderProblems,
    LedgerDecodeError,
    ProducerBatch,
    ProducerEntry,
    SeenRecord,
    SequenceGap,
    SessionEnd,
    SessionStart,
    decode_ledger_record,
    encode_producer_batch,
    find_duplicate_sequences,
    find_reprocessed,
    find_sequence_gaps,
    processed_offsets,
    seen_record_from_message,
    summarize_consumer_ledger,
    summarize_producer_ledger,
)

P1 = "1" * 32
P2 = "2" * 32


def acked(seq: int, partition: int = 0, offset: int | None = None) -> ProducerEntry:
    return ProducerEntry(seq, "acked", partition, seq if offset is None else offset, None, "persisted", f"id-{seq}", 1)


def failed(seq: int, persisted: str = "not") -> ProducerEntry:
    return ProducerEntry(seq, "failed", -1, -1, "_MSG_TIMED_OUT: Local: Message timed out", persisted, f"id-{seq}", 1)


def batch(pid: str, *entries: ProducerEntry, topic: str = "t") -> ProducerBatch:
    return ProducerBatch(pid, "app", topic, tuple(entries))


def seen(pid: str, seqs: range | list[int], topic: str = "t") -> list[SeenRecord]:
    return [SeenRecord(pid, topic, seq, 0, seq) for seq in seqs]


def test_it_summarizes_each_session() -> None:
    ledger = summarize_producer_ledger(
        [
            SessionStart("producer", P1, "app", 100, "host"),
            batch(P1, acked(0), acked(1), failed(2)),
            batch(P1, acked(3, partition=1, offset=0), topic="u"),
            SessionEnd("producer", P1, 200, {"t": 4, "u": 3}),
            LedgerDecodeError("junk"),
            ConsumerBatch("s", "g", (ConsumerEntry("t", 0, 0, None, 1),)),
        ]
    )
    session = ledger[P1]
    assert (session.client_id, session.host, session.started_ms, session.ended) == ("app", "host", 100, True)
    assert session.last_seq("t") == 4 and session.last_seq("u") == 3 and session.last_seq("other") == -1
    assert session.topics["t"].acked == {0: (0, 0), 1: (0, 1)}
    assert session.topics["t"].failed_seqs == {2}
    assert session.topics["u"].acked_seqs == {3}


def test_it_reads_encoded_batches_too() -> None:
    rows = [(0, "acked", 0, 10, None, "persisted", "a", 1), (1, "failed", -1, -1, "x", "possibly", "b", 2)]
    records = [decode_ledger_record(raw) for raw in encode_producer_batch(P1, "app", "t", rows)]
    session = summarize_producer_ledger(records)[P1]
    assert session.topics["t"].acked == {0: (0, 10)}
    assert session.topics["t"].failed[1].persisted == "possibly"
    assert not session.ended


def test_it_prefers_acked_when_merged_ledgers_disagree() -> None:
    session = summarize_producer_ledger([batch(P1, failed(0)), batch(P1, acked(0))])[P1]
    assert session.topics["t"].acked_seqs == {0} and not session.topics["t"].failed


def test_it_finds_no_gap_when_everything_arrived() -> None:
    ledger = summarize_producer_ledger(
        [batch(P1, *(acked(s) for s in range(5))), SessionEnd("producer", P1, 1, {"t": 4})]
    )
    assert find_sequence_gaps(seen(P1, range(5)), ledger) == []


def test_it_reports_acked_but_missing_sequences_as_ranges() -> None:
    ledger = summarize_producer_ledger([batch(P1, *(acked(s) for s in range(10)))])
    gaps = find_sequence_gaps(seen(P1, [0, 1, 4, 5, 6, 9]), ledger)
    assert gaps == [SequenceGap(P1, "t", 2, 3, "acked-not-seen"), SequenceGap(P1, "t", 7, 8, "acked-not-seen")]
    assert [g.count for g in gaps] == [2, 2]


def test_it_explains_failed_sends_instead_of_calling_them_gaps() -> None:
    ledger = summarize_producer_ledger([batch(P1, acked(0), failed(1), acked(2))])
    assert find_sequence_gaps(seen(P1, [0, 2]), ledger) == []
    assert find_sequence_gaps(seen(P1, [0, 2]), ledger, include_failed=True) == [SequenceGap(P1, "t", 1, 1, "failed")]


def test_it_reports_unledgered_holes_inside_the_ledgered_range() -> None:
    ledger = summarize_producer_ledger([batch(P1, acked(0), acked(3)), SessionEnd("producer", P1, 1, {"t": 3})])
    assert find_sequence_gaps(seen(P1, [0, 3]), ledger) == [SequenceGap(P1, "t", 1, 2, "unledgered")]


def test_it_never_reports_a_gap_past_the_last_ledgered_sequence() -> None:
    # A crashed session: batches for 0..4 were flushed, records 5..9 reached the
    # topic but their ledger tail was lost, and 10..12 were never seen at all.
    ledger = summarize_producer_ledger([SessionStart("producer", P1, "app", 1, None), batch(P1, *map(acked, range(5)))])
    assert not ledger[P1].ended
    assert find_sequence_gaps(seen(P1, range(10)), ledger) == []
    assert find_sequence_gaps(seen(P1, range(3)), ledger) == [SequenceGap(P1, "t", 3, 4, "acked-not-seen")]
    # A session that never ledgered anything is never accountable.
    empty = summarize_producer_ledger([SessionStart("producer", P2, "app", 1, None)])
    assert find_sequence_gaps(seen(P2, [5, 9]), empty) == []


def test_it_keeps_restarted_sessions_apart() -> None:
    ledger = summarize_producer_ledger(
        [
            batch(P1, *map(acked, range(3))),
            SessionEnd("producer", P1, 1, {"t": 2}),
            batch(P2, *(acked(s, offset=3 + s) for s in range(3))),
            SessionEnd("producer", P2, 2, {"t": 2}),
        ]
    )
    records = seen(P1, range(3)) + [SeenRecord(P2, "t", s, 0, 3 + s) for s in range(3)]
    assert find_sequence_gaps(records, ledger) == []
    assert find_duplicate_sequences(records) == []
    assert find_sequence_gaps(records[:3], ledger) == [SequenceGap(P2, "t", 0, 2, "acked-not-seen")]


def test_it_finds_duplicates_at_different_offsets_only() -> None:
    records = [SeenRecord(P1, "t", 0, 0, 0), SeenRecord(P1, "t", 0, 0, 0), SeenRecord(P1, "t", 1, 0, 1)]
    assert find_duplicate_sequences(records) == []
    records.append(SeenRecord(P1, "t", 1, 0, 2))
    [duplicate] = find_duplicate_sequences(records)
    assert (duplicate.seq, duplicate.locations) == (1, ((0, 1), (0, 2)))


def test_it_builds_seen_records_from_headers_and_skips_bad_ones() -> None:
    headers = [("audit-id", b"x"), ("audit-pid", P1.encode()), ("audit-seq", b"4"), ("audit-ts", b"1")]
    assert seen_record_from_message("t", 2, 9, headers) == SeenRecord(P1, "t", 4, 2, 9)
    assert seen_record_from_message("t", 2, 9, None) is None
    assert seen_record_from_message("t", 2, 9, headers[:3]) is None


def test_it_summarizes_consumer_sessions_and_finds_reprocessing() -> None:
    records = [
        SessionStart("consumer", "s1", "app", 1, "h", group="g"),
        ConsumerBatch("s1", "g", (ConsumerEntry("t", 0, 0, "a", 1), ConsumerEntry("t", 0, 1, "b", 1))),
        SessionEnd("consumer", "s1", 2, group="g"),
        SessionStart("consumer", "s2", "app", 3, "h", group="g"),
        ConsumerBatch("s2", "g", (ConsumerEntry("t", 0, 1, "b", 4), ConsumerEntry("t", 0, 2, "c", 4))),
        ConsumerBatch("s3", "other", (ConsumerEntry("t", 0, 0, "a", 5),)),
    ]
    sessions = summarize_consumer_ledger(records)
    assert sessions["s1"].ended and not sessions["s2"].ended
    assert sessions["s1"].processed == {("t", 0, 0), ("t", 0, 1)}
    [again] = find_reprocessed(records)
    assert (again.group, again.offset, again.times, again.sessions) == ("g", 1, 2, ("s1", "s2"))
    assert processed_offsets(records, group="g") == {("t", 0, 0), ("t", 0, 1), ("t", 0, 2)}
    assert processed_offsets(records) == processed_offsets(records, group="g")


def unconfirmed(seq: int, partition: int = 0) -> ProducerEntry:
    return ProducerEntry(seq, "unconfirmed", partition, -1, None, "possibly", f"id-{seq}", 1)


def test_it_reports_absent_acks_0_sends_as_unconfirmed_never_as_acked() -> None:
    legacy = ProducerEntry(3, "acked", 0, -1001, None, "persisted", "id-3", 1)  # acks=0 as older probes wrote it
    ledger = summarize_producer_ledger(
        [batch(P1, acked(0), unconfirmed(1), unconfirmed(2), legacy, acked(4, offset=-1), unconfirmed(5))]
    )
    topic = ledger[P1].topics["t"]
    assert sorted(topic.unconfirmed) == [1, 2, 3, 4, 5] and sorted(topic.acked) == [0]
    assert find_sequence_gaps(seen(P1, [0, 1, 5]), ledger) == [SequenceGap(P1, "t", 2, 4, "unconfirmed-not-seen")]


def test_it_ranks_merged_entries_acked_then_unconfirmed_then_failed() -> None:
    ledger = summarize_producer_ledger(
        [batch(P1, failed(0), unconfirmed(1), acked(2)), batch(P1, unconfirmed(0), failed(1), unconfirmed(2))]
    )
    topic = ledger[P1].topics["t"]
    assert (sorted(topic.acked), sorted(topic.unconfirmed), sorted(topic.failed)) == ([2], [0, 1], [])


def test_it_keeps_where_a_consumer_session_ended_from_its_latest_session_end() -> None:
    sid = "c" * 32
    sessions = summarize_consumer_ledger(
        [
            SessionEnd("consumer", sid, 20, group="g", last_offset={"t": {0: 9, 1: 4}},
                       header_problems={"t": HeaderProblems(2, 1)}),
            SessionEnd("consumer", sid, 10, group="g", last_offset={"t": {0: 3}}),  # an older checkpoint, read late
        ]
    )  # fmt: skip
    assert sessions[sid].ended_ms == 20
    assert sessions[sid].last_offset == {("t", 0): 9, ("t", 1): 4}
    assert sessions[sid].header_problems == {"t": HeaderProblems(missing=2, malformed=1)}
