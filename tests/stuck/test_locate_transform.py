"""The Spark locate job's pure transforms, on tiny inline frames."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pyspark.testing import assertDataFrameEqual

from auditor.probes.codec import encode_session_end, encode_session_start
from auditor.probes.codec_decode import decode_ledger_record
from auditor.probes.headers import AUDIT_V2, AUDIT_VERSION
from auditor.stuck.untraced import SessionTrails
from spark_jobs import common, stuck_locate
from spark_jobs.binding import RecordKeySpec
from spark_jobs.reconcile_transform import KAFKA_RAW_SCHEMA, PROCESSED_SCHEMA
from spark_jobs.stuck_locate import (
    locate_json,
    transform_key_hits,
    transform_keyed,
    transform_mark_summary,
    transform_partition_summary,
    transform_untraced_sessions,
)

pytestmark = pytest.mark.integration

T = datetime(2030, 1, 1, tzinfo=UTC)
T_MS = int(T.timestamp() * 1000)


def test_it_summarizes_partitions_and_keeps_only_the_stuck_keys_records(spark) -> None:
    headers = [("audit-pid", b"s"), ("audit-seq", b"1")]
    raw = spark.createDataFrame(
        [
            (b"TCK-1", b"{}", "t", 0, 0, T, 0, headers),
            (b"TCK-2", b"{}", "t", 0, 1, T, 0, headers),
            (None, b"{}", "t", 0, 2, T, 0, []),
            (b"TCK-2", b"{}", "t", 1, 0, T, 0, None),
            (b"TCK-3", b"{}", "t", 1, 1, T, 0, headers),
        ],
        KAFKA_RAW_SCHEMA,
    )
    keys = spark.createDataFrame([("TCK-2",), ("TCK-9",)], "key string")

    actual = transform_partition_summary(transform_key_hits(transform_keyed(raw, RecordKeySpec("key")), keys))

    # unprobed_ms: the latest record without any audit header (empty or no headers); no record
    # carries an audit id (none without audit-id or v2 header): none whose audit id is not its key
    expected = spark.createDataFrame(
        [
            (0, 3, 2, [("TCK-2", 1, T_MS, "s", 1)], T_MS, None, None),
            (1, 2, 2, [("TCK-2", 0, T_MS, None, None)], T_MS, None, None),
        ],
        "partition int, n long, keyed long, "
        "matches array<struct<key:string, offset:long, ts_ms:long, session:string, seq:long>>, unprobed_ms long, "
        "miskeyed_ms long, miskeyed_session string",
    )
    assertDataFrameEqual(actual, expected, ignoreNullable=True)


def test_it_finds_the_latest_record_whose_audit_id_is_not_its_binding_key(spark) -> None:
    """As auditor.stuck.locate_python reads them: a v1 record's `audit-id`, a v2 record's id after
    its header's fixed part, else its record key."""
    session = bytes.fromhex("ab" * 16)

    def v2(seq: int, audit_id: bytes = b"") -> list[tuple[str, bytes]]:
        return [("audit", AUDIT_V2.pack(AUDIT_VERSION, session, seq, T_MS) + audit_id)]

    def v1(audit_id: bytes, pid: bytes = b"c" * 32) -> list[tuple[str, bytes]]:
        return [("audit-id", audit_id), ("audit-pid", pid), ("audit-seq", b"1"), ("audit-ts", b"1")]

    later = datetime(2030, 1, 1, 0, 0, 5, tzinfo=UTC)
    raw = spark.createDataFrame(
        [
            # partition 0: ids equal to the binding key (the ticket in the value)
            (b"order-1", b'{"ticket_id":"TCK-1"}', "t", 0, 0, T, 0, v2(0, b"TCK-1")),  # key_fn's id
            (b"order-2", b'{"ticket_id":"TCK-2"}', "t", 0, 1, T, 0, v1(b"TCK-2")),
            (b"order-3", b'{"ticket_id":"TCK-3"}', "t", 0, 2, T, 0, []),  # unprobed: no id
            # partition 1: ids that are the record key (no key_fn), the latest by session "ab..."
            (b"order-4", b'{"ticket_id":"TCK-4"}', "t", 1, 0, T, 0, v1(b"order-4")),
            (b"order-5", b'{"ticket_id":"TCK-5"}', "t", 1, 1, later, 0, v2(1)),
            (None, b'{"ticket_id":"TCK-6"}', "t", 1, 2, T, 0, v2(2)),  # no id at all (v2, no key)
            (b"order-7", b"not json", "t", 1, 3, later, 0, v1(b"other")),  # no binding key
        ],
        KAFKA_RAW_SCHEMA,
    )
    keys = spark.createDataFrame([("TCK-9",)], "key string")

    actual = transform_partition_summary(
        transform_key_hits(transform_keyed(raw, RecordKeySpec("json", "$.ticket_id")), keys)
    ).select("partition", "miskeyed_ms", "miskeyed_session")

    expected = spark.createDataFrame(
        [(0, None, None), (1, int(later.timestamp() * 1000), "ab" * 16)],
        "partition int, miskeyed_ms long, miskeyed_session string",
    )
    assertDataFrameEqual(actual, expected, ignoreNullable=True)


