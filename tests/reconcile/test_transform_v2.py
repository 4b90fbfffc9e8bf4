"""The reconciliation transforms on records and ledgers of contract version 2 (one packed
`audit` header, range records), beside version-1 ones. Expected frames are written by hand
from the inputs, never computed by the code under test. Frames a run writes to its state are
materialized (localCheckpoint), as the next step reads them back: else every find_gaps parses
the ledger again, several times over."""

from __future__ import annotations

import json
import uuid
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from auditor.probes.headers import pack_audit_header
from spark_jobs.binding import RecordKeySpec
from spark_jobs.reconcile_transform import (
    CANDIDATE_SCHEMA,
    COMMITTED_SCHEMA,
    FINDING_SCHEMA,
    INTERVAL_SCHEMA,
    KAFKA_RAW_SCHEMA,
    LEDGER_BOUND_SCHEMA,
    LEDGER_ENTRY_SCHEMA,
    LOST_MARKS_SCHEMA,
    PROCESSED_INTERVAL_SCHEMA,
    PROCESSED_SCHEMA,
    RECORD_SCHEMA,
    WATERMARK_SCHEMA,
    acks_maybe_held,
    find_gaps,
    header_problem_counts,
    transform_consumer_ledger,
    transform_ledger_bounds,
    transform_ledger_open,
    transform_lost_marks,
    transform_producer_failures,
    transform_producer_ledger,
    transform_records,
    transform_seq_coverage,
    transform_unprocessed_candidates,
)
from spark_jobs.send_outcome import UNBOUNDED, judged_until_ms
from spark_jobs.watermark_hold import EVERY_ACK_MS
from tests.support.clock import at_second as at
from tests.support.clock import ms_at_second as ms
from tests.support.gaps import first_run_gap_inputs

SESSION = uuid.UUID("0123456789abcdef0123456789abcdef")
V1_PID = "fedcba9876543210fedcba9876543210"


def finding(kind: str, **values: Any) -> tuple[Any, ...]:
    return tuple(kind if name == "kind" else values.get(name) for name in FINDING_SCHEMA.fieldNames())


def ledger_values(spark: SparkSession, *messages: dict[str, Any]) -> DataFrame:
    rows = [
        (b"k", json.dumps(m, separators=(",", ":")).encode(), "_audit", 0, i, at(0), 0, [])
        for i, m in enumerate(messages)
    ]
    return spark.createDataFrame(rows, KAFKA_RAW_SCHEMA)


def test_it_reads_sessions_and_sequences_from_both_header_versions(spark: SparkSession) -> None:
    v2 = pack_audit_header(SESSION.bytes, 2**40 + 3, ms(1))
    v1 = [("audit-id", b"k"), ("audit-pid", V1_PID.encode()), ("audit-seq", b"7"), ("audit-ts", b"1700000000000")]

    def row(offset: int, headers: list[tuple[str, bytes | None]] | None) -> tuple[Any, ...]:
        return (b"k", b"{}", "t", 0, offset, at(offset), 0, headers)

    rows = [
        row(0, [("audit", v2)]),
        row(1, [("audit", v2 + b"business-id"), ("trace", b"x")]),  # an id that is not the key
        row(2, v1),
        row(3, [("audit", v2[:20])]),  # too short
        row(4, [("audit", b"\x03" + v2[1:])]),  # another version
        row(5, [("audit", v2), ("audit", pack_audit_header(SESSION.bytes, 9, 1))]),  # two values
        row(6, [*v1, ("audit", v2)]),  # v2 wins over v1 names
        row(7, None),
    ]
    parsed = transform_records(spark.createDataFrame(rows, KAFKA_RAW_SCHEMA), RecordKeySpec("key"))

    expected = spark.createDataFrame(
        [
            (0, SESSION.hex, 2**40 + 3, "ok"),
            (1, SESSION.hex, 2**40 + 3, "ok"),
            (2, V1_PID, 7, "ok"),
            (3, None, None, "malformed"),
            (4, None, None, "malformed"),
            (5, None, None, "malformed"),
            (6, SESSION.hex, 2**40 + 3, "ok"),
            (7, None, None, "missing"),
        ],
        "offset long, session string, seq long, header_status string",
    )
    assertDataFrameEqual(parsed.select("offset", "session", "seq", "header_status"), expected)
    counts = parsed.agg(*header_problem_counts()).collect()[0].asDict()
    assert counts == {"records_without_headers": 1, "records_malformed_headers": 3}


