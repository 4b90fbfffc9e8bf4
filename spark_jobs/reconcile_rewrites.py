"""Processed marks of records the broker lost, and the records now at their offsets.

When a partition's tail is truncated and rewritten (an unclean leader election, a broker that
lost its disk), new records take the offsets of the lost ones. The consumer ledger still
holds the marks a group made of the lost records, at those offsets: read as marks of the new
records they made a record processed once look processed twice (`reprocessed`) and hid a
record never processed (`unprocessed`). A mark says only (partition, offset, time), so which
record it was of is told by time: the new records were written after the truncation, the
lost ones' marks were made before it.

A rebuild finds, per rewritten partition, the last offset it can prove still holds the record
an earlier run saw there (same key and timestamp at the offset the key index has: truncation
removes a suffix, so every offset up to it survived) and the first record written after it
(at or after the time the earlier run read the partition, give or take the grace). Past that
offset, marks made up to that record's time plus the grace may be of either and are left
out, and records written up to then are not judged unprocessed: unknown, never a finding.
The rule is kept in state.json (`marks_rewritten`) and applied by every later run (a lost
record's mark may reach the ledger late) and by the stuck diagnosis.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_jobs.mark_rules import RECORD_SLACK_MS, MarkRule
from spark_jobs.reconcile_helpers import conform
from spark_jobs.reconcile_schemas import KEY_INDEX_SCHEMA


def find_mark_rules(
    records: DataFrame,
    old_index: DataFrame,
    rewritten: Iterable[int],
    lows: Mapping[int, int],
    read_since: datetime | None,
    upper: datetime,
    grace_seconds: float,
) -> list[MarkRule]:
    """The rule of each rewritten partition (module doc).

    records: this rebuild's read (RECORD_SCHEMA); old_index: the key index earlier runs left;
    lows: each partition's log start; read_since: when the earlier run read the partitions
    (its window_upper: the truncation came after, so the new records are no older, give or
    take the grace); upper: this run's time, the bound when no record was written since."""
    partitions = sorted(set(rewritten))
    if not partitions:
        return []
    ours = records.where(F.col("partition").isin(partitions)).select("key", "partition", "offset", "timestamp")
    seen = conform(old_index, KEY_INDEX_SCHEMA).where(F.col("partition").isin(partitions))
    proven = {
        row["partition"]: row["after"]
        for row in ours.join(seen.select("key", "partition", "offset", "timestamp"), list(ours.columns), "left_semi")
        .groupBy("partition")
        .agg(F.max("offset").alias("after"))
        .collect()
    }
    after = {p: int(proven.get(p, lows.get(p, 0) - 1)) for p in partitions}
    past = F.lit(False)
    for p, offset in after.items():
        past = past | ((F.col("partition") == p) & (F.col("offset") > offset))
    later = ours.where(past).select("partition", F.unix_millis("timestamp").alias("ms"))
    if read_since is not None:
        later = later.where(F.col("ms") >= int((read_since.timestamp() - grace_seconds) * 1000))
    first = {
        row["partition"]: row["first"] for row in later.groupBy("partition").agg(F.min("ms").alias("first")).collect()
    }
    grace_ms, upper_ms = int(grace_seconds * 1000), int(upper.timestamp() * 1000)
    rules = []
    for p in partitions:
        rules.append(MarkRule(p, after[p], first[p] + grace_ms if first.get(p) is not None else upper_ms))
    return rules


def _within(rules: Sequence[MarkRule], time_ms: Column, slack_ms: int = 0) -> Column:
    hit = F.lit(False)
    for rule in rules:
        hit = hit | (
            (F.col("partition") == rule.partition)
            & (F.col("offset") > rule.after)
            & (time_ms <= rule.until_ms + slack_ms)
        )
    return hit


def without_rewritten_marks(processed: DataFrame, rules: Sequence[MarkRule]) -> DataFrame:
    """Processed marks (PROCESSED_SCHEMA) less those the rules leave out."""
    return processed.where(~_within(rules, F.col("ts_ms"))) if rules else processed


def judged_despite_rewrites(records: DataFrame, rules: Sequence[MarkRule]) -> DataFrame:
    """Records (with partition, offset, timestamp) less those written where and when a lost
    record's mark could be taken for theirs (up to the bound, and RECORD_SLACK_MS after it: their
    own mark, by the consumer's clock, may be no later than the bound)."""
    return records.where(~_within(rules, F.unix_millis("timestamp"), RECORD_SLACK_MS)) if rules else records