def test_it_summarizes_marks_per_group_and_partition(spark) -> None:
    processed = spark.createDataFrame(
        [
            ("g", "c1", 0, 1, "TCK-1", 10),
            ("g", "c1", 0, 4, "TCK-4", 11),
            ("g", "c1", 0, 7, "TCK-7", 12),
            ("h", "c2", 0, 7, "TCK-7", 13),
        ],
        PROCESSED_SCHEMA,
    )
    positions = spark.createDataFrame([(0, 7)], "partition int, offset long")
    lows = spark.createDataFrame([(0, 5)], "partition int, low long")

    actual = transform_mark_summary(processed, positions, lows)

    # g first marked offset 1 at 10 ms; h only offset 7 at 13 ms
    expected = spark.createDataFrame(
        [("g", 0, 3, 1, 10, 11, 4, [(7, "c1", 12)]), ("h", 0, 1, 7, 13, None, None, [(7, "c2", 13)])],
        "group string, partition int, n long, first_mark long, first_ms long, last_below_low_ms long, "
        "max_below_low long, marks array<struct<offset:long, consumer_session:string, ts_ms:long>>",
    )
    assertDataFrameEqual(actual, expected, ignoreNullable=True)


SMALL_JOB_KEYS = (
    "spark.sql.codegen.wholeStage",
    "spark.sql.codegen.factoryMode",
    "spark.sql.shuffle.partitions",
    "spark.sql.adaptive.enabled",
)