def test_it_attributes_gaps_of_v2_ranges_without_calling_an_unacked_send_broker_lost(spark: SparkSession) -> None:
    s = SESSION.hex
    # The topic holds seqs 0..3, 5 and 8 of the v2 session.
    topic_records = spark.createDataFrame(
        [(f"k{q}", 0, 10 + q, at(q), s, q) for q in (0, 1, 2, 3, 5, 8)], RECORD_SCHEMA
    )
    ranges = {"v": 2, "type": "ranges", "pid": s, "client_id": "app", "topic": "t"}
    raw = ledger_values(
        spark,
        # The tail 0..9 written unconfirmed first, then resolved: 0..5 acked, 6..7 in a failure's
        # window (unconfirmed), 8..9 acked.
        {**ranges, "entries": [[0, 9, "unconfirmed", ms(0), ms(9)]]},
        {**ranges, "entries": [[0, 5, "acked", ms(0), ms(5)], [6, 7, "unconfirmed", ms(0), ms(9)]]},
        {**ranges, "entries": [[8, 9, "acked", ms(8), ms(9)]]},
        {"v": 2, "type": "failures", "pid": s, "client_id": "app", "topic": "t",
         "entries": [[6, 9, 0, "MSG_SIZE_TOO_LARGE: too large", "not", "k7", ms(9)]]},
        {**ranges, "topic": "other", "entries": [[0, 50, "acked", ms(0), ms(9)]]},
        {"v": 1, "type": "session-end", "pid": s, "ts": ms(9), "last_seq": {"t": 9}},
    )  # fmt: skip
    coverage, ledger_open, bounds = first_run_gap_inputs(spark, raw, topic_records)
    assertDataFrameEqual(bounds, spark.createDataFrame([(s, 9, None)], LEDGER_BOUND_SCHEMA))
    watermarks = spark.createDataFrame([(0, 0, 20)], WATERMARK_SCHEMA)

    def gap(seq: int, cause: str, status: str, from_s: int) -> tuple[Any, ...]:
        return finding(
            "gap",
            cause=cause,
            timestamp=at(from_s),
            session=s,
            seq=seq,
            seq_end=seq,
            evidence=f'{{"count":1,"ledger":{{"status":"{status}","partition":-1,"offset":-1,"ts_ms":{ms(from_s)}}}}}',
        )

    actual = find_gaps(coverage, ledger_open, bounds, watermarks)
    expected = [
        gap(4, "broker-lost", "acked-range", 0),
        gap(6, "send-unconfirmed", "sent", 0),
        gap(7, "send-unconfirmed", "sent", 0),
        gap(9, "broker-lost", "acked-range", 8),
    ]
    assertDataFrameEqual(actual, spark.createDataFrame(expected, FINDING_SCHEMA))

    # A range that may have been produced before records were deleted unread is not judged.
    later = find_gaps(coverage, ledger_open, bounds, watermarks, unverifiable_until=at(4))
    assertDataFrameEqual(later, spark.createDataFrame(expected[1:], FINDING_SCHEMA))

    # 6..7 were last sent at 9 (the failure's window): a run judging sends only up to 8 leaves
    # them open (they may still be written), and they are no never-sent hole either; up to 9,
    # they are judged.
    in_flight = find_gaps(coverage, ledger_open, bounds, watermarks, sent_judged_until_ms=ms(8))
    assertDataFrameEqual(in_flight, spark.createDataFrame([expected[0], expected[3]], FINDING_SCHEMA))
    settled = find_gaps(coverage, ledger_open, bounds, watermarks, sent_judged_until_ms=ms(9))
    assertDataFrameEqual(settled, spark.createDataFrame(expected, FINDING_SCHEMA))
    # A producer that retries without limit (message.timeout.ms=0): no send is judged, ever.
    never = find_gaps(
        coverage, ledger_open, bounds, watermarks, sent_judged_until_ms=judged_until_ms(ms(10**6), UNBOUNDED)
    )
    assertDataFrameEqual(never, spark.createDataFrame([expected[0], expected[3]], FINDING_SCHEMA))

    # Failures are looked up by key (stuck items), never turned into sequence gaps.
    failures = transform_producer_failures(raw, "t").select("session", "seq", "status", "audit_id", "persisted")
    assertDataFrameEqual(
        failures,
        spark.createDataFrame([(s, 6, "failed", "k7", "not")], "session string, seq long, status string, "
                              "audit_id string, persisted string"),
    )  # fmt: skip


