"""Rows that become visible below the window a run reads (a transaction committed long after
its created_at, a lagging replica, a backfill) against a real broker, PostgreSQL and Spark.

The ground truth is what the test wrote: which rows the table holds (psycopg) and which
records the topic holds (delivery reports). A record whose row exists is no orphan, however
late the row became visible; a record whose key has no row is one.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from spark_jobs import late_rows
from spark_jobs.binding import Binding, binding_from_dict
from spark_jobs.reconcile import run
from spark_jobs.reconcile_plan import RunOptions

pytestmark = pytest.mark.integration


@dataclass
class Pipeline:
    bootstrap: str
    source_url: str
    topic: str
    table: str

    def insert(self, key: Any, age: str) -> None:
        with psycopg.connect(self.source_url, autocommit=True) as conn:
            conn.execute(f"INSERT INTO {self.table} (id, created_at) VALUES (%s, now() - %s::interval)", (key, age))

    def produce(self, *keys: Any) -> dict[str, tuple[int, int]]:
        """One record per key, stamped ten minutes ago (past the grace period); where each landed."""
        landed: dict[str, tuple[int, int]] = {}
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0})

        def delivered(err: Any, msg: Any) -> None:
            assert err is None, err
            landed[str(json.loads(msg.value())["id"])] = (msg.partition(), msg.offset())

        for key in keys:
            producer.produce(
                self.topic,
                value=json.dumps({"id": key}).encode(),
                timestamp=int(time.time() * 1000) - 600_000,
                on_delivery=delivered,
            )
        assert producer.flush(30) == 0
        assert len(landed) == len(keys)
        return landed

    def binding(self) -> Binding:
        return binding_from_dict(
            {
                "name": f"late-{self.table}",
                "topic": self.topic,
                "bootstrap_servers": self.bootstrap,
                "source_url": self.source_url,
                "table": self.table,
                "key_column": "id",
                "created_column": "created_at",
                "record_key": "json:$.id",
                "grace": "30s",
                "lookback": "1m",
                "guarantee": "at-least-once",
            }
        )


def pipeline_of(key_type: str, kafka_bootstrap: str, source_database_url: str, make_topic) -> Iterator[Pipeline]:
    table = f"late_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id {key_type} PRIMARY KEY, created_at timestamptz NOT NULL)")
    yield Pipeline(kafka_bootstrap, source_database_url, make_topic("late", partitions=2), table)
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")


@pytest.fixture
def tickets(kafka_bootstrap: str, source_database_url: str, make_topic) -> Iterator[Pipeline]:
    yield from pipeline_of("bigint", kafka_bootstrap, source_database_url, make_topic)


@pytest.fixture
def codes(kafka_bootstrap: str, source_database_url: str, make_topic) -> Iterator[Pipeline]:
    yield from pipeline_of("text", kafka_bootstrap, source_database_url, make_topic)


def orphans(result: dict[str, Any]) -> dict[str, tuple[int, int]]:
    assert result["status"] == "ok", result["error"]
    return {f["key"]: (f["partition"], f["offset"]) for f in result["findings"] if f["kind"] == "orphan"}


def reconcile(spark: SparkSession, binding: Binding, state: Path, full: bool = False) -> dict[str, Any]:
    return run(spark, binding, RunOptions(state_dir=str(state), full=full))


@pytest.mark.parametrize("lookup", ["by-value", "whole-key-column", "by-value-refused"])
def test_a_row_that_becomes_visible_below_the_window_leaves_no_orphan(
    spark: SparkSession, tickets: Pipeline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lookup: str
):
    if lookup == "whole-key-column":  # more candidate keys than are looked up by value
        monkeypatch.setattr(late_rows, "LOOKUP_KEYS", 0)
    if lookup == "by-value-refused":  # a key the database refuses in a query: the column is read instead
        monkeypatch.setattr(late_rows, "key_literals", lambda keys, data_type: ["'x'::no_such_type"])
    tickets.insert(1, "5 minutes")
    landed = tickets.produce(1, 2, 3)
    binding = tickets.binding()
    # The first run reads every row up to now: rows 2 and 3 do not exist yet.
    assert orphans(reconcile(spark, binding, tmp_path, full=True)) == {"2": landed["2"], "3": landed["3"]}
    # Row 2 commits now with a creation time two hours back: below the next window (lookback 1m).
    tickets.insert(2, "2 hours")
    assert orphans(reconcile(spark, binding, tmp_path)) == {"3": landed["3"]}
    # The row found late is known from then on: a later record of key 2 is no orphan either,
    # even once the row is gone from the table (as for any row a run saw).
    with psycopg.connect(tickets.source_url, autocommit=True) as conn:
        conn.execute(f"DELETE FROM {tickets.table} WHERE id = 2")
    again = tickets.produce(2, 4)
    assert orphans(reconcile(spark, binding, tmp_path)) == {"3": landed["3"], "4": again["4"]}


def test_text_keys_are_looked_up_by_value_whatever_they_hold(spark: SparkSession, codes: Pipeline, tmp_path: Path):
    quoted, escaped, absent = "o'brien", "back\\slash", "no'row\\here"
    landed = codes.produce(quoted, escaped, absent)
    binding = codes.binding()
    assert set(orphans(reconcile(spark, binding, tmp_path, full=True))) == {quoted, escaped, absent}
    codes.insert(quoted, "3 hours")
    codes.insert(escaped, "3 hours")
    assert orphans(reconcile(spark, binding, tmp_path)) == {absent: landed[absent]}


def test_key_literals_keep_only_keys_the_column_can_hold():
    assert late_rows.key_literals(["15", "015", "-3", "x", "9" * 30, "0"], "bigint") == ["15", "-3", "0"]
    assert late_rows.key_literals(["a'b", "c\\d", "e\x00"], "text") == ["E'a''b'", "E'c\\\\d'"]
    uuid_key = "0b7c1b1e-8f4e-4c8a-9d55-2f3b1c2d3e4f"
    assert late_rows.key_literals([uuid_key, uuid_key.upper(), "x"], "uuid") == [f"'{uuid_key}'::uuid"]
    # a final newline passes `$` of re.match: a key "15\n" is no row 15's, and "<uuid>\n" no uuid
    assert late_rows.key_literals(["15\n", "16"], "bigint") == ["16"]
    assert late_rows.key_literals([uuid_key + "\n"], "uuid") == []
    assert late_rows.key_literals(["1.5"], "numeric") is None  # read the key column instead
    assert late_rows.key_literals(["a", "b" * 1001], "text") is None  # too long to send
