"""Extract functions against the real PostgreSQL: partitioned reads, window, column checks."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from pyspark.sql import SparkSession

from spark_jobs import reconcile_extract as reconcile
from spark_jobs.binding import Binding, BindingError, binding_from_dict
from spark_jobs.reconcile_parsing import transform_source_rows

pytestmark = pytest.mark.integration


@pytest.fixture
def tickets(source_database_url: str) -> Iterator[Binding]:
    table = f"ext_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f'CREATE TABLE {table} (id bigint PRIMARY KEY, "createdAt" timestamptz, note text)')
        conn.execute(
            f"INSERT INTO {table} SELECT g, timestamptz '2024-01-01 00:00:00+00' + g * interval '1 minute', 'x' "
            "FROM generate_series(1, 20) g"
        )
    yield binding_from_dict(
        {
            "name": "ext",
            "topic": "t",
            "bootstrap_servers": "127.0.0.1:1",
            "source_url": source_database_url,
            "table": table,
            "key_column": "id",
            "created_column": "createdAt",
        }
    )
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {table}")


def test_it_reads_the_window_in_partitions_on_a_numeric_key(spark: SparkSession, tickets: Binding, monkeypatch):
    monkeypatch.setattr(reconcile, "ROWS_PER_JDBC_PARTITION", 4)
    table, columns = reconcile.extract_source_columns(spark, tickets)
    assert table == f'"public"."{tickets.table}"'
    assert columns == {"id": "bigint", "createdAt": "timestamp with time zone", "note": "text"}
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    rows = reconcile.extract_source(
        spark, tickets, table, columns, t0 + timedelta(minutes=5), t0 + timedelta(minutes=15)
    )
    assert rows.rdd.getNumPartitions() == 3  # 10 rows, 4 per partition
    assert sorted((r.audit_key, r.audit_created) for r in rows.collect()) == [
        (i, datetime(2024, 1, 1) + timedelta(minutes=i))
        for i in range(6, 16)  # Spark hands back naive UTC
    ]


def test_it_names_a_missing_column_and_lists_the_real_ones(spark: SparkSession, tickets: Binding):
    broken = binding_from_dict(
        {
            **tickets.__dict__,
            "record_key": "key",
            "key_column": "ticket_no",
            "grace": 0,
            "lookback": 0,
            "consumer_groups": [],
            "since": None,
        }
    )
    with pytest.raises(
        BindingError,
        match=r"unknown column 'ticket_no' \(key_column\) in table public\.ext_\w+; it has: id, createdAt, note",
    ):
        reconcile.extract_source_columns(spark, broken)


@pytest.mark.parametrize(
    ("ddl", "unique"),
    [
        ("ALTER TABLE {t} ADD PRIMARY KEY (id)", True),
        ("ALTER TABLE {t} ADD CONSTRAINT {t}_u UNIQUE (id)", True),
        ("CREATE UNIQUE INDEX ON {t} (id)", True),
        ("CREATE INDEX ON {t} (id)", False),  # not unique
        ("CREATE UNIQUE INDEX ON {t} (id, note)", False),  # unique only with another column
        ("CREATE UNIQUE INDEX ON {t} (id) WHERE note = 'x'", False),  # partial
        ("CREATE UNIQUE INDEX ON {t} ((id + 0))", False),  # an expression, not the column
        ("ALTER TABLE {t} ADD PRIMARY KEY (note)", False),  # another column
        (None, False),
    ],
)
def test_the_catalog_vouches_for_one_row_per_key_only_through_a_unique_index_on_the_key_alone(
    spark: SparkSession, source_database_url: str, ddl: str | None, unique: bool
):
    table = f"uniq_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f'CREATE TABLE {table} (id bigint, "createdAt" timestamptz, note text NOT NULL)')
        if ddl:
            conn.execute(ddl.format(t=table))
    binding = binding_from_dict(
        {
            "name": "uniq",
            "topic": "t",
            "bootstrap_servers": "127.0.0.1:1",
            "source_url": source_database_url,
            "table": table,
            "key_column": "ID",  # matched as the database spells it
            "created_column": "createdAt",
        }
    )
    try:
        table_name, columns = reconcile.extract_source_columns(spark, binding)
        assert reconcile.source_key_unique(spark, binding, table_name, columns) is unique
    finally:
        with psycopg.connect(source_database_url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE {table}")


def test_rows_the_catalog_does_not_vouch_for_are_grouped_by_key(spark: SparkSession):
    t0 = datetime(2024, 1, 1)
    raw = spark.createDataFrame(
        [(1, t0 + timedelta(minutes=2)), (1, t0), (2, t0), (None, t0)], "audit_key long, audit_created timestamp"
    )
    grouped = sorted(tuple(r) for r in transform_source_rows(raw, "audit_key", "audit_created").collect())
    assert grouped == [("1", t0), ("2", t0)]  # the earliest row of a repeated key, no null key
    vouched = transform_source_rows(raw.where("audit_key = 2"), "audit_key", "audit_created", unique=True)
    assert [tuple(r) for r in vouched.collect()] == [("2", t0)]


def test_it_summarizes_each_partition_from_its_records(spark: SparkSession):
    at = [datetime(2024, 1, 1, 0, 0, s) for s in range(6)]
    records = spark.createDataFrame(
        [
            # partition 0: offsets out of order, the last one's timestamp earlier than another's
            ("a", 0, 7, at[3], "ok", False),
            ("b", 0, 5, at[1], "missing", False),
            (None, 0, 9, at[2], "malformed", False),
            ("c", 0, 8, at[5], "ok", False),
            # a tombstone on a JSON path: no key, and none needed (no item's record)
            (None, 0, 4, at[0], "missing", True),
            # partition 3: one record
            ("d", 3, 0, at[4], "ok", False),
        ],
        "key string, partition int, offset long, timestamp timestamp, header_status string, tombstone boolean",
    )
    summary = reconcile.summarize_partitions(records)
    ms = [int(moment.replace(tzinfo=UTC).timestamp() * 1000) for moment in at]
    assert summary == {
        0: reconcile.PartitionSummary(
            5,
            4,
            {"records_without_headers": 2, "records_malformed_headers": 1},
            (9, ms[2]),
            ms[0],
            tombstones=1,
            oldest=(ms[0], 4),
            unprobed_ms=ms[1],  # the latest record without any audit header: "b"
        ),
        3: reconcile.PartitionSummary(
            1, 1, {"records_without_headers": 0, "records_malformed_headers": 0}, (0, ms[4]), ms[4], oldest=(ms[4], 0)
        ),
    }


def test_it_takes_the_oldest_record_only_among_those_written_after_the_last_read(spark: SparkSession):
    """An old record re-read below the last read's log end (a rebuild reading again, an open
    transaction's records) must not hide a record past it stamped before that read."""
    at = [datetime(2024, 1, 1, 0, 0, s) for s in range(6)]
    records = spark.createDataFrame(
        [
            ("a", 0, 5, at[0], "ok", False),  # re-read: below the last read's log end, 7
            ("b", 0, 6, at[1], "ok", False),
            ("c", 0, 7, at[4], "ok", False),
            ("d", 0, 8, at[2], "ok", False),  # past it, and stamped before its neighbours
            ("e", 0, 9, at[5], "ok", False),
            ("f", 1, 3, at[3], "ok", False),  # partition 1 was not read before: all of it counts
            ("g", 2, 0, at[1], "ok", False),  # partition 2: nothing past 4 was read
        ],
        "key string, partition int, offset long, timestamp timestamp, header_status string, tombstone boolean",
    )
    ms = [int(moment.replace(tzinfo=UTC).timestamp() * 1000) for moment in at]

    summary = reconcile.summarize_partitions(records, {0: 7, 2: 4})

    assert {p: s.oldest for p, s in summary.items()} == {0: (ms[2], 8), 1: (ms[3], 3), 2: (None, None)}
    assert summary[0].first_ms == ms[0] and summary[0].n == 5  # the other aggregates take every record
    # an offset past 2^31 makes the bounds' map one of longs
    assert reconcile.summarize_partitions(records, {0: 7, 1: 2**31})[1].oldest == (None, None)
    assert {p: s.oldest for p, s in reconcile.summarize_partitions(records).items()} == {
        0: (ms[0], 5),
        1: (ms[3], 3),
        2: (ms[1], 0),
    }


