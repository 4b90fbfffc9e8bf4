"""Pure transforms of the reconciliation job on tiny inline frames, against hand-written results."""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from spark_jobs.binding import RecordKeySpec
from spark_jobs.reconcile_findings import late_held_rows
from spark_jobs.reconcile_transform import (
    CANDIDATE_SCHEMA,
    COMMITTED_SCHEMA,
    FINDING_SCHEMA,
    INTERVAL_SCHEMA,
    KAFKA_RAW_SCHEMA,
    KEY_INDEX_SCHEMA,
    LEDGER_BOUND_SCHEMA,
    LEDGER_ENTRY_SCHEMA,
    LOST_SIGHTING_SCHEMA,
    PROCESSED_INTERVAL_SCHEMA,
    PROCESSED_SCHEMA,
    RECORD_SCHEMA,
    REPROCESSED_SCHEMA,
    SOURCE_ROW_SCHEMA,
    WATERMARK_SCHEMA,
    find_aborted,
    find_duplicates,
    find_gaps,
    find_missing,
    find_orphans,
    find_reprocessed,
    find_unprocessed,
    header_problem_counts,
    interval_holes,
    merge_intervals,
    transform_aborted,
    transform_consumer_ledger,
    transform_duplicate_records,
    transform_key_stats,
    transform_ledger_bounds,
    transform_ledger_open,
    transform_lost_sightings,
    transform_orphan_candidates,
    transform_pending_source,
    transform_processed_coverage,
    transform_producer_ledger,
    transform_rebuild_memory,
    transform_records,
    transform_reprocessed,
    transform_seq_coverage,
    transform_unprocessed_candidates,
    unverifiable_rows,
    values_to_intervals,
)
from tests.support.clock import at_second, ms_at_second
from tests.support.gaps import first_run_gap_inputs

FINDING_FIELDS = FINDING_SCHEMA.fieldNames()


def finding(kind: str, **values: Any) -> tuple[Any, ...]:
    unknown = set(values) - set(FINDING_FIELDS)
    assert not unknown, unknown
    return tuple(kind if name == "kind" else values.get(name) for name in FINDING_FIELDS)


def findings(spark: SparkSession, *rows: tuple[Any, ...]) -> DataFrame:
    return spark.createDataFrame(list(rows), FINDING_SCHEMA)


def records(spark: SparkSession, *rows: tuple[Any, ...]) -> DataFrame:
    return spark.createDataFrame(list(rows), RECORD_SCHEMA)


def ledger_values(spark: SparkSession, *messages: dict[str, Any]) -> DataFrame:
    """Audit-topic records as the Kafka source returns them: JSON bytes in `value`."""
    rows = [
        (b"k", json.dumps(m, separators=(",", ":")).encode(), "_audit", 0, i, at_second(0), 0, [])
        for i, m in enumerate(messages)
    ]
    return spark.createDataFrame(rows, KAFKA_RAW_SCHEMA)


# ------------------------------------------------------------------ record keys -------


def raw_records(spark: SparkSession) -> DataFrame:
    rows = [
        (
            b"1",
            b'{"ticket_id": 11}',
            "t",
            0,
            0,
            at_second(1),
            0,
            [("audit-id", b"11"), ("audit-pid", b"p1"), ("audit-seq", b"0"), ("audit-ts", b"1")],
        ),
        (None, b'{"other": 1}', "t", 1, 5, at_second(2), 0, []),
        (b"3", b'{"ticket_id": "x"}', "t", 0, 1, at_second(3), 0, [("audit-pid", b"p2"), ("audit-seq", b"oops")]),
    ]
    return spark.createDataFrame(rows, KAFKA_RAW_SCHEMA)


def parsed_records(raw: DataFrame, spec: RecordKeySpec) -> DataFrame:
    """transform_records without its header_status column (asserted on its own below)."""
    return transform_records(raw, spec).select(*RECORD_SCHEMA.fieldNames())


def test_it_finds_keys_by_record_key(spark: SparkSession):
    actual = parsed_records(raw_records(spark), RecordKeySpec("key"))
    expected = records(
        spark,
        ("1", 0, 0, at_second(1), "p1", 0),
        (None, 1, 5, at_second(2), None, None),
        ("3", 0, 1, at_second(3), "p2", None),
    )
    assertDataFrameEqual(actual, expected)


def test_it_finds_keys_by_header(spark: SparkSession):
    actual = parsed_records(raw_records(spark), RecordKeySpec("header", "audit-id"))
    expected = records(
        spark,
        ("11", 0, 0, at_second(1), "p1", 0),
        (None, 1, 5, at_second(2), None, None),
        (None, 0, 1, at_second(3), "p2", None),
    )
    assertDataFrameEqual(actual, expected)


def test_it_finds_keys_by_json_path(spark: SparkSession):
    actual = parsed_records(raw_records(spark), RecordKeySpec("json", "$.ticket_id"))
    expected = records(
        spark,
        ("11", 0, 0, at_second(1), "p1", 0),
        (None, 1, 5, at_second(2), None, None),
        ("x", 0, 1, at_second(3), "p2", None),
    )
    assertDataFrameEqual(actual, expected)


PID = "0123456789abcdef0123456789abcdef"


def headered(offset: int, *headers: tuple[str, bytes | None]) -> tuple[Any, ...]:
    return (b"k", b"{}", "t", 0, offset, at_second(offset), 0, list(headers))


def test_it_tells_missing_and_malformed_audit_headers_apart(spark: SparkSession):
    good = [("audit-id", b"k"), ("audit-pid", PID.encode()), ("audit-seq", b"7"), ("audit-ts", b"1700000000000")]
    rows = [
        headered(0, *good),
        headered(1, *good, ("trace", b"x"), ("audit-seq", b"7")),  # repeated with the same value
        (b"k", b"{}", "t", 0, 2, at_second(2), 0, None),  # no headers at all
        headered(3, ("trace", b"x")),  # headers, none of them audit ones
        headered(4, *good[:2], ("audit-seq", b"oops"), good[3]),  # audit-seq not an integer
        headered(5, ("audit-id", b"k"), ("audit-pid", b"p1"), *good[2:]),  # audit-pid not a session id
        headered(6, *good[:3]),  # audit-ts missing
        headered(7, *good, ("audit-seq", b"8")),  # repeated with another value
        headered(8, ("audit-id", b""), *good[1:]),  # empty audit-id
        headered(9, *good[:2], ("audit-seq", b"99999999999999999999"), good[3]),  # beyond 64 bits
        headered(10, *good[:3], ("audit-ts", None)),  # a null value
    ]
    actual = transform_records(spark.createDataFrame(rows, KAFKA_RAW_SCHEMA), RecordKeySpec("key")).select(
        "offset", "header_status"
    )
    expected = spark.createDataFrame(
        [
            (0, "ok"),
            (1, "ok"),
            (2, "missing"),
            (3, "missing"),
            (4, "malformed"),
            (5, "malformed"),
            (6, "malformed"),
            (7, "malformed"),
            (8, "malformed"),
            (9, "malformed"),
            (10, "malformed"),
        ],
        "offset long, header_status string",
    )
    assertDataFrameEqual(actual, expected)
    counts = transform_records(spark.createDataFrame(rows, KAFKA_RAW_SCHEMA), RecordKeySpec("key")).agg(
        F.count("*").alias("n"), *header_problem_counts()
    )
    assert counts.collect()[0].asDict() == {"n": 11, "records_without_headers": 2, "records_malformed_headers": 7}


