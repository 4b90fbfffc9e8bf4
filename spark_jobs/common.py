"""Shared Spark helpers: one way to build a SparkSession for every job and test, and one
way to read offset ranges of a topic."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from confluent_kafka.admin import AdminClient
from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession

from spark_jobs.jars import local_jars
from spark_jobs.kafka_offsets import spark_source_options
from spark_jobs.kafka_options import REDACTED_OPTIONS_REGEX
from spark_jobs.reconcile_helpers import empty_frame
from spark_jobs.reconcile_schemas import KAFKA_RAW_SCHEMA

# Above this many records a read is split finer than one task per Kafka partition.
SPLIT_READS_OVER = 1_000_000

# A job whose input (and state) is smaller than this (in records) is all fixed cost: its
# expressions are interpreted instead of compiled to Java first (Janino compiling the
# generated code is most of such a job's executor time, and a fresh JVM, which every
# spark-submit run is, compiles all of it). Above it, compiled code pays for itself.
SMALL_RUN_RECORDS = 100_000
INTERPRETED = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}

POLL_TIMEOUT_ENV = "RECONCILE_KAFKA_POLL_TIMEOUT_MS"


def kafka_poll_timeout_ms() -> int | None:
    """$RECONCILE_KAFKA_POLL_TIMEOUT_MS, or None: Spark's own (spark.network.timeout, 120 s).

    How long a Spark task's Kafka consumer polls for a record it was told to read. A read
    planned past a log end that moved back (a truncation between planning and reading) waits
    this long before the source sees the offset is gone and stops the partition there."""
    raw = os.environ.get(POLL_TIMEOUT_ENV)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{POLL_TIMEOUT_ENV} must be a whole number of milliseconds, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"{POLL_TIMEOUT_ENV} must be more than 0 milliseconds, got {raw!r}")
    return value


def is_small(records: int) -> bool:
    """Whether a job over this many records is all fixed cost (SMALL_RUN_RECORDS)."""
    return records < SMALL_RUN_RECORDS


def cores(spark: SparkSession) -> int:
    """As many partitions as a small job shuffles into and writes: the cores Spark has."""
    return max(1, spark.sparkContext.defaultParallelism)


def small_job_settings(spark: SparkSession, records: int, little_new: bool = False) -> dict[str, str]:
    """The settings a job over `records` records runs with instead of the session's: none for
    a large job. little_new: the job's new data is small even if what it reads is not."""
    settings: dict[str, str] = {}
    if little_new or is_small(records):
        # Little new data (or little data at all): shuffle it in as many partitions as there
        # are cores instead of the session's default; each partition is a task per stage.
        settings["spark.sql.shuffle.partitions"] = str(cores(spark))
        # With so few partitions adaptive execution has nothing to coalesce, and the joins
        # with small data are broadcast by hint; it would only run each query's stages as
        # jobs of their own (43 jobs against 20 in an incremental reconciliation at 1M keys,
        # which then took 7.0 s against 7.9 s: the median of five rounds each, interleaved).
        # The same holds for a first or full run of a few records: its findings were 20
        # jobs, 6 without (nine reconciliation tests, two rounds each: 222.6 and 224.9 s
        # against 236.5 and 236.3 s).
        settings["spark.sql.adaptive.enabled"] = "false"
    if is_small(records):
        settings |= INTERPRETED
    return settings


@contextmanager
def settings_applied(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """`settings` set on the session for the block's duration, then restored."""
    before: dict[str, str | None] = {key: spark.conf.get(key, None) for key in settings}
    try:
        for key, value in settings.items():
            spark.conf.set(key, value)
        yield dict(settings)
    finally:
        for key, earlier in before.items():
            if earlier is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, earlier)


def launched_by_spark_submit() -> bool:
    """True in a driver that spark-submit started: its JVM (and configuration) exists already."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


class SparkMasterError(RuntimeError):
    """The Spark master named does not answer."""


def check_master_answers(master: str, timeout_s: float = 5.0) -> None:
    """Raise SparkMasterError unless a standalone master (`spark://host:port`, or several for
    HA, comma-separated) takes a connection. Spark itself retries an absent master for about
    a minute, then fails with a stack trace that does not name it. Other masters (local,
    yarn, k8s://) are not checked."""
    if not master.startswith("spark://"):
        return
    refused = []
    for address in master[len("spark://") :].split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout_s).close()
            return
        except (OSError, ValueError) as exc:
            refused.append(f"{address}: {getattr(exc, 'strerror', None) or exc}")
    raise SparkMasterError(
        f"the Spark master {master} (SPARK_MASTER) does not answer ({'; '.join(refused)}): start it, or set "
        "SPARK_MASTER to a running master (local[*] runs Spark inside the auditor's own process)"
    )


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
    if SparkContext._active_spark_context is None:  # joining a running one needs no master
        check_master_answers(resolved_master)
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
    admin: AdminClient | None = None,
) -> DataFrame:
    """The records of `topic` in [start, end) per partition through Spark's Kafka source in
    batch mode, with headers (KAFKA_RAW_SCHEMA). Every Spark job reads the topic and the
    ledgers through this one reader. `admin`: the run's admin client, which tells the brokers
    to bootstrap from (spark_source_options)."""
    wanted = {p: r for p, r in ranges.items() if r[1] > r[0]}
    if not wanted:
        return empty_frame(spark, KAFKA_RAW_SCHEMA)
    reader = (
        spark.read.format("kafka")
        .options(**spark_source_options(bootstrap_servers, kafka_config, topic, admin))
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
    poll_timeout_ms = kafka_poll_timeout_ms()
    if poll_timeout_ms is not None:
        reader = reader.option("kafkaConsumer.pollTimeoutMs", str(poll_timeout_ms))
    if sum(e - s for s, e in wanted.values()) > SPLIT_READS_OVER:
        # one task per Kafka partition is too coarse for big partitions
        parallelism = spark.sparkContext.defaultParallelism
        reader = reader.option("minPartitions", str(max(parallelism * tasks_per_core, len(wanted))))
    return reader.load()
