"""The Spark locate job's pure transforms, on tiny inline frames."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pyspark.testing import assertDataFrameEqual

from spark_jobs import common
from spark_jobs.binding import RecordKeySpec
from spark_jobs.reconcile_transform import KAFKA_RAW_SCHEMA, PROCESSED_SCHEMA
from spark_jobs.stuck_locate import (
    locate_json,
    records_to_read,
    transform_key_hits,
    transform_keyed,
    transform_mark_summary,
    transform_partition_summary,
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

    expected = spark.createDataFrame(
        [(0, 3, 2, [("TCK-2", 1, T_MS, "s", 1)]), (1, 2, 2, [("TCK-2", 0, T_MS, None, None)])],
        "partition int, n long, keyed long, "
        "matches array<struct<key:string, offset:long, ts_ms:long, session:string, seq:long>>",
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


def test_a_small_read_runs_with_a_small_jobs_settings_for_the_locate_only(spark, monkeypatch) -> None:
    request = {
        "topic": "t",
        "bootstrap_servers": "127.0.0.1:1",
        "record_key": "key",
        "partitions": {"0": [5, 9, 10], "1": [0, 0, 4]},
        "starts": {"0": 7},  # the key index stands in for offsets 5 and 6
        "producer_ledger": {"topic": "p", "ranges": {"0": [2, 6]}},
        "consumer_ledger": {"topic": "c", "ranges": {"0": [3, 3]}},
        "keys": [],
    }
    assert records_to_read(request) == 3 + 4 + 4  # up to the high watermarks, and the ledgers' ranges
    before = {key: spark.conf.get(key, None) for key in ("spark.sql.codegen.factoryMode", "spark.sql.adaptive.enabled")}
    nothing_to_read = {**request, "partitions": {}, "producer_ledger": None, "consumer_ledger": None}

    small = locate_json(spark, nothing_to_read)["spark_settings"]

    assert small == {
        "spark.sql.codegen.wholeStage": "false",
        "spark.sql.codegen.factoryMode": "NO_CODEGEN",
        "spark.sql.shuffle.partitions": str(spark.sparkContext.defaultParallelism),
        "spark.sql.adaptive.enabled": "false",
    }
    assert {key: spark.conf.get(key, None) for key in before} == before  # restored after the locate
    monkeypatch.setattr(common, "SMALL_RUN_RECORDS", 0)
    assert locate_json(spark, nothing_to_read)["spark_settings"] == {}  # a large read: the session's own
