"""Locate stuck items' records in a topic and in the probe ledgers, at scale.

    python spark_jobs/stuck_locate.py --request request.json --output result.json

The Django side (auditor/stuck/locate.py) fixes the offsets to read and the stuck keys;
this job joins the topic's records and the ledgers' entries with the keys (broadcast) on the
executors and hands back only the matches, so the driver's memory follows the number of
stuck items, never the size of the topic. Each read is one aggregation pass that also
returns the per-partition counts needed to decide whether the read_uncommitted view is
needed (offset holes below the last stable offset mean transaction markers or aborted
records).

Request: {"topic", "bootstrap_servers", "kafka_config", "record_key", "groups",
          "partitions": {p: [log_start, last_stable, high_watermark]},
          "starts": {p: offset},   (optional: read the topic from here; the key index covers below)
          "known_records": [[key, p, offset, ts_ms, state, session, seq]]  (optional: found below)
          "producer_ledger": {"topic", "ranges": {p: [start, end]}} | null,
          "consumer_ledger": {...} | null, "keys": [...] | "keys_path": "<jsonl of {"key": k}>",
          "records_to_read": n}  (optional: topic and ledger records read, at most; absent: a large read)
Result:  {"records": [[key, p, offset, ts_ms, state, session, seq]], "records_scanned", "keyed_records",
          "unprobed_record_ms" (the latest record read without any audit header, or null),
          "miskeyed_record_ms", "miskeyed_session" (the latest record read whose audit id is not its key,
          and its producer session, or nulls),
          "ledger_entries": [[audit_id, session, seq, status, p, offset, error, persisted, ts_ms, to_ms,
                           acked_by_ms]],
          "ledger_entries_for_topic", "ledger_covers_from_ms",
          "untraced_sessions": [[session, last_ms, alive_ms, ledgers_sends]] (unclosed producer sessions),
          "marks": [[group, p, offset, consumer_session, ts_ms]],
          "group_marks": {group: n}, "last_mark_below_low_ms": {group: ms}, "max_mark_below_low": [[group, p, offset]],
          "first_mark": [[group, p, offset]], "first_mark_ms": {group: ms},
          "lost_marks": [[group, p, first, last, reason]] (marks-lost records), "timings": {...},
          "spark_settings": {conf: value set for this locate only}}
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.binding import RecordKeySpec, parse_record_key
from spark_jobs.common import build_spark_session, read_kafka_ranges, settings_applied, small_job_settings
from spark_jobs.reconcile_parsing import AUDIT_HEADERS, AUDIT_V2_HEADER, audit_id, producer_ledger_covers_from
from spark_jobs.reconcile_transform import (
    ACKED_RANGE,
    KEYED,
    SENT,
    audit_seq,
    audit_session,
    range_anti,
    record_key_expression,
    transform_consumer_ledger,
    transform_lost_marks,
    transform_producer_failures,
    transform_producer_ledger,
)

Ranges = dict[int, tuple[int, int]]


# ------------------------------------------------------------------ extract ----------


def extract_range(
    spark: SparkSession, request: dict[str, Any], topic: str, ranges: Ranges, isolation: str
) -> DataFrame:
    """Records of `topic` in [start, end) per partition, through Spark's Kafka source (batch)."""
    return read_kafka_ranges(
        spark, request["bootstrap_servers"], request.get("kafka_config") or {}, topic, ranges, isolation, 4
    )


def extract_keys(spark: SparkSession, request: dict[str, Any]) -> DataFrame:
    """The stuck keys as a DataFrame. A keys file is read here, on the driver: it sits in the
    submitter's temporary folder, which executors on other hosts of a cluster cannot reach."""
    if "keys_path" in request:
        with open(request["keys_path"], encoding="utf-8") as lines:
            keys = [(json.loads(line)["key"],) for line in lines if line.strip()]
    else:
        keys = [(k,) for k in request["keys"]]
    return spark.createDataFrame(keys, "key string").distinct()


# ------------------------------------------------------------------ transforms -------