# ------------------------------------------------------------------ missing -----------


def test_it_finds_missing_rows_older_than_grace(spark: SparkSession):
    old_pending = spark.createDataFrame([("a", at_second(0)), ("e", at_second(5))], SOURCE_ROW_SCHEMA)
    new_source = spark.createDataFrame(
        [("b", at_second(10)), ("c", at_second(20)), ("d", at_second(100))], SOURCE_ROW_SCHEMA
    )
    # "a" gets its record this run; "c" had its record in an earlier run (key index).
    new_records = records(spark, ("a", 0, 7, at_second(30), None, None), ("x", 0, 8, at_second(30), None, None))
    old_index = spark.createDataFrame([("c", 1, 0, 3, at_second(15), None, None, "r1")], KEY_INDEX_SCHEMA)

    pending = transform_pending_source(old_pending, new_source, new_records, old_index)
    assertDataFrameEqual(
        pending,
        spark.createDataFrame([("e", at_second(5)), ("b", at_second(10)), ("d", at_second(100))], SOURCE_ROW_SCHEMA),
    )

    actual = find_missing(pending, cutoff=at_second(50), unverifiable_until=None)
    expected = findings(
        spark,
        finding("missing", key="e", timestamp=at_second(5), evidence=f'{{"created_ms":{ms_at_second(5)}}}'),
        finding("missing", key="b", timestamp=at_second(10), evidence=f'{{"created_ms":{ms_at_second(10)}}}'),
    )
    assertDataFrameEqual(actual, expected)


def test_a_stepped_back_clock_keeps_reported_rows_matched_on_key_and_creation_not_key_alone(spark: SparkSession):
    """The clock stepped back: the last run reported "a" (created at 5 s) and "b" (at 8 s)
    missing, past its cutoff of 40 s; this run's cutoff is 2 s. "a" is the same row and stays
    reported; "b" was deleted and inserted again (created at 30 s, within the grace by any
    clock): not the row reported, not missing; "c" was never reported: judged by the cutoff
    as it reads now."""
    pending = spark.createDataFrame([("a", at_second(5)), ("b", at_second(30)), ("c", at_second(6))], SOURCE_ROW_SCHEMA)
    reported = spark.createDataFrame([("a", at_second(5)), ("b", at_second(8))], SOURCE_ROW_SCHEMA)

    actual = find_missing(pending, cutoff=at_second(2), unverifiable_until=None, kept=(at_second(40), reported))

    expected = findings(
        spark, finding("missing", key="a", timestamp=at_second(5), evidence=f'{{"created_ms":{ms_at_second(5)}}}')
    )
    assertDataFrameEqual(actual, expected)


def test_it_counts_rows_whose_records_may_have_been_deleted_as_unverifiable_not_missing(spark: SparkSession):
    pending = spark.createDataFrame(
        [("a", at_second(0)), ("b", at_second(10)), ("c", at_second(11)), ("d", at_second(30)), ("e", at_second(100))],
        SOURCE_ROW_SCHEMA,
    )
    # Records of rows created up to at_second(10) may be among those deleted before they were read.
    missing = find_missing(pending, cutoff=at_second(50), unverifiable_until=at_second(10))
    assertDataFrameEqual(
        missing,
        findings(
            spark,
            finding("missing", key="c", timestamp=at_second(11), evidence=f'{{"created_ms":{ms_at_second(11)}}}'),
            finding("missing", key="d", timestamp=at_second(30), evidence=f'{{"created_ms":{ms_at_second(30)}}}'),
        ),
    )
    assertDataFrameEqual(
        unverifiable_rows(pending, cutoff=at_second(50), unverifiable_until=at_second(10)),
        spark.createDataFrame([("a", at_second(0)), ("b", at_second(10))], SOURCE_ROW_SCHEMA),
    )
    # Within grace a row is neither: "e" is not judged yet even though it is before the bound.
    assert unverifiable_rows(pending, cutoff=at_second(50), unverifiable_until=at_second(200)).count() == 4
    assert unverifiable_rows(pending, cutoff=at_second(50), unverifiable_until=None).count() == 0


def test_it_keeps_on_a_rebuild_what_the_re_read_cannot_see_again(spark: SparkSession):
    # Partition 0 was rewritten from offset 5: "b" (offset 6) is gone, "a" (offset 2) and "c"
    # (offset 7, now at the same place again) are still there; partition 1 lost offsets below
    # 10 to retention: "d" (offset 4) was seen and expired, "e" (offset 12) is re-read.
    old_index = spark.createDataFrame(
        [
            ("a", 1, 0, 2, at_second(1), None, None, "r1"),
            ("b", 1, 0, 6, at_second(2), None, None, "r1"),
            ("c", 1, 0, 7, at_second(3), None, None, "r2"),
            ("d", 1, 1, 4, at_second(4), None, None, "r1"),
            ("e", 1, 1, 12, at_second(5), None, None, "r2"),
        ],
        KEY_INDEX_SCHEMA,
    )
    re_read = records(
        spark,
        ("a", 0, 2, at_second(1), None, None),
        ("x", 0, 6, at_second(9), None, None),
        ("c", 0, 7, at_second(3), None, None),
        ("e", 1, 12, at_second(5), None, None),
    )
    bounds = spark.createDataFrame([(0, 0, 8), (1, 10, 13)], "partition int, low long, high long")
    carried, lost = transform_rebuild_memory(old_index, re_read, bounds, [0], "r3")
    assertDataFrameEqual(
        carried, spark.createDataFrame([("d", 1, 1, 4, at_second(4), None, None, "r1")], KEY_INDEX_SCHEMA)
    )
    assertDataFrameEqual(
        lost, spark.createDataFrame([("b", 0, 6, at_second(2), None, None, "r1", "r3")], LOST_SIGHTING_SCHEMA)
    )
    # A lost key whose record turns up later is no longer lost.
    later = records(spark, ("b", 1, 13, at_second(10), None, None))
    assert transform_lost_sightings(lost, lost.limit(0), later).count() == 0
    assert transform_lost_sightings(lost, lost.limit(0), re_read).count() == 1