def test_it_reads_processed_marks_from_v1_entries_and_v2_ranges(spark: SparkSession) -> None:
    raw = ledger_values(
        spark,
        {"v": 1, "type": "processed", "sid": "c1", "group": "g", "entries": [["t", 0, 1, "k1", ms(1)]]},
        {
            "v": 2,
            "type": "processed-ranges",
            "sid": "c2",
            "group": "g",
            "entries": [["t", 0, 2, 4, ms(2), ms(3)], ["other", 0, 0, 9, ms(2), ms(3)], ["t", 1, 7, 7, ms(4), ms(4)]],
        },
        {"v": 2, "type": "processed-ranges", "sid": "c3", "group": "not-ours", "entries": [["t", 0, 0, 0, 1, 1]]},
    )
    actual = transform_consumer_ledger(raw, "t", ["g"])
    expected = spark.createDataFrame(
        [
            ("g", "c1", 0, 1, "k1", ms(1)),
            ("g", "c2", 0, 2, None, ms(2)),
            ("g", "c2", 0, 3, None, ms(2)),
            ("g", "c2", 0, 4, None, ms(2)),
            ("g", "c2", 1, 7, None, ms(4)),
        ],
        PROCESSED_SCHEMA,
    )
    assertDataFrameEqual(actual, expected)
    assert actual.where(F.col("offset").isNull()).count() == 0


def test_it_reads_marks_lost_ranges_of_the_topic_and_the_groups(spark: SparkSession) -> None:
    raw = ledger_values(
        spark,
        {
            "v": 2,
            "type": "marks-lost",
            "sid": "c1",
            "group": "g",
            "ts": ms(5),
            "reason": "Broker: Message size too large",
            "entries": [["t", 0, 2, 3], ["other", 0, 0, 9], ["t", 1, 7, 7], ["t", 0, 9, 8]],
        },
        {"v": 2, "type": "marks-lost", "sid": "c2", "group": "not-ours", "ts": ms(5), "entries": [["t", 0, 0, 0]]},
        {"v": 2, "type": "processed-ranges", "sid": "c1", "group": "g", "entries": [["t", 0, 0, 1, ms(1), ms(1)]]},
    )
    expected = spark.createDataFrame(
        [("g", 0, 2, 3, "Broker: Message size too large"), ("g", 1, 7, 7, "Broker: Message size too large")],
        LOST_MARKS_SCHEMA,
    )
    assertDataFrameEqual(transform_lost_marks(raw, "t", ["g"]), expected)


def test_offsets_whose_marks_were_lost_are_no_unprocessed_candidates_of_their_group(spark: SparkSession) -> None:
    """Old candidates and fresh records alike: a lost range read in a later run than the
    commit past it still takes them out; another group's candidates stay."""
    records = [(f"k{o}", 0, o, at(1), None, None) for o in range(5)]
    old = spark.createDataFrame([("g", *r) for r in records[:3]] + [("h", *records[2])], CANDIDATE_SCHEMA)
    fresh = spark.createDataFrame(records[3:], RECORD_SCHEMA)
    groups = spark.createDataFrame([("g",), ("h",)], "group string")
    coverage = spark.createDataFrame([("g", 0, 0, 0), ("h", 0, 0, 1)], PROCESSED_INTERVAL_SCHEMA)
    committed = spark.createDataFrame([("g", 0, 5, None), ("h", 0, 5, None)], COMMITTED_SCHEMA)
    lost = spark.createDataFrame([("g", 0, 2, 3)], PROCESSED_INTERVAL_SCHEMA)

    actual = transform_unprocessed_candidates(old, fresh, coverage, groups, committed, None, lost)

    expected = spark.createDataFrame(
        [("g", *records[1]), ("g", *records[4]), ("h", *records[2]), ("h", *records[3]), ("h", *records[4])],
        CANDIDATE_SCHEMA,
    )
    assertDataFrameEqual(actual, expected)


