"""What find_gaps reads after a first run, built by the transforms a run uses."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from spark_jobs.reconcile_transform import (
    INTERVAL_SCHEMA,
    LEDGER_BOUND_SCHEMA,
    LEDGER_ENTRY_SCHEMA,
    transform_ledger_bounds,
    transform_ledger_open,
    transform_producer_ledger,
    transform_seq_coverage,
)


def first_run_gap_inputs(
    spark: SparkSession, raw: DataFrame, topic_records: DataFrame, place_failures: bool = False
) -> tuple[DataFrame, DataFrame, DataFrame]:
    """find_gaps' seq coverage, open ledger entries and session bounds after a first run that
    read `raw` (producer-ledger values of topic "t") and `topic_records`.

    Materialized, as a run reads them back from its state: else each find_gaps that a test
    calls parses the ledger again, several times over (~6-10 s a call against ~1.5 s)."""
    entries, new_bounds = transform_producer_ledger(raw, "t", place_failures=place_failures)
    coverage = transform_seq_coverage(spark.createDataFrame([], INTERVAL_SCHEMA), topic_records).localCheckpoint()
    ledger_open = transform_ledger_open(spark.createDataFrame([], LEDGER_ENTRY_SCHEMA), entries, coverage)
    bounds = transform_ledger_bounds(spark.createDataFrame([], LEDGER_BOUND_SCHEMA), new_bounds)
    return coverage, ledger_open.localCheckpoint(), bounds.localCheckpoint()