def test_a_rebuild_keeps_what_the_log_cleaner_removed_and_calls_lost_only_what_was_rewritten(spark: SparkSession):
    # A compacted topic. Partition 1 was not rewritten: "t" (offset 3) is gone, its tombstone
    # with it (the cleaner), "k" (offset 5) has a later copy at 9. Partition 0 was truncated at
    # 6 and rewritten: "h" (offset 4) left a hole the cleaner made, "o" (offset 6) is where "x"
    # now is, "p" (offset 11) lies past the log end (10).
    old_index = spark.createDataFrame(
        [
            ("t", 1, 1, 3, at_second(1), None, None, "r1"),
            ("k", 1, 1, 5, at_second(2), None, None, "r1"),
            ("h", 1, 0, 4, at_second(3), None, None, "r1"),
            ("o", 1, 0, 6, at_second(4), None, None, "r1"),
            ("p", 1, 0, 11, at_second(5), None, None, "r2"),
        ],
        KEY_INDEX_SCHEMA,
    )
    re_read = records(
        spark,
        ("x", 0, 6, at_second(9), None, None),
        ("k", 1, 9, at_second(6), None, None),
    )
    bounds = spark.createDataFrame([(0, 0, 10), (1, 0, 10)], "partition int, low long, high long")

    def keys(frame):
        return sorted(r["key"] for r in frame.collect())

    carried, lost = transform_rebuild_memory(old_index, re_read, bounds, [0], "r3", compacted=True)
    # "t" was delivered: the broker rewrote nothing in its partition. "h" may be the cleaner's
    # hole: delivered as far as can be told, never lost. "k" is re-read: not carried twice.
    assert keys(carried) == ["h", "t"]
    assert keys(lost) == ["o", "p"]
    # On a topic the cleaner does not compact, a hole in a rewritten partition is a loss too.
    carried, lost = transform_rebuild_memory(old_index, re_read, bounds, [0], "r3")
    assert keys(carried) == ["t"]
    assert keys(lost) == ["h", "o", "p"]


def test_it_reports_a_row_whose_record_an_earlier_run_saw_and_lost_as_broker_lost(spark: SparkSession):
    pending = spark.createDataFrame([("b", at_second(0)), ("y", at_second(1))], SOURCE_ROW_SCHEMA)
    lost = spark.createDataFrame([("b", 0, 6, at_second(2), "s1", 4, "r1", "r3")], LOST_SIGHTING_SCHEMA)
    # Even below the unverifiable bound: the record was seen, so its loss is known.
    actual = find_missing(pending, cutoff=at_second(50), unverifiable_until=at_second(10), lost_sightings=lost)
    seen = f'"seen":{{"partition":0,"offset":6,"ts_ms":{ms_at_second(2)},"session":"s1","seq":4,"run_id":"r1","detected_run":"r3"}}'
    expected = findings(
        spark,
        finding(
            "missing",
            key="b",
            cause="broker-lost",
            partition=0,
            offset=6,
            timestamp=at_second(0),
            evidence=f'{{"created_ms":{ms_at_second(0)},{seen}}}',
        ),
    )
    assertDataFrameEqual(actual, expected)
    assert (
        unverifiable_rows(pending, cutoff=at_second(50), unverifiable_until=at_second(10), lost_sightings=lost).count()
        == 1
    )


def test_a_leader_change_holds_rows_without_evidence_in_its_window_and_counts_them_late(spark: SparkSession):
    """The window a leader change holds is (20 s, 40 s] of `created`. "in" (created at 30 s) is
    held; "edge" at 40 s too (the end is in it), "before" at 20 s (the start is not) and "after"
    at 41 s are judged. "seen" (a record an earlier run saw and lost) and "told" (the last run
    reported it missing) are in the window but judged: a loss known, an alert already open."""
    pending = spark.createDataFrame(
        [
            (k, at_second(t))
            for k, t in [("before", 20), ("in", 30), ("edge", 40), ("after", 41), ("seen", 25), ("told", 35)]
        ],
        SOURCE_ROW_SCHEMA,
    )
    lost = spark.createDataFrame([("seen", 0, 6, at_second(24), None, None, "r1", "r3")], LOST_SIGHTING_SCHEMA)
    reported = spark.createDataFrame([("told",)], "key string")
    window = [((at_second(20), at_second(40)), reported)]

    actual = find_missing(pending, cutoff=at_second(50), unverifiable_until=None, lost_sightings=lost, held_late=window)
    assert sorted(r["key"] for r in actual.collect()) == ["after", "before", "seen", "told"]
    held = late_held_rows(pending, at_second(50), None, window, lost_sightings=lost)
    assert sorted(r["key"] for r in held.collect()) == ["edge", "in"]
    # a held row that is also unverifiable is counted as such, not late
    assert [r["key"] for r in late_held_rows(pending, at_second(50), at_second(35), window, lost).collect()] == ["edge"]
    # no window: every row past the cutoff is judged
    assert find_missing(pending, cutoff=at_second(50), unverifiable_until=None, lost_sightings=lost).count() == 6


def test_it_reports_a_row_whose_key_the_ledger_acked_and_the_topic_lost_as_broker_lost(spark: SparkSession):
    # the gap finder's answer for a probed producer: k4 acked at 0@40 (v1) and k5 acked in a
    # range (v2: no position); neither is in the topic. No run ever saw them.
    pending = spark.createDataFrame(
        [("k4", at_second(0)), ("k5", at_second(1)), ("y", at_second(20))], SOURCE_ROW_SCHEMA
    )
    lost_acks = findings(
        spark,
        finding(
            "gap",
            key="k4",
            cause="broker-lost",
            partition=0,
            offset=40,
            timestamp=at_second(4),
            session="s1",
            seq=4,
            seq_end=4,
        ),
        finding("gap", key="k5", cause="broker-lost", timestamp=at_second(5), session="s2", seq=9, seq_end=9),
        finding("gap", cause="never-sent", session="s1", seq=6, seq_end=6),
    )
    # Even below the unverifiable bound: the ledger's ack makes the loss known.
    actual = find_missing(pending, cutoff=at_second(50), unverifiable_until=at_second(10), lost_acks=lost_acks)
    expected = findings(
        spark,
        finding(
            "missing",
            key="k4",
            cause="broker-lost",
            partition=0,
            offset=40,
            timestamp=at_second(0),
            evidence=f'{{"created_ms":{ms_at_second(0)},"acked":{{"session":"s1","seq":4,"ts_ms":{ms_at_second(4)},'
            '"partition":0,"offset":40}}',
        ),
        finding(
            "missing",
            key="k5",
            cause="broker-lost",
            timestamp=at_second(1),
            evidence=f'{{"created_ms":{ms_at_second(1)},"acked":{{"session":"s2","seq":9,"ts_ms":{ms_at_second(5)}}}}}',
        ),
        finding("missing", key="y", timestamp=at_second(20), evidence=f'{{"created_ms":{ms_at_second(20)}}}'),
    )
    assertDataFrameEqual(actual, expected)


