"""Whether a run's reads may have been read again, with records missing, after an executor
was lost.

A run caches what it read (the topic, the ledgers) on the executors. An executor lost during
the run (killed, out of memory, a preempted node) takes its cached blocks with it, and Spark
reads those parts again from Kafka when a later phase needs them. The Kafka source skips what
retention or `delete_records` removed since, and what a truncation cut (failOnDataLoss=false,
see common.extract_topic), so a part read again can hold fewer records than the part the run
checked (reconcile_extract.check_nothing_deleted_while_read): rows would be reported missing
whose records the run had read. In local mode the executors are the driver: one lost ends
the run.

`ExecutorWatch` notes the executors it sees at each phase of the run; before the run may
publish, `check_reads_unchanged` reads the log starts and ends again when one of them is gone,
and fails the run if any read range lost records since.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from spark_jobs.kafka_offsets import partition_offsets, starts_passed


class ExecutorWatch:
    """The executors seen during one run, by their ids (never reused within an application: an
    executor started again on the same host and port, as with a fixed spark.blockManager.port,
    is another id); inert in local mode."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        self.active = not runs_locally(spark)
        self.seen: set[str] = set()
        self.look()

    def _now(self) -> set[str]:
        ids = str(self._spark.sparkContext._jsc.sc().getExecutorIds().mkString(","))
        return {f"executor {i}" for i in ids.split(",") if i}

    def look(self) -> None:
        if self.active:
            self.seen |= self._now()

    def lost(self) -> list[str]:
        """The executors seen during the run that are gone now."""
        if not self.active:
            return []
        return sorted(self.seen - self._now())


def runs_locally(spark: SparkSession) -> bool:
    """Whether the executors are this process (a local master): no executor can be lost, nor
    see another disk, without the driver."""
    return (spark.sparkContext.master or "local").startswith("local")


def reads_shortened(admin: object, reads: list[tuple[str, dict[int, tuple[int, int]]]]) -> list[str]:
    """Per range read (topic, {partition: (start, end)}), where its log now starts past its start
    (kafka_offsets.starts_passed) or ends before its end."""
    where = []
    for topic, ranges in reads:
        wanted = sorted(p for p, (start, end) in ranges.items() if end > start)
        if not wanted:
            continue
        now = partition_offsets(admin, topic, wanted)  # type: ignore[arg-type]
        passed = starts_passed(ranges, now)
        for p in wanted:
            start, end = ranges[p]
            if p in passed:
                where.append(f"{topic}/{p} now starts at offset {now[p].low}, past {start} where this run read from")
            elif now[p].high < end:
                where.append(f"{topic}/{p} now ends at offset {now[p].high}, before {end} where this run read to")
    return where