def transform_keyed(raw: DataFrame, spec: RecordKeySpec) -> DataFrame:
    """Kafka source rows -> key (by the binding's rule), partition, offset, timestamp, headers.

    The audit headers stay raw: they are parsed only for the few records that match (and the
    audit id, for comparing it with the key).
    """
    return raw.select(
        record_key_expression(spec).alias("key"),
        audit_id().alias("audit_id"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"),
        F.col("timestamp"),
        F.col("headers"),
    )


def transform_key_hits(keyed: DataFrame, keys: DataFrame) -> DataFrame:
    """keyed records with `_hit` true where the key is a stuck key (keys broadcast)."""
    flagged = keys.select("key", F.lit(True).alias("_hit"))
    return keyed.join(F.broadcast(flagged), "key", "left").withColumn("_hit", F.coalesce("_hit", F.lit(False)))


def transform_unattributed(
    raw_ledger: DataFrame,
    topic: str,
    seen: DataFrame,
    seen_intervals: DataFrame | None = None,
    keyed: DataFrame | None = None,
) -> DataFrame:
    """One row, `to_ms`: the latest end of a v2 range of `topic` holding a sequence absent from
    `seen` (session, seq of the records read) and from `seen_intervals` (session, start, end:
    what reconciliation runs read below where this read started) and from `keyed` (session, seq: sequences
    a `keys` record names, ledgered under their key), in a session with more absent sequences than
    not-persisted failure reports (each of those is one certainly absent record); null when none.
    The rule of auditor.stuck.locate_python.unattributed_until."""
    parsed = raw_ledger.select(
        F.from_json(
            F.col("value").cast("string"), "type string, pid string, topic string, entries array<array<string>>"
        ).alias("m")
    ).where(F.col("m.topic") == topic)
    ranges = (
        parsed.where(F.col("m.type") == "ranges")
        .select(F.col("m.pid").alias("session"), F.explode("m.entries").alias("e"))
        .select(
            "session",
            F.get(F.col("e"), 4).try_cast("long").alias("to_ms"),
            F.explode(F.sequence(F.get(F.col("e"), 0).try_cast("long"), F.get(F.col("e"), 1).try_cast("long"))).alias(
                "seq"
            ),
        )
    )
    absent = ranges.join(seen.where(F.col("session").isNotNull()).distinct(), ["session", "seq"], "left_anti")
    if seen_intervals is not None:
        absent = range_anti(absent, seen_intervals, ["session"], "seq")
    if keyed is not None:
        absent = absent.join(keyed.select("session", "seq").distinct(), ["session", "seq"], "left_anti")
    per_session = absent.groupBy("session").agg(F.count_distinct("seq").alias("absent"), F.max("to_ms").alias("to_ms"))
    failures = (
        parsed.where(F.col("m.type") == "failures")
        .select(F.col("m.pid").alias("session"), F.explode("m.entries").alias("e"))
        .where(F.get(F.col("e"), 4) == F.lit("not"))
        .groupBy("session")
        .agg(F.count("*").alias("failed"))
    )
    unexplained = per_session.join(failures, "session", "left").where(
        F.col("absent") > F.coalesce(F.col("failed"), F.lit(0))
    )
    return unexplained.agg(F.max("to_ms").alias("to_ms"))


def transform_untraced_sessions(raw_ledger: DataFrame) -> DataFrame:
    """(session, last_ms, alive_ms, ledgers_sends) per producer session of the ledger read (either
    contract) without a `closed` session-end: the timestamp of its last ledger record, the
    alive_ms it declared (null: none) and whether it wrote contract-v2 records (ranges, keys,
    failures: it ledgers what it sent), by session. The rule of auditor.stuck.untraced.SessionTrails."""
    parsed = raw_ledger.select(
        F.from_json(F.col("value").cast("string"), "type string, pid string, alive_ms long, closed boolean").alias("m"),
        F.unix_millis("timestamp").alias("ts_ms"),
    ).where(
        F.col("m.pid").isNotNull()
        & F.col("m.type").isin("batch", "ranges", "keys", "failures", "session-start", "session-end")
    )
    declared = F.when(F.col("m.type").isin("session-start", "session-end"), F.col("m.alive_ms"))
    sessions = parsed.groupBy(F.col("m.pid").alias("session")).agg(
        F.max("ts_ms").alias("last_ms"),
        F.max(declared).alias("alive_ms"),
        F.max(F.col("m.type").isin("ranges", "keys", "failures")).alias("ledgers_sends"),
        F.max(F.coalesce((F.col("m.type") == "session-end") & F.col("m.closed"), F.lit(False))).alias("closed"),
    )
    return (
        sessions.where(~F.col("closed") & F.col("last_ms").isNotNull())
        .select("session", "last_ms", "alive_ms", "ledgers_sends")
        .orderBy("session")
    )


def transform_partition_summary(hits: DataFrame) -> DataFrame:
    """Per partition: records read, records with a key, and the matching records."""
    match = F.struct(
        "key",
        "offset",
        F.unix_millis("timestamp").alias("ts_ms"),
        audit_session().alias("session"),
        audit_seq().alias("seq"),
    )
    unprobed = ~F.coalesce(F.exists("headers", lambda h: h["key"].isin(*AUDIT_HEADERS, AUDIT_V2_HEADER)), F.lit(False))
    miskeyed = F.coalesce(F.col("audit_id") != F.col("key"), F.lit(False))
    return hits.groupBy("partition").agg(
        F.count("*").alias("n"),
        F.count("key").alias("keyed"),
        F.collect_list(F.when(F.col("_hit"), match)).alias("matches"),
        # the latest record without any audit header: a producer that is not probed
        F.max(F.when(unprobed, F.unix_millis("timestamp"))).alias("unprobed_ms"),
        # the latest record whose audit id is not its key, and its producer session: the
        # session's ledger names other ids than the items' keys
        F.max(F.when(miskeyed, F.unix_millis("timestamp"))).alias("miskeyed_ms"),
        F.max_by(F.when(miskeyed, audit_session()), F.when(miskeyed, F.unix_millis("timestamp"))).alias(
            "miskeyed_session"
        ),
    )


def transform_ledger_hits(entries: DataFrame, keys: DataFrame) -> DataFrame:
    """Producer-ledger entries (LEDGER_ENTRY_SCHEMA) with `_hit` where audit_id is a stuck key."""
    flagged = keys.select(F.col("key").alias("audit_id"), F.lit(True).alias("_hit"))
    return entries.join(F.broadcast(flagged), "audit_id", "left").withColumn("_hit", F.coalesce("_hit", F.lit(False)))


def transform_mark_summary(processed: DataFrame, positions: DataFrame, lows: DataFrame) -> DataFrame:
    """Per (group, partition): marks counted, the lowest marked offset and the earliest mark's
    time, the highest marked offset below the log start, and the marks at `positions`
    (partition, offset)."""
    flagged = positions.select("partition", "offset", F.lit(True).alias("_hit"))
    joined = processed.join(F.broadcast(flagged), ["partition", "offset"], "left").join(
        F.broadcast(lows), "partition", "left"
    )
    mark = F.struct("offset", "consumer_session", "ts_ms")
    return joined.groupBy("group", "partition").agg(
        F.count("*").alias("n"),
        F.min("offset").alias("first_mark"),
        F.min("ts_ms").alias("first_ms"),
        F.max(F.when(F.col("offset") < F.col("low"), F.col("ts_ms"))).alias("last_below_low_ms"),
        F.max(F.when(F.col("offset") < F.col("low"), F.col("offset"))).alias("max_below_low"),
        F.collect_list(F.when(F.col("_hit"), mark)).alias("marks"),
    )


def transform_range_ends_below_low(raw_ledger: DataFrame, topic: str, groups: list[str], lows: DataFrame) -> DataFrame:
    """Per group, `last_ms`: the latest end of a v2 processed range of `topic` that starts
    below its partition's log start (auditor.stuck.locate_python._range_marks does the same)."""
    parsed = raw_ledger.select(
        F.from_json(F.col("value").cast("string"), "type string, group string, entries array<array<string>>").alias("m")
    ).where((F.col("m.type") == "processed-ranges") & F.col("m.group").isin(groups))
    ranges = parsed.select(F.col("m.group").alias("group"), F.explode("m.entries").alias("e")).where(
        F.get(F.col("e"), 0) == F.lit(topic)
    )
    starts = ranges.select(
        "group",
        F.get(F.col("e"), 1).try_cast("int").alias("partition"),
        F.get(F.col("e"), 2).try_cast("long").alias("first"),
        F.get(F.col("e"), 5).try_cast("long").alias("last_ms"),
    )
    below = starts.join(F.broadcast(lows), "partition").where(F.col("first") < F.col("low"))
    return below.groupBy("group").agg(F.max("last_ms").alias("last_ms")).where(F.col("last_ms").isNotNull())


# ------------------------------------------------------------------ the job ----------


def _ranges(data: dict[str, list[int]]) -> Ranges:
    return {int(p): (int(v[0]), int(v[1])) for p, v in data.items()}


def strongest_v2(entries: list[list[Any]]) -> list[list[Any]]:
    """Ledger entries with a v2 `sent` entry left out where the same (session, seq) is also
    `acked-range` (a resolved range supersedes the unresolved tail), as the Python engine keeps
    only the strongest; acked-range entries of one (audit id, session, seq) from several range
    records are one, acked by the earliest of them (as the Python engine reads them)."""
    acked: dict[tuple[Any, Any, Any], list[Any]] = {}
    kept: list[list[Any]] = []
    for e in entries:
        if e[3] != ACKED_RANGE:
            kept.append(e)
            continue
        known = acked.get((e[0], e[1], e[2]))
        if known is None:
            acked[(e[0], e[1], e[2])] = e
            kept.append(e)
        elif e[10] is not None and (known[10] is None or e[10] < known[10]):
            known[10] = e[10]
    sessions = {(e[1], e[2]) for e in acked.values()}
    return [e for e in kept if not (e[3] == SENT and (e[1], e[2]) in sessions)]


def _has_records(ledger: dict[str, Any]) -> bool:
    return any(end > start for start, end in _ranges(ledger["ranges"]).values())


def locate_json(spark: SparkSession, request: dict[str, Any]) -> dict[str, Any]:
    """Run the located reads; the result is JSON-ready (see the module docstring). A read of
    few records (the request's `records_to_read`) runs with a small job's settings
    (spark_jobs.common.small_job_settings), named in the result's `spark_settings`."""
    records = request.get("records_to_read")
    small = {} if records is None else small_job_settings(spark, int(records))
    with settings_applied(spark, small) as settings:
        return _locate(spark, request) | {"spark_settings": settings}


def _locate(spark: SparkSession, request: dict[str, Any]) -> dict[str, Any]:
    timings: dict[str, float] = {}
    clock = [time.monotonic()]

    def lap(name: str) -> None:
        now = time.monotonic()
        timings[name] = round(now - clock[0], 3)
        clock[0] = now

    topic = request["topic"]
    spec = parse_record_key(request["record_key"], "stuck rule")
    partitions = {int(p): (int(v[0]), int(v[1]), int(v[2])) for p, v in request["partitions"].items()}
    # Where reading starts: the key index stands in for what lies below (absent: the log start).
    starts = {p: int((request.get("starts") or {}).get(str(p), low)) for p, (low, _, _) in partitions.items()}
    keys = extract_keys(spark, request).cache()
    result: dict[str, Any] = {
        "records": [list(r) for r in request.get("known_records") or []],
        "ledger_entries": [],
        "marks": [],
        "max_mark_below_low": [],
        "first_mark": [],
        "first_mark_ms": {},
        "lost_marks": [],
    }

    # The committed view, up to the last stable offset. Nothing to read there (the key index
    # stands in for all of it): no Spark job, the summary of no records is empty.
    committed_ranges = {p: (starts[p], stable) for p, (_, stable, _) in partitions.items()}
    raw = extract_range(spark, request, topic, committed_ranges, "read_committed")
    summary = (
        transform_partition_summary(transform_key_hits(transform_keyed(raw, spec), keys)).collect()
        if any(end > start for start, end in committed_ranges.values())
        else []
    )
    counts = {row["partition"]: row["n"] for row in summary}
    result["records_scanned"] = sum(row["n"] for row in summary)
    result["keyed_records"] = sum(row["keyed"] for row in summary)
    result["unprobed_record_ms"] = max(
        (row["unprobed_ms"] for row in summary if row["unprobed_ms"] is not None), default=None
    )
    miskeyed = max(
        ((row["miskeyed_ms"], row["miskeyed_session"]) for row in summary if row["miskeyed_ms"] is not None),
        default=(None, None),
    )
    result["miskeyed_record_ms"], result["miskeyed_session"] = miskeyed
    committed_positions = set()
    for row in summary:
        for m in row["matches"]:
            committed_positions.add((row["partition"], m["offset"]))
            result["records"].append(
                [m["key"], row["partition"], m["offset"], m["ts_ms"], "committed", m["session"], m["seq"]]
            )
    lap("topic_committed")

    # The uncommitted view where transactions leave holes, or an open transaction.
    again: Ranges = {}
    for p, (_, stable, high) in partitions.items():
        if counts.get(p, 0) < stable - starts[p]:
            again[p] = (starts[p], high)
        elif stable < high:
            again[p] = (stable, high)
    uncommitted: DataFrame | None = None
    if again:
        uncommitted = extract_range(spark, request, topic, again, "read_uncommitted")
        hits = transform_key_hits(transform_keyed(uncommitted, spec), keys).where("_hit")
        columns: list[Column | str] = [
            "key",
            "partition",
            "offset",
            F.unix_millis("timestamp").alias("ts"),
            audit_session().alias("session"),
            audit_seq().alias("seq"),
        ]
        for row in hits.select(*columns).collect():
            if (row["partition"], row["offset"]) in committed_positions:
                continue
            state = "open" if row["offset"] >= partitions[row["partition"]][1] else "aborted"
            result["records"].append(
                [row["key"], row["partition"], row["offset"], row["ts"], state, row["session"], row["seq"]]
            )
    lap("topic_uncommitted")

    # The producer ledger: entries of this topic whose audit-id is a stuck key.
    result["ledger_entries_for_topic"] = 0
    ledger = request.get("producer_ledger")
    if ledger and _has_records(ledger):
        raw_ledger = extract_range(spark, request, ledger["topic"], _ranges(ledger["ranges"]), "read_uncommitted")
        raw_ledger = raw_ledger.cache()
        all_entries, _ = transform_producer_ledger(raw_ledger, topic)
        all_entries = all_entries.cache()
        keyed = all_entries.where(F.col("status") == KEYED)
        entries = all_entries.where(F.col("status") != KEYED).unionByName(
            transform_producer_failures(raw_ledger, topic)
        )
        entry = F.struct(
            "audit_id",
            "session",
            "seq",
            "status",
            "partition",
            "offset",
            "error",
            "persisted",
            "ts_ms",
            "to_ms",
            "acked_by_ms",
        )
        row = (
            transform_ledger_hits(entries, keys)
            .agg(F.count("*").alias("n"), F.collect_list(F.when(F.col("_hit"), entry)).alias("hits"))
            .collect()[0]
        )
        result["ledger_entries_for_topic"] = row["n"]
        result["ledger_covers_from_ms"] = producer_ledger_covers_from(raw_ledger, topic)
        result["untraced_sessions"] = [
            [row["session"], row["last_ms"], row["alive_ms"], row["ledgers_sends"]]
            for row in transform_untraced_sessions(raw_ledger).collect()
        ]
        result["ledger_entries"] = strongest_v2([list(e) for e in row["hits"]])
        # v2 range records name no keys: the latest instant a range holding a sequence absent
        # from the topic (and not explained by failure reports) says records were produced.
        seen = raw.select(audit_session().alias("session"), audit_seq().alias("seq"))
        if uncommitted is not None:
            seen = seen.unionByName(uncommitted.select(audit_session().alias("session"), audit_seq().alias("seq")))
        spans = request.get("seen_intervals") or []
        intervals = spark.createDataFrame(spans, "session string, start long, end long") if spans else None
        result["unattributed_to_ms"] = transform_unattributed(raw_ledger, topic, seen, intervals, keyed).collect()[0][
            "to_ms"
        ]
        all_entries.unpersist()
        raw_ledger.unpersist()
    lap("producer_ledger")

    # The consumer ledger: marks of the binding's groups at the records found or acked.
    result["group_marks"] = {}
    result["last_mark_below_low_ms"] = {}
    ledger = request.get("consumer_ledger")
    groups = list(request.get("groups") or [])
    if ledger and groups and _has_records(ledger):
        positions = {(r[1], r[2]) for r in result["records"]}
        positions |= {
            (e[4], e[5]) for e in result["ledger_entries"] if e[3] == "acked" and e[5] is not None and e[5] >= 0
        }
        positions_df = spark.createDataFrame(sorted(positions), "partition int, offset long")
        lows = spark.createDataFrame([(p, v[0]) for p, v in partitions.items()], "partition int, low long")
        raw_marks = extract_range(
            spark, request, ledger["topic"], _ranges(ledger["ranges"]), "read_uncommitted"
        ).cache()
        processed = transform_consumer_ledger(raw_marks, topic, groups)
        # A v2 range's marks carry its first mark's time; when it was last marked bounds them.
        for row in transform_range_ends_below_low(raw_marks, topic, groups, lows).collect():
            seen_ms = result["last_mark_below_low_ms"].get(row["group"], row["last_ms"])
            result["last_mark_below_low_ms"][row["group"]] = max(seen_ms, row["last_ms"])
        for row in transform_mark_summary(processed, positions_df, lows).collect():
            group, partition = row["group"], row["partition"]
            result["group_marks"][group] = result["group_marks"].get(group, 0) + row["n"]
            below_ms = row["last_below_low_ms"]
            if below_ms is not None:
                seen_ms = result["last_mark_below_low_ms"].get(group, below_ms)
                result["last_mark_below_low_ms"][group] = max(seen_ms, below_ms)
            result["first_mark"].append([group, partition, row["first_mark"]])
            if row["first_ms"] is not None:
                seen_ms = result["first_mark_ms"].get(group, row["first_ms"])
                result["first_mark_ms"][group] = min(seen_ms, row["first_ms"])
            if row["max_below_low"] is not None:
                result["max_mark_below_low"].append([group, partition, row["max_below_low"]])
            for m in row["marks"]:
                result["marks"].append([group, partition, m["offset"], m["consumer_session"], m["ts_ms"]])
        # marks its ledger could not write (marks-lost): their offsets are judged unknown
        for row in transform_lost_marks(raw_marks, topic, groups).collect():
            result["lost_marks"].append([row["group"], row["partition"], row["start"], row["end"], row["reason"]])
        raw_marks.unpersist()
    lap("consumer_ledger")
    keys.unpersist()
    result["timings"] = timings
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Locate stuck items' records in a topic and the probe ledgers")
    parser.add_argument("--request", required=True, help="request JSON file")
    parser.add_argument("--output", required=True, help="where to write the result JSON")
    parser.add_argument("--master", help="Spark master (default $SPARK_MASTER or local[2])")
    args = parser.parse_args(argv)
    request = json.loads(Path(args.request).read_text())
    spark = build_spark_session(f"stuck-locate-{request['topic']}", master=args.master)
    try:
        result = locate_json(spark, request)
    finally:
        spark.stop()
    target = Path(args.output)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