@pytest.mark.parametrize("zone", ["Asia/Tokyo", "America/New_York"])
def test_a_created_column_without_a_time_zone_is_read_in_the_bindings_zone(
    spark: SparkSession, source_database_url: str, zone: str
) -> None:
    """The application writes wall-clock times of `zone` into a `timestamp` column. Ground
    truth: the instants 2024-01-01 00:00 UTC + g minutes it wrote. The window (00:05, 00:15]
    UTC holds rows 6-15, read as those instants."""
    table = f"ext_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, created_at timestamp without time zone)")
        conn.execute(
            f"INSERT INTO {table} SELECT g, "
            f"(timestamptz '2024-01-01 00:00:00+00' + g * interval '1 minute') AT TIME ZONE '{zone}' "
            "FROM generate_series(1, 20) g"
        )
    try:
        binding = binding_from_dict(
            {
                "name": "ext",
                "topic": "t",
                "bootstrap_servers": "127.0.0.1:1",
                "source_url": source_database_url,
                "table": table,
                "key_column": "id",
                "created_column": "created_at",
                "timestamp_zone": zone,
            }
        )
        t0 = datetime(2024, 1, 1, tzinfo=UTC)
        found, columns = reconcile.extract_source_columns(spark, binding)
        rows = reconcile.extract_source(
            spark, binding, found, columns, t0 + timedelta(minutes=5), t0 + timedelta(minutes=15)
        )
        assert sorted((r.audit_key, r.audit_created) for r in rows.collect()) == [
            (i, datetime(2024, 1, 1) + timedelta(minutes=i)) for i in range(6, 16)
        ]
        # Read as UTC (the default), the window would hold other rows or none.
        as_utc = binding_from_dict(
            {
                **binding.__dict__,
                "record_key": "key",
                "grace": 0,
                "lookback": 0,
                "consumer_groups": [],
                "since": None,
                "timestamp_zone": None,
            }
        )
        assert as_utc.timestamp_zone == "UTC"
        shifted = reconcile.extract_source(
            spark, as_utc, found, columns, t0 + timedelta(minutes=5), t0 + timedelta(minutes=15)
        )
        assert sorted(r.audit_key for r in shifted.collect()) != list(range(6, 16))
    finally:
        with psycopg.connect(source_database_url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE {table}")


def test_a_timestamp_zone_must_be_a_known_iana_name(source_database_url: str) -> None:
    base = {
        "name": "ext",
        "topic": "t",
        "bootstrap_servers": "127.0.0.1:1",
        "source_url": source_database_url,
        "table": "t",
        "key_column": "id",
        "created_column": "created_at",
    }
    assert binding_from_dict(base).timestamp_zone == "UTC"
    assert binding_from_dict(base | {"timestamp_zone": "Europe/Paris"}).timestamp_zone == "Europe/Paris"
    with pytest.raises(BindingError, match=r"timestamp_zone 'Mars/Olympus' is not a known time zone"):
        binding_from_dict(base | {"timestamp_zone": "Mars/Olympus"})
    with pytest.raises(BindingError, match=r"must be an IANA time zone name"):
        binding_from_dict(base | {"timestamp_zone": "UTC'; drop table t; --"})
