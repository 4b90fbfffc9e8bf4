"""The reconciliation job's schemas and vocabulary: Kafka rows, records, the state datasets
(docs/contracts.md), findings.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

KAFKA_RAW_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        StructField(
            "headers",
            ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
        ),
    ]
)

RECORD_SCHEMA = StructType(
    [
        StructField("key", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("session", StringType()),
        StructField("seq", LongType()),
    ]
)
# The `aborted` dataset: records only in aborted transactions, and the run that read them
# (null in state written before runs were named here): a stuck diagnosis names it once
# retention has deleted the record.
ABORTED_SCHEMA = StructType([*RECORD_SCHEMA.fields, StructField("run_id", StringType())])
# Per-key index entry: how many records a key has (in one state delta), its first one, and
# the run that read it (null in state written before runs were named here).
KEY_INDEX_SCHEMA = StructType(
    [
        StructField("key", StringType()),
        StructField("n", LongType()),
        *RECORD_SCHEMA.fields[1:],
        StructField("run_id", StringType()),
    ]
)
# A key an earlier run saw at partition/offset whose record is gone from there although the
# log still covers that offset (truncated and rewritten: unclean leader election, a topic
# re-created). run_id saw it; detected_run noticed it was gone.
LOST_SIGHTING_SCHEMA = StructType(
    [
        *KEY_INDEX_SCHEMA.fields[:1],
        *RECORD_SCHEMA.fields[1:],
        StructField("run_id", StringType()),
        StructField("detected_run", StringType()),
    ]
)
SOURCE_ROW_SCHEMA = StructType([StructField("key", StringType()), StructField("created", TimestampType())])
INTERVAL_SCHEMA = StructType(
    [StructField("session", StringType()), StructField("start", LongType()), StructField("end", LongType())]
)
# Per producer session and block of SEQ_TIME_BUCKET sequence numbers, the newest timestamp
# of its records read by any run: a lower bound on when a later sequence was produced.
SEQ_TIME_BUCKET = 1024
SEQ_TIMES_SCHEMA = StructType(
    [StructField("session", StringType()), StructField("bucket", LongType()), StructField("max_ms", LongType())]
)
LEDGER_ENTRY_SCHEMA = StructType(
    [
        StructField("session", StringType()),
        StructField("seq", LongType()),
        StructField("status", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("error", StringType()),
        StructField("persisted", StringType()),
        StructField("audit_id", StringType()),
        StructField("ts_ms", LongType()),
        # v2: the end of the window the record was produced in (ts_ms is its start)
        StructField("to_ms", LongType()),
        # v2 acked ranges: when the ledger record saying so was written (its timestamp, the
        # probe's clock): the broker acked no later (a send lingered or retried long after it
        # was produced, through a leader failover, was acked well after to_ms). A v1 entry's
        # ts_ms is its delivery report's time already.
        StructField("acked_by_ms", LongType()),
    ]
)
# Per producer session: the last sequence it ledgered; `lost_after` (null: none), the lowest
# `last_seq` a session-end with `ledger_lost` named: a ledger record of the session was lost
# after it, and the sequences past it are not known (no `never-sent` hole is inferred there).
LEDGER_BOUND_SCHEMA = StructType(
    [StructField("session", StringType()), StructField("last_seq", LongType()), StructField("lost_after", LongType())]
)
PROCESSED_SCHEMA = StructType(
    [
        StructField("group", StringType()),
        StructField("consumer_session", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("audit_id", StringType()),
        StructField("ts_ms", LongType()),
    ]
)
PROCESSED_INTERVAL_SCHEMA = StructType(
    [
        StructField("group", StringType()),
        StructField("partition", IntegerType()),
        StructField("start", LongType()),
        StructField("end", LongType()),
    ]
)
# v2 `marks-lost`: offsets first..last (start..end) of a partition a group's consumer marked
# processed whose ledger record was never written (docs/contracts.md), with the probe's reason.
LOST_MARKS_SCHEMA = StructType(
    [
        *PROCESSED_INTERVAL_SCHEMA.fields,
        StructField("reason", StringType()),
    ]
)
REPROCESSED_SCHEMA = StructType(
    [
        StructField("group", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("count", LongType()),
        StructField("consumer_sessions", ArrayType(StringType())),
        StructField("audit_id", StringType()),
        StructField("first_ms", LongType()),
        StructField("last_ms", LongType()),
    ]
)
CANDIDATE_SCHEMA = StructType([StructField("group", StringType()), *RECORD_SCHEMA.fields])
# A group's committed offset a run judges by: the group's now (seen_by null), or, where it has
# none now, the highest a run saw it commit (seen_by: that run; spark_jobs/group_commits).
COMMITTED_SCHEMA = StructType(
    [
        StructField("group", StringType()),
        StructField("partition", IntegerType()),
        StructField("committed", LongType()),
        StructField("seen_by", StringType()),
    ]
)
# Per partition of the topic: log start offset and the end of what this run has read.
WATERMARK_SCHEMA = StructType(
    [StructField("partition", IntegerType()), StructField("low", LongType()), StructField("end", LongType())]
)

OFFSET_STRUCT = StructType([StructField("partition", IntegerType()), StructField("offset", LongType())])
FINDING_SCHEMA = StructType(
    [
        StructField("kind", StringType(), nullable=False),
        StructField("key", StringType()),
        StructField("cause", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("offsets", ArrayType(OFFSET_STRUCT)),
        StructField("timestamp", TimestampType()),
        StructField("session", StringType()),
        StructField("seq", LongType()),
        StructField("seq_end", LongType()),
        StructField("group", StringType()),
        StructField("evidence", StringType()),
    ]
)
# Ledger statuses of v2 range records, one per sequence (auditor.probes.codec).
ACKED_RANGE = "acked-range"
SENT = "sent"
# v2 `keys` records: the audit id of a sequence, which the range entries of that (session,
# seq) take on (it may come in another run's slice of the ledger); no status of its own.
KEYED = "keyed"
FINDING_KINDS = ("missing", "duplicate", "orphan", "gap", "aborted", "unprocessed", "reprocessed")
# Not a finding kind: a run count of source rows that could not be checked (unverifiable_rows).
UNVERIFIABLE = "unverifiable"
# Nor this: a run count of source rows past the grace with no record yet that a leader change
# holds (reconcile_findings.late_held_rows): judged once the send outcome bound has passed.
LATE = "late"

_LEDGER_JSON_SCHEMA = StructType(
    [
        StructField("v", IntegerType()),
        StructField("type", StringType()),
        StructField("pid", StringType()),
        StructField("sid", StringType()),
        StructField("group", StringType()),
        StructField("topic", StringType()),
        StructField("ts", LongType()),
        # Entries are heterogeneous JSON arrays; a string-typed element keeps each value's
        # JSON text, which is then cast per position.
        StructField("entries", ArrayType(ArrayType(StringType()))),
        StructField("last_seq", MapType(StringType(), LongType())),
        StructField("reason", StringType()),
        StructField("ledger_lost", BooleanType()),
        StructField("closed", BooleanType()),
    ]
)