# ------------------------------------------------------------------ duplicates --------


def occurrences(*items: tuple[int, int, float, str | None, int | None]) -> str:
    parts = []
    for partition, offset, seconds, session, seq in items:
        text = f'{{"partition":{partition},"offset":{offset},"ts_ms":{ms_at_second(seconds)}'
        if session is not None:
            text += f',"session":"{session}","seq":{seq}'
        parts.append(text + "}")
    return f'{{"count":{len(items)},"records":[{",".join(parts)}]}}'


def offsets(*pairs: tuple[int, int]) -> list[tuple[int, int]]:
    return list(pairs)


def test_it_tells_producer_retries_from_app_resends_and_headerless_duplicates(spark: SparkSession):
    dups = records(
        spark,
        ("a", 0, 1, at_second(1), "p1", 1),
        ("a", 0, 2, at_second(2), "p1", 1),
        ("b", 0, 3, at_second(3), "p1", 2),
        ("b", 1, 4, at_second(4), "p2", 0),
        ("c", 0, 5, at_second(5), None, None),
        ("c", 1, 6, at_second(6), None, None),
        ("d", 0, 7, at_second(7), "p1", 5),
        ("d", 0, 8, at_second(8), "p1", 5),
        ("d", 1, 9, at_second(9), "p3", 0),
        ("e", 0, 10, at_second(10), "p1", 6),
        ("e", 1, 11, at_second(11), None, None),
    )
    expected = findings(
        spark,
        finding(
            "duplicate",
            key="a",
            cause="producer-retry",
            partition=0,
            offset=1,
            offsets=offsets((0, 1), (0, 2)),
            timestamp=at_second(1),
            session="p1",
            seq=1,
            evidence=occurrences((0, 1, 1, "p1", 1), (0, 2, 2, "p1", 1)),
        ),
        finding(
            "duplicate",
            key="b",
            cause="app-resend",
            partition=0,
            offset=3,
            offsets=offsets((0, 3), (1, 4)),
            timestamp=at_second(3),
            session="p1",
            seq=2,
            evidence=occurrences((0, 3, 3, "p1", 2), (1, 4, 4, "p2", 0)),
        ),
        finding(
            "duplicate",
            key="c",
            cause="unknown",
            partition=0,
            offset=5,
            offsets=offsets((0, 5), (1, 6)),
            timestamp=at_second(5),
            evidence=occurrences((0, 5, 5, None, None), (1, 6, 6, None, None)),
        ),
        finding(
            "duplicate",
            key="d",
            cause="producer-retry",
            partition=0,
            offset=7,
            offsets=offsets((0, 7), (0, 8)),
            timestamp=at_second(7),
            session="p1",
            seq=5,
            evidence=occurrences((0, 7, 7, "p1", 5), (0, 8, 8, "p1", 5)),
        ),
        finding(
            "duplicate",
            key="d",
            cause="app-resend",
            partition=0,
            offset=7,
            offsets=offsets((0, 7), (0, 8), (1, 9)),
            timestamp=at_second(7),
            session="p1",
            seq=5,
            evidence=occurrences((0, 7, 7, "p1", 5), (0, 8, 8, "p1", 5), (1, 9, 9, "p3", 0)),
        ),
        finding(
            "duplicate",
            key="e",
            cause="unknown",
            partition=0,
            offset=10,
            offsets=offsets((0, 10), (1, 11)),
            timestamp=at_second(10),
            session="p1",
            seq=6,
            evidence=occurrences((0, 10, 10, "p1", 6), (1, 11, 11, None, None)),
        ),
    )
    assertDataFrameEqual(find_duplicates(dups), expected)


def test_it_keeps_every_record_of_keys_duplicated_across_runs(spark: SparkSession):
    old_index = spark.createDataFrame(
        [
            ("a", 1, 0, 1, at_second(1), "p1", 1, "r1"),
            ("b", 2, 0, 2, at_second(2), "p1", 2, "r1"),
            ("q", 1, 0, 9, at_second(9), "p1", 9, "r1"),  # untouched this run
        ],
        KEY_INDEX_SCHEMA,
    )
    old_dups = records(spark, ("b", 0, 2, at_second(2), "p1", 2), ("b", 0, 3, at_second(3), "p1", 3))
    new = records(
        spark,
        ("a", 0, 20, at_second(20), "p1", 1),
        ("b", 0, 21, at_second(21), "p9", 0),
        ("z", 0, 22, at_second(22), "p9", 1),
        ("y", 0, 23, at_second(23), "p9", 2),
        ("y", 1, 24, at_second(24), "p9", 3),
        (None, 1, 25, at_second(25), None, None),
    )
    actual = transform_duplicate_records(new, old_index, old_dups, broadcast_new=True)
    expected = records(
        spark,
        ("b", 0, 2, at_second(2), "p1", 2),
        ("b", 0, 3, at_second(3), "p1", 3),
        ("a", 0, 1, at_second(1), "p1", 1),
        ("a", 0, 20, at_second(20), "p1", 1),
        ("b", 0, 21, at_second(21), "p9", 0),
        ("y", 0, 23, at_second(23), "p9", 2),
        ("y", 1, 24, at_second(24), "p9", 3),
    )
    assertDataFrameEqual(actual, expected)


