"""Shared Spark helpers: one way to build a SparkSession for every job and test."""

from __future__ import annotations

import os
from pathlib import Path

from pyspark.sql import SparkSession

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JARS_DIR = REPO_ROOT / ".cache" / "spark" / "jars"


def local_jars(jars_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """The jars Spark needs beyond PySpark (Kafka source, JDBC driver), cached by the stack.

    Nothing is downloaded at run time: a missing folder is an error naming it.
    """
    folder = Path(jars_dir or os.environ.get("SPARK_JARS_DIR") or DEFAULT_JARS_DIR)
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    if not jars:
        raise FileNotFoundError(
            f"no Spark jars in {folder} (SPARK_JARS_DIR): run the stack bootstrap to cache "
            "spark-sql-kafka and the PostgreSQL JDBC driver"
        )
    return jars


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
        .config("spark.jars", ",".join(local_jars()))
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("SPARK_LOG_LEVEL", "WARN"))
    return spark