def test_it_names_the_key_of_a_v2_gap_from_the_keys_record_even_one_run_later(spark: SparkSession) -> None:
    s = SESSION.hex
    topic_records = spark.createDataFrame([(f"k{q}", 0, 10 + q, at(q), s, q) for q in (0, 1)], RECORD_SCHEMA)
    coverage = transform_seq_coverage(spark.createDataFrame([], INTERVAL_SCHEMA), topic_records).localCheckpoint()
    ranges = {"v": 2, "type": "ranges", "pid": s, "client_id": "app", "topic": "t"}
    keys = {"v": 2, "type": "keys", "pid": s, "client_id": "app", "topic": "t"}
    # Run 1 reads the tail (0..4 sent), the keys of 0..2 and an acked range 0..1.
    run1 = ledger_values(
        spark,
        {**ranges, "entries": [[0, 4, "unconfirmed", ms(0), ms(4)]]},
        {**keys, "entries": [[0, ["k0", "k1", "k2"], [ms(0), ms(1), ms(2)]]]},
        {**ranges, "entries": [[0, 1, "acked", ms(0), ms(5)]]},
        {**keys, "topic": "other", "entries": [[0, ["x0", "x1", "x2", "x3", "x4"], [ms(0)] * 5]]},
    )
    entries1, bounds1 = transform_producer_ledger(run1, "t")
    open1 = transform_ledger_open(spark.createDataFrame([], LEDGER_ENTRY_SCHEMA), entries1, coverage).localCheckpoint()
    # Run 2 reads the keys of 3..4 (4 has no key) and the acked range 2..4, which names none.
    run2 = ledger_values(
        spark,
        {**keys, "entries": [[3, ["k3", None], [ms(3), ms(4)]]]},
        {**ranges, "entries": [[2, 4, "acked", ms(4), ms(6)]]},
        {"v": 1, "type": "session-end", "pid": s, "ts": ms(9), "last_seq": {"t": 4}},
    )
    entries2, bounds2 = transform_producer_ledger(run2, "t")
    open2 = transform_ledger_open(open1, entries2, coverage).localCheckpoint()
    bounds = transform_ledger_bounds(bounds1, bounds2)
    assertDataFrameEqual(bounds, spark.createDataFrame([(s, 4, None)], LEDGER_BOUND_SCHEMA))

    # 2..4 acked and absent: 2 keeps the key (and time) of run 1's keys record, 3 takes run 2's,
    # 4 has none (its time is the range's start).
    actual = find_gaps(coverage, open2, bounds, spark.createDataFrame([(0, 0, 20)], WATERMARK_SCHEMA))
    assertDataFrameEqual(
        actual.select("key", "cause", "seq", "timestamp"),
        spark.createDataFrame(
            [("k2", "broker-lost", 2, at(2)), ("k3", "broker-lost", 3, at(3)), (None, "broker-lost", 4, at(4))],
            "key string, cause string, seq long, timestamp timestamp",
        ),
    )
    kept = open2.where(F.col("seq") == 2).select("status", "audit_id", "ts_ms", "to_ms").collect()
    assert [tuple(r) for r in kept] == [("acked-range", "k2", ms(2), ms(2))]