def test_a_key_range_narrows_the_state_scans_without_changing_the_key_table(spark: SparkSession):
    from spark_jobs.reconcile_transform import transform_key_table, transform_touched_keys

    old_index = spark.createDataFrame(
        [
            ("a", 1, 0, 1, at_second(1), "p1", 1, "r1"),
            ("b", 2, 0, 2, at_second(2), "p1", 2, "r1"),
            ("d", 1, 1, 3, at_second(3), "p1", 3, "r1"),
        ],
        KEY_INDEX_SCHEMA,
    )
    old_source = spark.createDataFrame([("b", at_second(0)), ("e", at_second(0))], SOURCE_ROW_SCHEMA)
    new = records(spark, ("b", 0, 20, at_second(20), "p9", 0), ("c", 1, 21, at_second(21), "p9", 1))
    window = spark.createDataFrame([("c", at_second(5))], SOURCE_ROW_SCHEMA)
    touched = transform_touched_keys(transform_key_stats(new), window)

    def table(key_range: tuple[str, str] | None) -> list[tuple[Any, ...]]:
        rows = transform_key_table(touched, old_index, old_source, True, key_range).collect()
        return sorted(
            (r["key"], r["n"], r["n_old"], r["first_old"]["offset"] if r["first_old"] else None, r["known_source"])
            for r in rows
        )

    # By hand: b was indexed once before (2 records, first at offset 2) and its row seen; c is new.
    expected = [("b", 1, 2, 2, True), ("c", 1, None, None, None)]
    assert table(None) == expected
    assert table(("b", "c")) == expected
    # The range does filter the state: one that misses b loses what was known of it.
    assert table(("c", "c")) == [("b", 1, None, None, None), ("c", 1, None, None, None)]


# ------------------------------------------------------------------ orphans -----------


def test_it_finds_orphans_and_forgets_them_when_the_row_appears(spark: SparkSession):
    old_candidates = records(spark, ("k1", 0, 1, at_second(1), None, None), ("k2", 0, 2, at_second(2), "p1", 0))
    new_records = records(
        spark,
        ("k3", 0, 3, at_second(3), None, None),
        ("k4", 0, 4, at_second(4), "p1", 1),
        (None, 0, 5, at_second(5), None, None),
        ("k5", 0, 6, at_second(100), None, None),
    )
    old_source = spark.createDataFrame([("k3", at_second(0))], SOURCE_ROW_SCHEMA)
    new_source = spark.createDataFrame([("k1", at_second(0))], SOURCE_ROW_SCHEMA)

    candidates = transform_orphan_candidates(old_candidates, new_records, old_source, new_source)
    expected_candidates = records(
        spark,
        ("k2", 0, 2, at_second(2), "p1", 0),
        ("k4", 0, 4, at_second(4), "p1", 1),
        (None, 0, 5, at_second(5), None, None),
        ("k5", 0, 6, at_second(100), None, None),
    )
    assertDataFrameEqual(candidates, expected_candidates)
    # The same with the run's shared key statistics.
    shared = transform_key_stats(new_records)
    assertDataFrameEqual(
        transform_orphan_candidates(old_candidates, new_records, old_source, new_source, key_stats=shared),
        expected_candidates,
    )
    expected = findings(
        spark,
        finding(
            "orphan",
            key="k2",
            partition=0,
            offset=2,
            offsets=offsets((0, 2)),
            timestamp=at_second(2),
            session="p1",
            seq=0,
            evidence=occurrences((0, 2, 2, "p1", 0)),
        ),
        finding(
            "orphan",
            key="k4",
            partition=0,
            offset=4,
            offsets=offsets((0, 4)),
            timestamp=at_second(4),
            session="p1",
            seq=1,
            evidence=occurrences((0, 4, 4, "p1", 1)),
        ),
        finding(
            "orphan",
            cause="no-key",
            partition=0,
            offset=5,
            offsets=offsets((0, 5)),
            timestamp=at_second(5),
            evidence=occurrences((0, 5, 5, None, None)),
        ),
    )
    assertDataFrameEqual(find_orphans(candidates, cutoff=at_second(50)), expected)


# ------------------------------------------------------------------ gaps --------------


def batch(session: str, topic: str, *entries: list[Any]) -> dict[str, Any]:
    return {"v": 1, "type": "batch", "pid": session, "client_id": "app", "topic": topic, "entries": list(entries)}


def acked(seq: int, partition: int, offset: int, audit_id: str, ts_ms: int) -> list[Any]:
    return [seq, "acked", partition, offset, None, "persisted", audit_id, ts_ms]


def test_it_parses_the_producer_ledger(spark: SparkSession):
    raw = ledger_values(
        spark,
        {"v": 1, "type": "session-start", "pid": "s1", "client_id": "app", "ts": 5, "host": "h"},
        batch("s1", "t", acked(0, 0, 10, "k0", 1000), [1, "failed", -1, -1, "timed out", "not", "k1", 1001]),
        batch("s1", "other", acked(5, 0, 1, "z", 1002)),
        {"v": 1, "type": "session-end", "pid": "s1", "ts": 9, "last_seq": {"t": 3, "other": 5}},
        {"v": 1, "type": "session-end", "pid": "s2", "ts": 9, "last_seq": {"other": 7}},
    )
    entries, bounds = transform_producer_ledger(raw, "t")
    assertDataFrameEqual(
        entries,
        spark.createDataFrame(
            [
                ("s1", 0, "acked", 0, 10, None, "persisted", "k0", 1000, None, None),
                ("s1", 1, "failed", -1, -1, "timed out", "not", "k1", 1001, None, None),
            ],
            LEDGER_ENTRY_SCHEMA,
        ),
    )
    assertDataFrameEqual(bounds, spark.createDataFrame([("s1", 3, None)], LEDGER_BOUND_SCHEMA))


def test_it_reads_acks_0_entries_as_unconfirmed_never_acked(spark: SparkSession):
    raw = ledger_values(
        spark,
        batch(
            "s1",
            "t",
            [0, "unconfirmed", 1, -1, None, "possibly", "k0", 1000],
            # Older probes ledgered acks=0 sends as acked without an offset.
            [1, "acked", 1, -1001, None, "persisted", "k1", 1001],
            acked(2, 1, 20, "k2", 1002),
        ),
    )
    entries, _ = transform_producer_ledger(raw, "t")
    assertDataFrameEqual(
        entries,
        spark.createDataFrame(
            [
                ("s1", 0, "unconfirmed", 1, -1, None, "possibly", "k0", 1000, None, None),
                ("s1", 1, "unconfirmed", 1, -1001, None, "persisted", "k1", 1001, None, None),
                ("s1", 2, "acked", 1, 20, None, "persisted", "k2", 1002, None, None),
            ],
            LEDGER_ENTRY_SCHEMA,
        ),
    )