def test_it_names_the_producer_sessions_that_never_closed_as_the_python_engine_does(spark) -> None:
    """Per unclosed producer session of either contract: its last ledger record's timestamp, its
    declared alive_ms (null: none) and whether it wrote contract-v2 records (which ledger what it
    sent). Closed sessions, consumers and garbage are left out."""
    ranges = '{"v":2,"type":"ranges","pid":"%s","client_id":"c","topic":"t","entries":[[0,4,"acked",1,2]]}'
    keys = '{"v":2,"type":"keys","pid":"%s","client_id":"c","topic":"t","entries":[[0,["k"],[[1,1]]]]}'
    batch = '{"v":1,"type":"batch","pid":"%s","client_id":"c","topic":"t","entries":[]}'
    ledger = [
        (encode_session_start("producer", "killed", "c", 1, "h", alive_ms=1200), 0),
        (ranges % "killed", 1_000),
        (keys % "killed", 2_000),
        (encode_session_start("producer", "closed", "c", 1, "h", alive_ms=1200), 0),
        (keys % "closed", 3_000),
        (encode_session_end("producer", "closed", 4, {"t": 0}, alive_ms=1200, closed=True), 4_000),
        (encode_session_start("producer", "v1", "c", 1, "h"), 0),
        (batch % "v1", 6_000),
        (encode_session_start("producer", "v1-killed", "c", 1, "h", alive_ms=31_000), 0),
        (batch % "v1-killed", 6_500),
        (encode_session_end("producer", "v1-killed", 4, {"t": 0}, alive_ms=31_000), 6_600),
        (encode_session_start("producer", "v1-closed", "c", 1, "h", alive_ms=31_000), 0),
        (batch % "v1-closed", 6_700),
        (encode_session_end("producer", "v1-closed", 4, {"t": 0}, alive_ms=31_000, closed=True), 6_800),
        (encode_session_end("producer", "idle", 4, {"t": 0}, alive_ms=900), 7_000),
        (ranges % "undeclared", 5_000),
        (encode_session_start("consumer", "reader", "c", 1, "h", group="g"), 8_000),
        (b"not json", 9_000),
    ]
    rows = [
        (
            b"k",
            v if isinstance(v, bytes) else v.encode(),
            "pl",
            0,
            i,
            datetime.fromtimestamp((T_MS + ms) / 1000, UTC),
            0,
            [],
        )
        for i, (v, ms) in enumerate(ledger)
    ]
    raw = spark.createDataFrame(rows, KAFKA_RAW_SCHEMA)

    actual = transform_untraced_sessions(raw)

    expected = [
        ("idle", T_MS + 7_000, 900, False),
        ("killed", T_MS + 2_000, 1200, True),
        ("undeclared", T_MS + 5_000, None, True),
        ("v1", T_MS + 6_000, None, False),
        ("v1-killed", T_MS + 6_600, 31_000, False),
    ]
    assertDataFrameEqual(
        actual,
        spark.createDataFrame(expected, "session string, last_ms long, alive_ms long, ledgers_sends boolean"),
        ignoreNullable=True,
    )
    trails = SessionTrails()
    for value, ms in ledger:
        trails.note(decode_ledger_record(value), T_MS + ms)
    assert trails.untraced() == expected


def test_a_small_read_runs_with_a_small_jobs_settings_for_the_locate_only(spark, monkeypatch) -> None:
    request = {"records_to_read": 11, "topic": "t", "partitions": {}}
    during: list[dict[str, str | None]] = []

    def spied(spark_: Any, request_: dict[str, Any]) -> dict[str, Any]:
        during.append({key: spark_.conf.get(key, None) for key in SMALL_JOB_KEYS})
        if request_.get("fail"):
            raise RuntimeError("the locate failed")
        return {}

    monkeypatch.setattr(stuck_locate, "_locate", spied)
    before = {key: spark.conf.get(key, None) for key in SMALL_JOB_KEYS}
    small = {
        "spark.sql.codegen.wholeStage": "false",
        "spark.sql.codegen.factoryMode": "NO_CODEGEN",
        "spark.sql.shuffle.partitions": str(spark.sparkContext.defaultParallelism),
        "spark.sql.adaptive.enabled": "false",
    }

    assert locate_json(spark, request)["spark_settings"] == small
    assert during[-1] == small  # set on the session while it read
    assert {key: spark.conf.get(key, None) for key in SMALL_JOB_KEYS} == before  # and only then
    with pytest.raises(RuntimeError, match="the locate failed"):
        locate_json(spark, {**request, "fail": True})
    assert during[-1] == small
    assert {key: spark.conf.get(key, None) for key in SMALL_JOB_KEYS} == before  # restored after a failure too
    # A large read (or a request that does not say) runs with the session's own settings.
    assert locate_json(spark, {**request, "records_to_read": 100_000})["spark_settings"] == {}
    assert locate_json(spark, {"topic": "t", "partitions": {}})["spark_settings"] == {}
    assert during[-1] == before
    monkeypatch.setattr(common, "SMALL_RUN_RECORDS", 12)
    assert locate_json(spark, request)["spark_settings"] == small
