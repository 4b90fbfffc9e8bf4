"""Shared Spark helpers: one way to build a SparkSession for every job and test."""

from __future__ import annotations

import os

from pyspark.sql import SparkSession

from spark_jobs.jars import local_jars
from spark_jobs.kafka_options import REDACTED_OPTIONS_REGEX


def launched_by_spark_submit() -> bool:
    """True in a driver that spark-submit started: its JVM (and configuration) exists already."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_spark_session(
    app_name: str,
    master: str | None = None,
    shuffle_partitions: int | None = None,
) -> SparkSession:
    """Build (or join) the SparkSession for a job.

    master: explicit, else $SPARK_MASTER, else local[2]. shuffle_partitions: explicit, else
    $SPARK_SHUFFLE_PARTITIONS, else 8 (adaptive execution coalesces further).
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
        # Kafka options carry a JAAS line and may carry a private key: redacted in plans and errors.
        .config("spark.sql.redaction.options.regex", REDACTED_OPTIONS_REGEX)
    )
    if not launched_by_spark_submit():
        # spark-submit --jars already ships them to the executors; naming the driver's local
        # paths again in spark.jars replaces that list, and executors on a cluster then miss
        # the Kafka source classes (ClassNotFoundException: KafkaSourceRDDPartition).
        builder = builder.config("spark.jars", ",".join(local_jars()))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("SPARK_LOG_LEVEL", "WARN"))
    return spark