def test_it_calls_an_absent_unconfirmed_send_unconfirmed_not_broker_lost(spark: SparkSession):
    # s1 sent seqs 0..3 with acks=0; only 0 and 3 are in the topic.
    topic_records = records(spark, ("k0", 1, 10, at_second(0), "s1", 0), ("k3", 1, 11, at_second(3), "s1", 3))
    raw = ledger_values(
        spark,
        batch(
            "s1",
            "t",
            *[[s, "unconfirmed", 1, -1, None, "possibly", f"k{s}", ms_at_second(s)] for s in (0, 1, 3)],
            [2, "acked", 1, -1, None, "persisted", "k2", ms_at_second(2)],
        ),
        # A merged ledger that also says seq 1 failed: unconfirmed (it was sent) wins.
        batch("s1", "t", [1, "failed", 1, -1, "Local: Message timed out", "possibly", "k1", ms_at_second(1)]),
    )
    coverage, ledger_open, bounds = first_run_gap_inputs(spark, raw, topic_records)
    watermarks = spark.createDataFrame([(1, 0, 12)], WATERMARK_SCHEMA)

    actual = find_gaps(coverage, ledger_open, bounds, watermarks)

    def unconfirmed_gap(seq: int, persisted: str) -> tuple[Any, ...]:
        return finding(
            "gap",
            key=f"k{seq}",
            cause="send-unconfirmed",
            partition=1,
            timestamp=at_second(seq),
            session="s1",
            seq=seq,
            seq_end=seq,
            evidence='{"count":1,"ledger":{"status":"unconfirmed","partition":1,"offset":-1,'
            f'"persisted":"{persisted}","ts_ms":{ms_at_second(seq)}}}}}',
        )

    assertDataFrameEqual(actual, findings(spark, unconfirmed_gap(1, "possibly"), unconfirmed_gap(2, "persisted")))


def test_it_reports_no_gap_for_a_failed_send_the_application_sent_again(spark: SparkSession):
    # s1: seq 1 (k1) failed and the application re-sent k1 as seq 2, which landed; seq 3 (k3)
    # failed and was never re-sent; seq 4 (k4) was acked and is gone although k4 was re-sent.
    topic_records = records(spark, ("k0", 0, 10, at_second(0), "s1", 0), ("k1", 0, 11, at_second(2), "s1", 2))
    failed = [[s, "failed", -1, -1, "Local: Message timed out", "not", f"k{s}", ms_at_second(s)] for s in (1, 3)]
    raw = ledger_values(
        spark,
        batch(
            "s1",
            "t",
            acked(0, 0, 10, "k0", ms_at_second(0)),
            *failed,
            acked(2, 0, 11, "k1", ms_at_second(2)),
            acked(4, 0, 12, "k4", ms_at_second(4)),
        ),
        {"v": 1, "type": "session-end", "pid": "s1", "ts": 9, "last_seq": {"t": 4}},
    )
    coverage, ledger_open, bounds = first_run_gap_inputs(spark, raw, topic_records)
    watermarks = spark.createDataFrame([(0, 0, 13)], WATERMARK_SCHEMA)
    delivered = spark.createDataFrame([("k0",), ("k1",), ("k4",)], "key string")

    actual = find_gaps(coverage, ledger_open, bounds, watermarks, delivered_keys=delivered)

    assert sorted((r["key"], r["cause"], r["seq"]) for r in actual.collect()) == [
        ("k3", "send-failed", 3),
        ("k4", "broker-lost", 4),
    ]


def test_on_a_compacted_topic_an_acked_record_the_cleaner_may_have_removed_is_no_gap(spark: SparkSession):
    # s1 acked seqs 0..4 at offsets 10..14; only seq 3 (k1 again: it superseded seq 1's record)
    # is still in the topic. Seq 2 (k2) and seq 4 (k4) have no record at all; seq 4 was acked
    # after the compaction horizon (younger than min.compaction.lag.ms).
    topic_records = records(spark, ("k1", 0, 13, at_second(3), "s1", 3))
    raw = ledger_values(
        spark,
        batch(
            "s1",
            "t",
            acked(0, 0, 10, "k0", ms_at_second(0)),
            acked(1, 0, 11, "k1", ms_at_second(1)),
            acked(2, 0, 12, "k2", ms_at_second(2)),
            acked(3, 0, 13, "k1", ms_at_second(3)),
            acked(4, 0, 14, "k4", ms_at_second(4)),
        ),
        {"v": 1, "type": "session-end", "pid": "s1", "ts": 9, "last_seq": {"t": 4}},
    )
    coverage, ledger_open, bounds = first_run_gap_inputs(spark, raw, topic_records)
    watermarks = spark.createDataFrame([(0, 0, 15)], WATERMARK_SCHEMA)
    delivered = spark.createDataFrame([("k0",), ("k1",)], "key string")  # k0 seen by an earlier run
    horizon = at_second(3.5)

    def gaps(**compaction: Any) -> list[tuple[str, str, int]]:
        found = find_gaps(coverage, ledger_open, bounds, watermarks, delivered_keys=delivered, **compaction)
        return sorted((r["key"], r["cause"], r["seq"]) for r in found.collect())

    lost = [("k0", "broker-lost", 0), ("k1", "broker-lost", 1), ("k2", "broker-lost", 2), ("k4", "broker-lost", 4)]
    assert gaps() == lost  # not compacted: every acked record that is gone was lost
    # keyed by the record key: the cleaner removes a record only when its key has a later one
    assert gaps(compacted_until=horizon) == [("k2", "broker-lost", 2), ("k4", "broker-lost", 4)]
    # a tombstone of k2 (the application deleted it) lets the cleaner remove k2's record; none
    # outside the compaction horizon
    tombstones = spark.createDataFrame([("k2",), ("k4",)], "key string")
    assert gaps(compacted_until=horizon, deleted_keys=tombstones) == [("k4", "broker-lost", 4)]
    assert gaps(deleted_keys=tombstones) == lost
    # keyed otherwise: any record up to the horizon may have been cleaned
    assert gaps(compacted_until=horizon, keys_emptied_until=horizon) == [("k4", "broker-lost", 4)]
    # keyed by the record key, a tombstone no run read may have taken every record of a key
    # written up to an earlier instant (delete.retention.ms before): k2's, acked at 2 s, only
    # once that instant has passed it
    assert gaps(compacted_until=horizon, keys_emptied_until=at_second(2)) == [("k4", "broker-lost", 4)]
    assert gaps(compacted_until=horizon, keys_emptied_until=at_second(1.5)) == [
        ("k2", "broker-lost", 2),
        ("k4", "broker-lost", 4),
    ]


