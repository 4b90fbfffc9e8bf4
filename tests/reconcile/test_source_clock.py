"""The source window ends at the source database's clock where the driver's runs ahead of it.

Rows are stamped by the database (`created_at` defaulting to now()). A Spark driver whose
clock runs ahead of the database's by more than the grace used to put a row committed a
moment ago, whose record is still on its way, below the cutoff: `missing`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from spark_jobs.binding import binding_from_dict
from spark_jobs.reconcile import run
from spark_jobs.reconcile_plan import CLOCK_NOTE_SECONDS, RunOptions, window_end


@pytest.fixture
def table(source_database_url: str) -> Iterator[str]:
    name = f"clock_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {name} (id bigint PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now())")
    yield name
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {name}")


@pytest.mark.integration
def test_a_row_committed_a_moment_ago_is_not_missing_when_the_drivers_clock_runs_ahead(
    spark: SparkSession, kafka_bootstrap: str, source_database_url: str, make_topic, table: str, tmp_path: Path
):
    topic = make_topic("clock")
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})
    delivered: list[int] = []
    for ticket in (1, 2):
        producer.produce(
            topic,
            key=str(ticket).encode(),
            value=json.dumps({"ticket_id": ticket}).encode(),
            on_delivery=lambda err, msg: delivered.append(int(msg.key())) if err is None else None,
        )
    assert producer.flush(30) == 0
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        # 1 and 2 have their records; 3 never got one, ten minutes ago; 4 was committed just
        # now by the database's clock and its record is not produced yet (in flight).
        for ticket, age in ((1, "20 minutes"), (2, "20 minutes"), (3, "10 minutes")):
            conn.execute(f"INSERT INTO {table} (id, created_at) VALUES (%s, now() - %s::interval)", (ticket, age))
        conn.execute(f"INSERT INTO {table} (id) VALUES (4)")
        row = conn.execute(f"SELECT now() - created_at FROM {table} WHERE id = 4").fetchone()
    # Ground truth from the clients and the table: the broker acked 1 and 2 only; 4's row
    # is younger than the grace by the database's own clock.
    assert sorted(delivered) == [1, 2]
    assert row is not None and row[0] < timedelta(seconds=30)

    binding = binding_from_dict(
        {
            "name": f"b-{topic}",
            "topic": topic,
            "bootstrap_servers": kafka_bootstrap,
            "source_url": source_database_url,
            "table": f"public.{table}",
            "key_column": "id",
            "created_column": "created_at",
            "record_key": "json:$.ticket_id",
            "grace": "30s",
            "producer_ledger_topic": f"_audit.none-{uuid.uuid4().hex[:8]}",
        }
    )
    # The driver's clock a quarter of an hour ahead of the database's.
    ahead = datetime.now(UTC) + timedelta(minutes=15)
    result = run(spark, binding, RunOptions(state_dir=str(tmp_path), now=ahead))
    assert result["status"] == "ok", result["error"]
    missing = sorted(f["key"] for f in result["findings"] if f["kind"] == "missing")
    assert missing == ["3"], result["findings"]  # 4 is in flight; the old code said ["3", "4"]
    assert any("the source database's clock is" in w and "behind this driver's" in w for w in result["warnings"]), (
        result["warnings"]
    )
    assert datetime.fromisoformat(result["window"]["upper"]) < ahead - timedelta(minutes=14)


def test_the_window_ends_at_the_earlier_clock_and_says_so_only_when_it_matters():
    driver = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
    # the database behind: its time, named when the gap is worth naming
    behind = driver - timedelta(minutes=5)
    assert window_end(driver, behind) == (
        behind,
        ["the source database's clock is 300s behind this driver's: the window ends at the database's time"],
    )
    slightly = driver - timedelta(seconds=CLOCK_NOTE_SECONDS / 10)
    assert window_end(driver, slightly) == (slightly, [])
    # the database ahead: the driver's
    assert window_end(driver, driver + timedelta(minutes=5)) == (driver, [])