def test_it_reads_the_stamps_of_keys_entries_as_runs_and_as_one_per_id(spark: SparkSession) -> None:
    from spark_jobs.reconcile_transform import KEYED

    s = SESSION.hex
    keys = {"v": 2, "type": "keys", "pid": s, "client_id": "app", "topic": "t"}
    raw = ledger_values(
        spark,
        # Current probes: runs of equal stamps.
        {**keys, "entries": [[0, ["a0", "a1", None, "a3"], [[ms(1), 2], [ms(2), 1], [ms(3), 1]]]]},
        # Earlier probes: one stamp per id.
        {**keys, "entries": [[10, ["b10", "b11"], [ms(5), ms(6)]]]},
        {**keys, "topic": "other", "entries": [[0, ["x0"], [[ms(0), 1]]]]},
    )
    entries, _ = transform_producer_ledger(raw, "t")
    actual = entries.where(F.col("status") == KEYED).select("session", "seq", "audit_id", "ts_ms", "to_ms")
    assertDataFrameEqual(
        actual,
        spark.createDataFrame(
            [
                (s, 0, "a0", ms(1), ms(1)),
                (s, 1, "a1", ms(1), ms(1)),
                (s, 3, "a3", ms(3), ms(3)),
                (s, 10, "b10", ms(5), ms(5)),
                (s, 11, "b11", ms(6), ms(6)),
            ],
            "session string, seq long, audit_id string, ts_ms long, to_ms long",
        ),
    )


def test_a_reprocessed_v2_offset_takes_the_key_of_the_record_read(spark: SparkSession) -> None:
    from spark_jobs.reconcile_transform import (
        PROCESSED_INTERVAL_SCHEMA,
        REPROCESSED_SCHEMA,
        transform_reprocessed,
    )

    processed = spark.createDataFrame(
        [("g", "c1", 0, 11, None, ms(1)), ("g", "c2", 0, 11, None, ms(2)), ("g", "c2", 0, 12, None, ms(2))],
        PROCESSED_SCHEMA,
    )
    records = spark.createDataFrame([("TCK-11", 0, 11, at(1), None, None)], RECORD_SCHEMA)
    actual = transform_reprocessed(
        spark.createDataFrame([], REPROCESSED_SCHEMA),
        spark.createDataFrame([], PROCESSED_INTERVAL_SCHEMA),
        processed,
        records,
    )
    assert [(r["offset"], r["count"], r["audit_id"]) for r in actual.collect()] == [(11, 2, "TCK-11")]


def test_a_v2_ack_a_leader_may_still_hold_beyond_the_high_watermark_is_left_to_a_later_run(
    spark: SparkSession,
) -> None:
    s = SESSION.hex
    # The topic holds seq 0; 1 was acked at 1 and 2 at 6 (ranges), the keys naming k0..k2.
    topic_records = spark.createDataFrame([("k0", 0, 10, at(0), s, 0)], RECORD_SCHEMA)
    raw = ledger_values(
        spark,
        {"v": 2, "type": "ranges", "pid": s, "client_id": "app", "topic": "t",
         "entries": [[0, 1, "acked", ms(0), ms(1)], [2, 2, "acked", ms(6), ms(6)]]},
        {"v": 2, "type": "keys", "pid": s, "client_id": "app", "topic": "t",
         "entries": [[0, ["k0", "k1", "k2"], [[ms(0), 1], [ms(1), 1], [ms(6), 1]]]]},
    )  # fmt: skip
    coverage, ledger_open, bounds = first_run_gap_inputs(spark, raw, topic_records)
    watermarks = spark.createDataFrame([(0, 0, 20)], WATERMARK_SCHEMA)

    def lost(held: DataFrame | None = None) -> list[tuple[str, str, int]]:
        found = find_gaps(coverage, ledger_open, bounds, watermarks, held=held)
        return sorted((r.key, r.cause, r.seq) for r in found.collect())

    assert lost() == [("k1", "broker-lost", 1), ("k2", "broker-lost", 2)]
    # acks judged up to 5 (the run's read of the log ends, less the hold span and the clock
    # margin): the one at 6 may be of a record its leader still holds, neither lost nor a hole
    held = acks_maybe_held(ledger_open, ms(5))
    assertDataFrameEqual(held, spark.createDataFrame([("k2", s, 2)], "key string, session string, seq long"))
    assert lost(held) == [("k1", "broker-lost", 1)]
    assert lost(acks_maybe_held(ledger_open, ms(6))) == lost()
    # a partition under min.insync.replicas (or its in-sync replicas unread): every ack may be
    assert lost(acks_maybe_held(ledger_open, EVERY_ACK_MS)) == []