def test_it_attributes_sequence_gaps_from_the_ledger(spark: SparkSession):
    topic_records = records(
        spark,
        *[("k", 0, 100 + s, at_second(s), "s1", s) for s in (0, 1, 2, 5, 7, 9)],
        ("k", 0, 200, at_second(1), "s2", 0),
        ("k", 0, 201, at_second(1), "s2", 1),
        ("k", 0, 202, at_second(1), "s3", 0),
        ("k", 0, 203, at_second(1), None, None),
    )
    failed = [3, "failed", -1, -1, "Local: Message timed out", "not", "k3", ms_at_second(3)]
    raw = ledger_values(
        spark,
        # s1: 3 failed, 4 acked but absent, 6 never ledgered; 9 is past the last ledgered seq.
        batch(
            "s1",
            "t",
            *[acked(s, 0, 100 + s, f"k{s}", ms_at_second(s)) for s in (0, 1, 2)],
            failed,
            acked(4, 0, 40, "k4", ms_at_second(4)),
        ),
        batch("s1", "t", acked(5, 0, 105, "k5", ms_at_second(5)), acked(7, 0, 107, "k7", ms_at_second(7))),
        batch("s1", "other", acked(6, 0, 1, "elsewhere", ms_at_second(6))),
        # s2 crashed after its first batch: its record seq 1 raises no gap.
        batch("s2", "t", acked(0, 0, 200, "k", ms_at_second(1))),
        # s3 ended cleanly after seq 2; seq 1 expired by retention, seq 2 was never sent.
        batch("s3", "t", acked(0, 0, 202, "k", ms_at_second(1)), acked(1, 0, 3, "k", ms_at_second(1))),
        {"v": 1, "type": "session-end", "pid": "s3", "ts": 9, "last_seq": {"t": 2}},
        # s4's only record is in a transaction this run has not read yet.
        batch("s4", "t", acked(0, 0, 150, "k", ms_at_second(1))),
    )
    entries, new_bounds = transform_producer_ledger(raw, "t")
    coverage = transform_seq_coverage(spark.createDataFrame([], INTERVAL_SCHEMA), topic_records)
    assertDataFrameEqual(
        coverage,
        spark.createDataFrame(
            [("s1", 0, 2), ("s1", 5, 5), ("s1", 7, 7), ("s1", 9, 9), ("s2", 0, 1), ("s3", 0, 0)], INTERVAL_SCHEMA
        ),
    )
    ledger_open = transform_ledger_open(spark.createDataFrame([], LEDGER_ENTRY_SCHEMA), entries, coverage)
    bounds = transform_ledger_bounds(spark.createDataFrame([], LEDGER_BOUND_SCHEMA), new_bounds)
    assertDataFrameEqual(
        bounds,
        spark.createDataFrame(
            [("s1", 7, None), ("s2", 0, None), ("s3", 2, None), ("s4", 0, None)], LEDGER_BOUND_SCHEMA
        ),
    )
    # Partition 0 starts at offset 5 (retention) and this run read it up to offset 150.
    watermarks = spark.createDataFrame([(0, 5, 150)], WATERMARK_SCHEMA)

    actual = find_gaps(coverage, ledger_open, bounds, watermarks)
    expected = findings(
        spark,
        finding(
            "gap",
            key="k3",
            cause="send-failed",
            timestamp=at_second(3),
            session="s1",
            seq=3,
            seq_end=3,
            evidence='{"count":1,"ledger":{"status":"failed","partition":-1,"offset":-1,'
            f'"error":"Local: Message timed out","persisted":"not","ts_ms":{ms_at_second(3)}}}}}',
        ),
        finding(
            "gap",
            key="k4",
            cause="broker-lost",
            partition=0,
            offset=40,
            timestamp=at_second(4),
            session="s1",
            seq=4,
            seq_end=4,
            evidence='{"count":1,"ledger":{"status":"acked","partition":0,"offset":40,'
            f'"persisted":"persisted","ts_ms":{ms_at_second(4)}}}}}',
        ),
        finding("gap", cause="never-sent", session="s1", seq=6, seq_end=6, evidence='{"count":1}'),
        finding("gap", cause="never-sent", session="s3", seq=2, seq_end=2, evidence='{"count":1}'),
    )
    assertDataFrameEqual(actual, expected)


def test_it_merges_sequences_into_intervals_across_buckets(spark: SparkSession):
    values = records(spark, *[("k", 0, s, at_second(0), "s", s) for s in (0, 1, 2, 3, 4, 5, 9, 10, 12)])
    actual = values_to_intervals(values, ["session"], "seq", bucket_size=4)
    assertDataFrameEqual(actual, spark.createDataFrame([("s", 0, 5), ("s", 9, 10), ("s", 12, 12)], INTERVAL_SCHEMA))
    merged = merge_intervals(
        spark.createDataFrame([("s", 0, 5), ("s", 3, 8), ("s", 9, 9), ("s", 11, 12)], INTERVAL_SCHEMA), ["session"]
    )
    assertDataFrameEqual(merged, spark.createDataFrame([("s", 0, 9), ("s", 11, 12)], INTERVAL_SCHEMA))
    holes = interval_holes(
        merged, spark.createDataFrame([("s", 20, None), ("t", 1, None)], LEDGER_BOUND_SCHEMA), ["session"]
    )
    assertDataFrameEqual(holes, spark.createDataFrame([("s", 10, 10), ("s", 13, 20), ("t", 0, 1)], INTERVAL_SCHEMA))


def test_it_merges_values_across_words_and_repeats(spark: SparkSession):
    # Values are folded into 64-bit words: runs that cross word boundaries, full words,
    # repeated values, a lone value far away and a negative one still give exact intervals.
    seqs = [*range(0, 63), *range(64, 200), 130, 131, *range(201, 256), 1000, 2**40, -3, -2]
    values = records(spark, *[("k", 0, i, at_second(0), "s", s) for i, s in enumerate(seqs)])
    actual = values_to_intervals(values, ["session"], "seq", bucket_size=100)
    expected = [("s", -3, -2), ("s", 0, 62), ("s", 64, 199), ("s", 201, 255), ("s", 1000, 1000), ("s", 2**40, 2**40)]
    assertDataFrameEqual(actual, spark.createDataFrame(expected, INTERVAL_SCHEMA))


# ------------------------------------------------------------------ aborted -----------


def test_it_finds_records_only_in_aborted_transactions(spark: SparkSession):
    uncommitted = records(
        spark,
        ("k1", 0, 0, at_second(0), "s", 0),
        ("k2", 0, 1, at_second(1), "s", 1),
        ("k3", 0, 3, at_second(3), "s", 2),
    )
    committed = records(spark, ("k1", 0, 0, at_second(0), "s", 0), ("k3", 0, 3, at_second(3), "s", 2))
    actual = find_aborted(transform_aborted(uncommitted, committed))
    expected = findings(
        spark,
        finding(
            "aborted",
            key="k2",
            partition=0,
            offset=1,
            timestamp=at_second(1),
            session="s",
            seq=1,
            evidence=f'{{"ts_ms":{ms_at_second(1)}}}',
        ),
    )
    assertDataFrameEqual(actual, expected)


# ------------------------------------------------------------------ consumers ---------


