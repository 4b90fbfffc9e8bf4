"""One SparkSession reads a topic through the Kafka source and a table through JDBC."""

from __future__ import annotations

import os
import uuid

import psycopg
import pytest
from confluent_kafka import Producer

pytestmark = pytest.mark.integration


def jdbc(url: str) -> tuple[str, dict[str, str]]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return (
        f"jdbc:postgresql://{parts.hostname}:{parts.port}{parts.path}",
        {"user": parts.username or "", "password": parts.password or "", "driver": "org.postgresql.Driver"},
    )


def test_it_reads_kafka_and_postgres_in_one_session(spark, kafka_bootstrap, make_topic):
    topic = make_topic("spark", partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(10):
        producer.produce(topic, key=str(i).encode(), value=b"v", partition=i % 2)
    assert producer.flush(30) == 0

    table = f"spark_check_{uuid.uuid4().hex[:8]}"
    source_url = os.environ["SOURCE_DATABASE_URL"]
    with psycopg.connect(source_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int primary key, status text)")
        conn.execute(f"INSERT INTO {table} SELECT g, 'NEW' FROM generate_series(1, 7) g")
    try:
        records = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", kafka_bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
        )
        keys = sorted(int(row.key.decode()) for row in records.select("key").collect())
        assert keys == list(range(10))
        assert records.select("partition").distinct().count() == 2

        url, props = jdbc(source_url)
        rows = spark.read.jdbc(url, table, properties=props)
        assert rows.count() == 7
        assert {r.status for r in rows.collect()} == {"NEW"}
    finally:
        with psycopg.connect(source_url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE {table}")