def test_a_v2_ack_is_held_from_when_its_ledger_record_reported_it_not_from_when_it_was_produced(
    spark: SparkSession,
) -> None:
    s = SESSION.hex
    # k1 was produced at 1 and acked only later (lingered, or retried through a failover): the
    # ranges record saying so was written at 8. Acks judged up to 5: it may still be held.
    topic_records = spark.createDataFrame([("k0", 0, 10, at(0), s, 0)], RECORD_SCHEMA)
    ranges = {"v": 2, "type": "ranges", "pid": s, "client_id": "app", "topic": "t",
              "entries": [[0, 1, "acked", ms(0), ms(1)]]}  # fmt: skip
    keys = {"v": 2, "type": "keys", "pid": s, "client_id": "app", "topic": "t",
            "entries": [[0, ["k0", "k1"], [[ms(0), 1], [ms(1), 1]]]]}  # fmt: skip
    raw = spark.createDataFrame(
        [
            (b"k", json.dumps(m, separators=(",", ":")).encode(), "_audit", 0, i, at(written), 0, [])
            for i, (m, written) in enumerate([(keys, 1), (ranges, 8)])
        ],
        KAFKA_RAW_SCHEMA,
    )
    coverage, ledger_open, bounds = first_run_gap_inputs(spark, raw, topic_records)
    watermarks = spark.createDataFrame([(0, 0, 20)], WATERMARK_SCHEMA)
    assert [(r.audit_id, r.to_ms, r.acked_by_ms) for r in ledger_open.collect()] == [("k1", ms(1), ms(8))]

    def lost(held: DataFrame | None = None) -> list[tuple[str, str, int]]:
        found = find_gaps(coverage, ledger_open, bounds, watermarks, held=held)
        return sorted((r.key, r.cause, r.seq) for r in found.collect())

    assert lost() == [("k1", "broker-lost", 1)]
    assert lost(acks_maybe_held(ledger_open, ms(5))) == []  # the old code: broker-lost, from to_ms 1
    assert lost(acks_maybe_held(ledger_open, ms(8))) == [("k1", "broker-lost", 1)]


def test_it_places_a_v2_failure_on_the_one_sequence_of_its_window_the_keys_name(spark: SparkSession) -> None:
    s = SESSION.hex
    # The topic holds seqs 0..1; 2..5 were one failure window (ledgered unconfirmed), in which
    # k3 failed once and k4 was sent twice (seqs 4 and 5) and failed once: which one failed is
    # not known, so that report stays unplaced.
    topic_records = spark.createDataFrame([(f"k{q}", 0, 10 + q, at(q), s, q) for q in (0, 1)], RECORD_SCHEMA)
    raw = ledger_values(
        spark,
        {"v": 2, "type": "ranges", "pid": s, "client_id": "app", "topic": "t",
         "entries": [[0, 1, "acked", ms(0), ms(1)], [2, 5, "unconfirmed", ms(2), ms(5)]]},
        {"v": 2, "type": "keys", "pid": s, "client_id": "app", "topic": "t",
         "entries": [[0, ["k0", "k1", "k2", "k3", "k4", "k4"], [[ms(0), 6]]]]},
        {"v": 2, "type": "failures", "pid": s, "client_id": "app", "topic": "t",
         "entries": [[2, 5, 0, "_MSG_TIMED_OUT: Local: Message timed out", "possibly", "k3", ms(7)],
                     [2, 5, 0, "_MSG_TIMED_OUT: Local: Message timed out", "possibly", "k4", ms(7)]]},
    )  # fmt: skip
    coverage, ledger_open, bounds = first_run_gap_inputs(spark, raw, topic_records, place_failures=True)
    actual = find_gaps(coverage, ledger_open, bounds, spark.createDataFrame([(0, 0, 20)], WATERMARK_SCHEMA))
    assertDataFrameEqual(
        actual.select("key", "cause", "seq"),
        spark.createDataFrame(
            [
                ("k2", "send-unconfirmed", 2),
                ("k3", "send-failed", 3),
                ("k4", "send-unconfirmed", 4),
                ("k4", "send-unconfirmed", 5),
            ],
            "key string, cause string, seq long",
        ),
    )
    # Without placing (the stuck engine looks failures up by key instead), all four are unconfirmed.
    unplaced, _ = transform_producer_ledger(raw, "t")
    open_unplaced = transform_ledger_open(spark.createDataFrame([], LEDGER_ENTRY_SCHEMA), unplaced, coverage)
    causes = find_gaps(coverage, open_unplaced, bounds, spark.createDataFrame([(0, 0, 20)], WATERMARK_SCHEMA))
    assert {r.cause for r in causes.collect()} == {"send-unconfirmed"}


