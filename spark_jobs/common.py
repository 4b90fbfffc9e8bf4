"""Shared Spark helpers: one way to build a SparkSession for every job and test, and one
way to read offset ranges of a topic."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from spark_jobs.jars import local_jars
from spark_jobs.kafka_offsets import spark_source_options
from spark_jobs.kafka_options import REDACTED_OPTIONS_REGEX
from spark_jobs.reconcile_helpers import empty_frame
from spark_jobs.reconcile_schemas import KAFKA_RAW_SCHEMA

# Above this many records a read is split finer than one task per Kafka partition.
SPLIT_READS_OVER = 1_000_000


def launched_by_spark_submit() -> bool:
    """True in a driver that spark-submit started: its JVM (and configuration) exists already."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_spark_session(
    app_name: str,
    master: str | None = None,
    shuffle_partitions: int | None = None,
    settings: Mapping[str, str] | None = None,
) -> SparkSession:
    """Build (or join) the SparkSession for a job.

    master: explicit, else $SPARK_MASTER, else local[2]. shuffle_partitions: explicit, else
    $SPARK_SHUFFLE_PARTITIONS, else 8 (adaptive execution coalesces further). settings: more
    Spark settings for a session this process starts (`spark.driver.memory` among them, which
    only a JVM not yet running can take); a driver spark-submit started has its own.
    """
    resolved_master = master or os.environ.get("SPARK_MASTER") or "local[2]"
    partitions = shuffle_partitions or int(os.environ.get("SPARK_SHUFFLE_PARTITIONS", "8"))
    builder = (
        SparkSession.builder.appName(app_name)
        .master(resolved_master)
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.adaptive.enabled", "true")
        # One JVM runs many jobs (the test session, a driver's repeated runs): a reconciliation
        # alone generates more classes than the default 100 cached, so each run compiled
        # them again.
        .config("spark.sql.codegen.cache.maxEntries", "2000")
        # Else every DataFrame call from Python makes ~5 more calls into the JVM to record its
        # Python call site for error messages (a tenth of a small run's driver time); the
        # job's errors name the failed phase and the JVM's message instead.
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
        # Kafka options carry a JAAS line and may carry a private key: redacted in plans and errors.
        .config("spark.sql.redaction.options.regex", REDACTED_OPTIONS_REGEX)
    )
    if not launched_by_spark_submit():
        # spark-submit --jars already ships them to the executors; naming the driver's local
        # paths again in spark.jars replaces that list, and executors on a cluster then miss
        # the Kafka source classes (ClassNotFoundException: KafkaSourceRDDPartition).
        builder = builder.config("spark.jars", ",".join(local_jars()))
    if not launched_by_spark_submit():
        for key, value in (settings or {}).items():
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("SPARK_LOG_LEVEL", "WARN"))
    return spark


def read_kafka_ranges(
    spark: SparkSession,
    bootstrap_servers: str,
    kafka_config: Mapping[str, Any],
    topic: str,
    ranges: Mapping[int, tuple[int, int]],
    isolation: str,
    tasks_per_core: int = 2,
) -> DataFrame:
    """The records of `topic` in [start, end) per partition through Spark's Kafka source in
    batch mode, with headers (KAFKA_RAW_SCHEMA). Every Spark job reads the topic and the
    ledgers through this one reader."""
    wanted = {p: r for p, r in ranges.items() if r[1] > r[0]}
    if not wanted:
        return empty_frame(spark, KAFKA_RAW_SCHEMA)
    reader = (
        spark.read.format("kafka")
        .options(**spark_source_options(bootstrap_servers, kafka_config, topic))
        .option("assign", json.dumps({topic: sorted(wanted)}))
        .option("startingOffsets", json.dumps({topic: {str(p): s for p, (s, _) in wanted.items()}}))
        .option("endingOffsets", json.dumps({topic: {str(p): e for p, (_, e) in wanted.items()}}))
        .option("includeHeaders", "true")
        .option("kafka.isolation.level", isolation)
        # Transaction markers and aborted records leave holes in read_committed offsets, so
        # the source must not fail on holes. Real loss is checked by the callers instead
        # (reconcile_extract: plan_offsets' `lost` before the read,
        # check_nothing_deleted_while_read after it).
        .option("failOnDataLoss", "false")
    )
    if sum(e - s for s, e in wanted.values()) > SPLIT_READS_OVER:
        # one task per Kafka partition is too coarse for big partitions
        parallelism = spark.sparkContext.defaultParallelism
        reader = reader.option("minPartitions", str(max(parallelism * tasks_per_core, len(wanted))))
    return reader.load()