def processed(group: str, sid: str, *entries: list[Any]) -> dict[str, Any]:
    return {"v": 1, "type": "processed", "sid": sid, "group": group, "entries": list(entries)}


def test_candidates_a_group_committed_past_before_its_first_mark_are_not_kept(spark: SparkSession):
    """Records below a group's first mark in a partition (the probe came later) or in a
    partition it never marked (an instance without the probe) are never judged unprocessed
    once committed past, so the state does not keep them."""
    topic_records = records(spark, *[("k", p, o, at_second(o), "s", o) for p in (0, 1) for o in range(6)])
    coverage = spark.createDataFrame([("g1", 0, 3, 3)], PROCESSED_INTERVAL_SCHEMA)  # marked 3 only, in 0
    committed = spark.createDataFrame([("g1", 0, 5, None), ("g1", 1, 4, None)], COMMITTED_SCHEMA)
    groups = spark.createDataFrame([("g1",)], "group string")
    kept = transform_unprocessed_candidates(
        spark.createDataFrame([], CANDIDATE_SCHEMA), topic_records, coverage, groups, committed
    )
    # partition 0: 0-2 below the first mark, 3 marked; 4 passed unmarked, 5 not committed past.
    # partition 1: never marked; only 4 and 5, not committed past, wait for a mark.
    assert sorted((r.partition, r.offset) for r in kept.collect()) == [(0, 4), (0, 5), (1, 4), (1, 5)]


def test_it_finds_unprocessed_and_reprocessed_records_across_runs(spark: SparkSession):
    empty_cov = spark.createDataFrame([], PROCESSED_INTERVAL_SCHEMA)
    topic_records = records(spark, *[(f"k{o}", 0, o, at_second(o), None, None) for o in range(6)])
    committed = spark.createDataFrame([("g1", 0, 6, None), ("g2", 0, 6, None)], COMMITTED_SCHEMA)
    run1 = transform_consumer_ledger(
        ledger_values(
            spark,
            {"v": 1, "type": "session-start", "sid": "c1", "group": "g1", "ts": 1},
            processed(
                "g1",
                "c1",
                ["t", 0, 0, "k0", ms_at_second(10)],
                ["t", 0, 1, "k1", ms_at_second(11)],
                ["t", 0, 2, "k2", ms_at_second(12)],
            ),
            processed(
                "g1",
                "c2",
                ["t", 0, 2, "k2", ms_at_second(20)],
                ["t", 0, 4, "k4", ms_at_second(21)],
                ["other", 0, 3, None, 1],
            ),
            processed("g3", "c9", ["t", 0, 3, "k3", ms_at_second(22)]),  # not a group of this binding
        ),
        "t",
        ["g1", "g2"],
    )
    assertDataFrameEqual(
        run1,
        spark.createDataFrame(
            [
                ("g1", "c1", 0, 0, "k0", ms_at_second(10)),
                ("g1", "c1", 0, 1, "k1", ms_at_second(11)),
                ("g1", "c1", 0, 2, "k2", ms_at_second(12)),
                ("g1", "c2", 0, 2, "k2", ms_at_second(20)),
                ("g1", "c2", 0, 4, "k4", ms_at_second(21)),
            ],
            PROCESSED_SCHEMA,
        ),
    )
    # Each run's state is materialized, as a run writes it and the next reads it back: else
    # run 2's frames would compute run 1's again for every use.
    reprocessed1 = transform_reprocessed(
        spark.createDataFrame([], REPROCESSED_SCHEMA), empty_cov, run1
    ).localCheckpoint()
    coverage1 = transform_processed_coverage(empty_cov, run1).localCheckpoint()
    assertDataFrameEqual(
        coverage1, spark.createDataFrame([("g1", 0, 0, 2), ("g1", 0, 4, 4)], PROCESSED_INTERVAL_SCHEMA)
    )
    groups = spark.createDataFrame([("g1",), ("g2",)], "group string")
    candidates1 = transform_unprocessed_candidates(
        spark.createDataFrame([], CANDIDATE_SCHEMA), topic_records, coverage1, groups, committed
    ).localCheckpoint()
    # g2 keeps no consumer ledger: nothing is said about it, and it keeps no candidates it
    # has committed past (a ledger appearing later cannot speak for them).
    assert candidates1.where("group = 'g2'").count() == 0
    expected_unprocessed = [
        finding(
            "unprocessed",
            key=f"k{o}",
            partition=0,
            offset=o,
            timestamp=at_second(o),
            group="g1",
            evidence='{"committed_offset":6}',
        )
        for o in (3, 5)
    ]
    assertDataFrameEqual(find_unprocessed(candidates1, committed, coverage1), findings(spark, *expected_unprocessed))
    assertDataFrameEqual(
        find_reprocessed(reprocessed1),
        findings(
            spark,
            finding(
                "reprocessed",
                key="k2",
                partition=0,
                offset=2,
                timestamp=at_second(12),
                group="g1",
                evidence=f'{{"count":2,"consumer_sessions":["c1","c2"],"first_ms":{ms_at_second(12)},"last_ms":{ms_at_second(20)}}}',
            ),
        ),
    )

    # Next run: offset 3 is processed late, offset 1 a second time, offset 2 a third time.
    run2 = transform_consumer_ledger(
        ledger_values(
            spark,
            processed(
                "g1",
                "c3",
                ["t", 0, 3, "k3", ms_at_second(30)],
                ["t", 0, 1, "k1", ms_at_second(31)],
                ["t", 0, 2, "k2", ms_at_second(32)],
            ),
        ),
        "t",
        ["g1", "g2"],
    )
    reprocessed2 = transform_reprocessed(reprocessed1, coverage1, run2)
    coverage2 = transform_processed_coverage(coverage1, run2)
    candidates2 = transform_unprocessed_candidates(candidates1, records(spark), coverage2, groups, committed)
    assertDataFrameEqual(find_unprocessed(candidates2, committed, coverage2), findings(spark, expected_unprocessed[1]))
    assertDataFrameEqual(
        find_reprocessed(reprocessed2),
        findings(
            spark,
            finding(
                "reprocessed",
                key="k1",
                partition=0,
                offset=1,
                timestamp=at_second(31),
                group="g1",
                evidence=f'{{"count":2,"consumer_sessions":["c3"],"first_ms":{ms_at_second(31)},"last_ms":{ms_at_second(31)}}}',
            ),
            finding(
                "reprocessed",
                key="k2",
                partition=0,
                offset=2,
                timestamp=at_second(12),
                group="g1",
                evidence=f'{{"count":3,"consumer_sessions":["c1","c2","c3"],"first_ms":{ms_at_second(12)},"last_ms":{ms_at_second(32)}}}',
            ),
        ),
    )