def test_the_producer_ledger_speaks_from_its_sessions_first_entries_not_their_key_stamps(spark: SparkSession) -> None:
    """Where the stuck diagnosis's producer-ledger silence starts (the Spark engine; the
    Python engine's locate_python.ledger_covers_from reads the same fields): the earliest
    session-start of a session that ledgered records of the topic, else its first entry."""
    from spark_jobs.reconcile_parsing import producer_ledger_covers_from

    b, d, e, f = (uuid.uuid4().hex for _ in range(4))
    raw = ledger_values(
        spark,
        # b: no session-start read; its range starts at 5, its keys were stamped at 7.
        {"v": 2, "type": "ranges", "pid": b, "client_id": "app", "topic": "t", "entries": [[0, 1, "acked", ms(5), ms(6)]]},
        {"v": 2, "type": "keys", "pid": b, "client_id": "app", "topic": "t", "entries": [[0, ["b0", "b1"], [ms(7), ms(7)]]]},
        # d: started at 8, a version-1 entry at 9.
        {"v": 1, "type": "session-start", "pid": d, "client_id": "app", "ts": ms(8), "host": "h"},
        {"v": 1, "type": "batch", "pid": d, "topic": "t", "entries": [[0, "acked", 0, 3, None, "persisted", "d0", ms(9)]]},
        # e: started at 1, but ledgered only another topic; a consumer session started at 0.
        {"v": 1, "type": "session-start", "pid": e, "client_id": "app", "ts": ms(1), "host": "h"},
        {"v": 2, "type": "ranges", "pid": e, "client_id": "app", "topic": "other", "entries": [[0, 0, "acked", ms(1), ms(1)]]},
        {"v": 1, "type": "session-start", "sid": uuid.uuid4().hex, "group": "g", "ts": ms(0), "host": "h"},
        # f: a failure report at 6.
        {"v": 2, "type": "failures", "pid": f, "client_id": "app", "topic": "t", "entries": [[0, 0, -1, "err", "not", "f0", ms(6)]]},
    )  # fmt: skip
    assert producer_ledger_covers_from(raw, "t") == ms(5)
    assert producer_ledger_covers_from(raw, "nothing") is None


def test_a_replayed_v2_offset_takes_the_key_an_earlier_run_read_there(spark: SparkSession) -> None:
    """A group processed offsets 11-13, committed past them, then its offsets were reset back and
    it processed them again: this run read none of those records, and no candidate holds them.
    The key index (each key's first record) and the duplicates (every record of a key read
    twice) say which key was at each offset; a re-created topic's older entries do not."""
    from spark_jobs.reconcile_transform import (
        KEY_INDEX_SCHEMA,
        PROCESSED_INTERVAL_SCHEMA,
        REPROCESSED_SCHEMA,
        keyed_by_memory,
        transform_reprocessed,
    )

    marks = spark.createDataFrame([("g", "c2", 0, o, None, ms(9)) for o in (11, 12, 13, 14)], PROCESSED_SCHEMA)
    reprocessed = transform_reprocessed(
        spark.createDataFrame([("g", 0, 5, 2, ["c0"], "TCK-5", ms(0), ms(1))], REPROCESSED_SCHEMA),  # keyed before
        spark.createDataFrame([("g", 0, 0, 13)], PROCESSED_INTERVAL_SCHEMA),  # 0-13 processed before (inclusive)
        marks,
    )
    assert sorted((r["offset"], r["audit_id"]) for r in reprocessed.collect()) == [
        (5, "TCK-5"), (11, None), (12, None), (13, None),
    ]  # fmt: skip
    index = spark.createDataFrame(
        [("TCK-11", 1, 0, 11, at(3), None, None, "r1"), ("TCK-12", 2, 0, 12, at(3), None, None, "r1")],
        KEY_INDEX_SCHEMA,
    )
    duplicates = spark.createDataFrame(
        [
            ("TCK-12", 0, 12, at(3), None, None),
            ("TCK-12", 0, 30, at(8), None, None),
            ("TCK-13", 0, 13, at(3), None, None),
        ],
        RECORD_SCHEMA,
    )
    keyed = keyed_by_memory(reprocessed, marks, index, duplicates)
    assert sorted((r["offset"], r["count"], r["audit_id"]) for r in keyed.collect()) == [
        (5, 2, "TCK-5"), (11, 2, "TCK-11"), (12, 2, "TCK-12"), (13, 2, "TCK-13"),
    ]  # fmt: skip
    # entries stamped before the topic was created again are of the deleted topic's offsets
    since = keyed_by_memory(reprocessed, marks, index, duplicates, records_since_ms=ms(5))
    assert sorted((r["offset"], r["audit_id"]) for r in since.collect()) == [
        (5, "TCK-5"), (11, None), (12, None), (13, None),
    ]  # fmt: skip
    # two keys read at one offset (a rewrite): no guess
    other = spark.createDataFrame([("TCK-99", 0, 11, at(4), None, None)], RECORD_SCHEMA)
    guarded = keyed_by_memory(reprocessed, marks, index, duplicates.unionByName(other))
    assert dict((r["offset"], r["audit_id"]) for r in guarded.collect())[11] is None


def test_it_infers_no_hole_past_the_checkpoint_of_a_session_end_saying_a_ledger_record_was_lost(
    spark: SparkSession,
) -> None:
    """The topic holds seqs 0-1, 3-5 and 7-9 of a v2 session, ledgered acked; a session-end
    says a ledger record of the session was lost after its checkpoint at 4. The hole at 2 is
    below the checkpoint (every record before it was written): never-sent. The hole at 6 may
    have been named in the record lost: no finding. A session-end saying so without naming the
    topic leaves no hole of the session judged."""
    s = SESSION.hex
    held = (0, 1, 3, 4, 5, 7, 8, 9)
    topic_records = spark.createDataFrame([(f"k{q}", 0, 10 + q, at(q), s, q) for q in held], RECORD_SCHEMA)
    ranges = {"v": 2, "type": "ranges", "pid": s, "client_id": "app", "topic": "t"}
    acked = [[a, b, "acked", ms(a), ms(b)] for a, b in ((0, 1), (3, 5), (7, 9))]
    end = {"v": 1, "type": "session-end", "pid": s, "ts": ms(9), "last_seq": {"t": 4}, "ledger_lost": True}
    watermarks = spark.createDataFrame([(0, 0, 20)], WATERMARK_SCHEMA)

    coverage, ledger_open, bounds = first_run_gap_inputs(
        spark, ledger_values(spark, {**ranges, "entries": acked}, end), topic_records
    )
    assertDataFrameEqual(bounds, spark.createDataFrame([(s, 9, 4)], LEDGER_BOUND_SCHEMA))
    found = find_gaps(coverage, ledger_open, bounds, watermarks, sent_judged_until_ms=ms(20))
    assert [(r["cause"], r["seq"], r["seq_end"]) for r in found.collect()] == [("never-sent", 2, 2)]

    unnamed = {**end, "last_seq": {"other": 3}}
    coverage, ledger_open, bounds = first_run_gap_inputs(
        spark, ledger_values(spark, {**ranges, "entries": acked}, unnamed), topic_records
    )
    assertDataFrameEqual(bounds, spark.createDataFrame([(s, 9, -1)], LEDGER_BOUND_SCHEMA))
    assert find_gaps(coverage, ledger_open, bounds, watermarks, sent_judged_until_ms=ms(20)).isEmpty()
    # carried to a later run: the lowest checkpoint a loss was declared at stands
    later = spark.createDataFrame([(s, 12, None), ("other", 3, 7)], LEDGER_BOUND_SCHEMA)
    assertDataFrameEqual(
        transform_ledger_bounds(bounds, later),
        spark.createDataFrame([(s, 12, -1), ("other", 3, 7)], LEDGER_BOUND_SCHEMA),
    )
