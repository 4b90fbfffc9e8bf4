"""Reconcile a topic with its source-of-truth table and the probes' ledgers.

    spark-submit spark_jobs/reconcile.py --binding-json binding.json --state-dir var/reconcile \
        [--full] [--output-json run.json] [--output-jdbc-url postgresql://…]

extract_* read (JDBC, the Kafka source, driver-side offset look-ups), the pure transforms
live in reconcile_transform, load_* write; main() only wires them. The run result printed
on stdout (and written to --output-json) is

    {"status": "ok"|"failed", "error": str|null, "run_id", "binding", "mode": "full"|"incremental",
     "started_at", "finished_at", "duration_s", "new_findings": n,
     "counts": {kind: n, "records_without_headers": n, "records_malformed_headers": n},
     "offset_ranges": {"topic"|"producer_ledger"|"consumer_ledger": {partition: [start, end]}},
     "records_read": n, "topic_id": "<id>"|null, "window": {"lower", "upper", "cutoff", "unverifiable_until", "marks_lost_until",
     "entries_lost_until", "processing_until", "identity"}, "warnings": [...],
     "timings": {phase: seconds}, "spark_settings": {conf: value set for this run only},
     "findings": [{"kind", "key", "cause", "evidence", "partition", "offset", "offsets",
                   "timestamp", "session", "seq", "seq_end", "group", "is_new"}],
     "findings_truncated": bool}

`counts` also has `unverifiable`: source rows past grace without a record that cannot be
judged because records that old were deleted (retention, delete_records) before the job read
them; they are never reported `missing`.

A run that cannot read something fails with the error, reports no findings and leaves the
incremental state as it was.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script by spark-submit
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.binding import (
    Binding,
    BindingError,
    binding_from_dict,
    check_identifier,
    jdbc_url_and_properties,
    load_binding_json,
)
from spark_jobs.common import SparkMasterError, build_spark_session
from spark_jobs.executor_loss import ExecutorWatch, reads_shortened
from spark_jobs.reconcile_commit import commit_state
from spark_jobs.reconcile_extract import ReconcileError
from spark_jobs.reconcile_inputs import extract_inputs
from spark_jobs.reconcile_new_state import update_state
from spark_jobs.reconcile_plan import Laps, RunOptions, RunPlan, new_run_id, plan_run, run_settings_applied
from spark_jobs.reconcile_report import count_findings, find_all, flag_new
from spark_jobs.reconcile_transform import is_empty_plan


def findings_rows(findings: DataFrame, limit: int) -> tuple[list[dict[str, Any]], bool]:
    """At most `limit` findings as JSON-ready dicts (evidence parsed), sorted for stable output."""
    ordered = findings.orderBy("kind", "cause", "key", "partition", "offset", "session", "seq", "group")
    rows = ordered.limit(limit + 1).collect()
    result = []
    for row in rows[:limit]:
        item = row.asDict(recursive=True)
        item["evidence"] = json.loads(item["evidence"]) if item.get("evidence") else None
        # PySpark hands back naive local datetimes; make them explicit UTC.
        item["timestamp"] = item["timestamp"].astimezone(UTC).isoformat() if item.get("timestamp") else None
        result.append(item)
    return result, len(rows) > limit


def load_json(result: dict[str, Any], path: str) -> None:
    """Write the run result atomically (a reader never sees half a file)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str))
    tmp.replace(target)


# The findings' text columns that may hold what a record carried (its key, its audit-pid).
NUL_ESCAPED = ("key", "session")
# In JSON text (a finding's evidence): the escape \u0000 that JSON writes for a string's
# U+0000, a backslash-u0000 after an even run of backslashes (after an odd one it is an
# escaped backslash and the text u0000, left as it is), made the escaped text \\u0000. In
# Java regex and replacement syntax (regexp_replace).
JSON_NUL = r"(?<!\\)((?:\\\\)*)\\u0000"
JSON_NUL_VISIBLE = r"$1\\\\u0000"


def load_findings_jdbc(findings_df: DataFrame, run_id: str, jdbc_url: str, table: str = "reconcile_finding") -> None:
    """Append the findings of a run to a PostgreSQL table (written by the executors).

    Columns: run_id, kind, key, cause, partition, offset, offsets (JSON text), timestamp,
    session, seq, seq_end, group, evidence (JSON text), is_new when present.
    """
    check_identifier(table, "findings table", "load", qualified=True)
    url, props = jdbc_url_and_properties(jdbc_url)
    rows = findings_df.withColumn("offsets", F.to_json("offsets")).withColumn("run_id", F.lit(run_id))
    # PostgreSQL text cannot hold U+0000, which a record key (or an audit header) may: it is
    # written as the six characters \u0000, or the load would fail this run and every later one.
    rows = rows.withColumns({name: F.regexp_replace(name, "\\x00", "\\\\u0000") for name in NUL_ESCAPED})
    # Nor can jsonb (the run service's staging table): a U+0000 in the evidence (a ledger's
    # error text) is written as the same six characters, escaped in the JSON as \\u0000.
    rows = rows.withColumn("evidence", F.regexp_replace("evidence", JSON_NUL, JSON_NUL_VISIBLE))
    rows = rows.select("run_id", *[c for c in rows.columns if c != "run_id"])
    rows.write.format("jdbc").option("url", url).option("dbtable", table).options(**props).option(
        "stringtype", "unspecified"
    ).mode("append").save()


class RunOutput:
    """The run's result on its way out (--output-json: where the service reads it from). It is
    written before the state is committed: a result that cannot be written fails the run with
    its state as it was. Once the state is committed the run has happened, whatever fails
    after: the next run builds on it and flags its findings new against this one's."""

    def __init__(self, path: str | None, envelope: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self.path = path
        self.envelope = envelope  # adds the run's times (run())
        self.committed: dict[str, Any] | None = None  # the result of the run, once its state is committed

    def before_commit(self, result: dict[str, Any]) -> None:
        if self.path:
            load_json(self.envelope({"status": "ok", "error": None} | result), self.path)

    def after_commit(self, result: dict[str, Any]) -> None:
        self.committed = result


def reconcile(
    spark: SparkSession, binding: Binding, options: RunOptions, output: RunOutput | None = None
) -> dict[str, Any]:
    """One run: read, update the state, compute findings, load; raises on any failure."""
    cached: list[DataFrame] = []
    try:
        return _reconcile(spark, binding, options, cached, output or RunOutput(None, lambda result: result))
    finally:
        for df in cached:
            df.unpersist()


def _reconcile(
    spark: SparkSession, binding: Binding, options: RunOptions, cached: list[DataFrame], output: RunOutput
) -> dict[str, Any]:
    def persist(df: DataFrame) -> DataFrame:
        if is_empty_plan(df):
            return df  # cached, the optimizer could no longer prune what is built on it
        cached.append(df.persist(StorageLevel.MEMORY_AND_DISK))
        return df

    laps = Laps(options.cancelled)
    plan = plan_run(binding, options, laps)
    if plan.store.check_shared(spark):
        laps("state_shared")
    watch = ExecutorWatch(spark)
    laps.observers.append(watch.look)
    with run_settings_applied(spark, plan) as settings:
        return _run_phases(spark, binding, options, plan, persist, laps, output, settings, watch)


def _run_phases(
    spark: SparkSession,
    binding: Binding,
    options: RunOptions,
    plan: RunPlan,
    persist: Callable[[DataFrame], DataFrame],
    laps: Laps,
    output: RunOutput,
    settings: dict[str, str],
    watch: ExecutorWatch,
) -> dict[str, Any]:
    inputs = extract_inputs(spark, binding, plan, persist, laps)
    new = update_state(spark, binding, plan, inputs, persist, laps)
    current = new.keep("findings", find_all(plan, inputs, new))
    flagged = flag_new(spark, plan, current)
    counts, new_count, found = count_findings(plan, inputs, new, flagged)
    # With no rows wanted (the worker loads findings through JDBC), the count says whether
    # any were left out: no job to sort them.
    rows, truncated = findings_rows(flagged, options.max_findings) if options.max_findings > 0 else ([], found > 0)
    if options.output_jdbc_url:
        load_findings_jdbc(flagged, plan.run_id, options.output_jdbc_url, options.findings_table)
    laps("findings")
    until = inputs.unverifiable_until
    result = {
        "run_id": plan.run_id,
        "binding": binding.name,
        "mode": plan.mode,
        "rewritten": {str(p): reason for p, reason in sorted(plan.rewritten.items())},
        "counts": counts,
        "new_findings": new_count,
        "offset_ranges": {
            "topic": plan.topic.to_json(),
            "producer_ledger": plan.kafka["producer_ledger"].to_json(),
            "consumer_ledger": plan.kafka["consumer_ledger"].to_json(),
        },
        "records_read": plan.topic.total,
        "topic_id": plan.topic_id,
        "window": {
            "lower": plan.lower.isoformat() if plan.lower else None,
            "upper": plan.source_upper.isoformat(),
            "cutoff": plan.cutoff.isoformat(),
            "unverifiable_until": until.isoformat() if until else None,
            "marks_lost_until": inputs.marks_lost_until.isoformat() if inputs.marks_lost_until else None,
            "entries_lost_until": inputs.entries_lost_until.isoformat() if inputs.entries_lost_until else None,
            # records a probed session committed past within its processing bound are judged from then on
            "processing_until": (
                datetime.fromtimestamp(inputs.processing_until_ms / 1000, UTC).isoformat()
                if inputs.processing_until_ms is not None
                else None
            ),
            # what the rows and records read are of: the topic, key, table (binding.state_identity)
            "identity": plan.identity,
        },
        "warnings": plan.warnings,
        "timings": laps.timings,
        "findings": rows,
        "findings_truncated": truncated,
        "spark_settings": settings,
    }
    # `warnings` and `timings` are the plan's and the laps' own: the commit's are in them too
    check_reads_unchanged(plan, watch)
    laps.check()
    output.before_commit(result)
    commit_state(spark, plan, inputs, new)
    output.after_commit(result)
    return result


def check_reads_unchanged(plan: RunPlan, watch: ExecutorWatch) -> None:
    """Fail the run when an executor was lost during it and a range it read has lost records
    since: Spark may have read that part again without them (executor_loss). An executor the
    driver removed on purpose holding no cached block is no loss."""
    lost = watch.lost()
    if watch.store_error is not None:
        plan.warnings.append(
            f"the driver's executor status store could not be read ({watch.store_error}): every executor seen at a "
            "phase and gone by the end counts as lost, even one the driver removed on purpose holding nothing this "
            "run read, and one started and lost between two phases is not seen"
        )
    if not lost:
        return
    reads = [(r.topic, r.ranges) for r in (plan.topic, plan.kafka["producer_ledger"], plan.kafka["consumer_ledger"])]
    shortened = reads_shortened(plan.admin, reads)
    if plan.cleanup.compacted:  # the cleaner removes records from the middle: no offset tells
        shortened.append(f"{plan.topic.topic} is compacted, and its log cleaner may have removed records since")
    if shortened:
        raise ReconcileError(
            f"{', '.join(lost)} {'was' if len(lost) == 1 else 'were'} lost during the run, and since this run read them "
            f"{'; '.join(shortened)}: the parts of its reads those executors held may have been read again "
            "without the records gone since. The run is discarded (nothing was reported, the incremental state is "
            "unchanged), run it again"
        )
    plan.warnings.append(
        f"{', '.join(lost)} {'was' if len(lost) == 1 else 'were'} lost during the run; every range it read still "
        "holds what it read "
        "(nothing deleted or truncated since), so parts read again are the same"
    )


def describe_error(exc: BaseException) -> str:
    """One readable line for the run record: a JVM error's own message, not its stack."""
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else str(exc)
    cause = exc.__cause__
    while java is not None and cause is None and java.getCause() is not None:
        java = java.getCause()
        text = f"{text} (caused by {java.toString()})"
    first_line = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(exc).__name__}: {first_line[:2000]}"


def run(spark: SparkSession, binding: Binding, options: RunOptions) -> dict[str, Any]:
    """reconcile() with the run envelope: status, error, timing; never raises."""
    started = time.monotonic()
    started_at = datetime.now(UTC)
    options = replace(options, run_id=options.run_id or new_run_id())

    def envelope(result: dict[str, Any]) -> dict[str, Any]:
        return result | {
            "started_at": started_at.isoformat(),
            "finished_at": datetime.now(UTC).isoformat(),
            "duration_s": round(time.monotonic() - started, 3),
        }

    output = RunOutput(options.output_json, envelope)
    try:
        result = {"status": "ok", "error": None} | reconcile(spark, binding, options, output)
    except Exception as exc:  # noqa: BLE001 - any failure fails the run, with its error
        if output.committed is None:
            result = failed_result(describe_error(exc), binding.name, options)
        else:  # the state moved: the run happened (RunOutput)
            result = {"status": "ok", "error": None} | output.committed
            result["warnings"] = [
                *result["warnings"],
                f"the state was committed, but the run failed after: {describe_error(exc)}",
            ]
    result = envelope(result)
    if options.output_json:
        try:
            load_json(result, options.output_json)
        except OSError as exc:
            if output.committed is None:
                result = failed_result(f"writing {options.output_json} failed: {exc}", binding.name, options)
            else:  # a committed run's result was written before its commit, and stands there
                result["warnings"] = [
                    *result["warnings"],
                    f"writing {options.output_json} again after the commit failed ({exc}): it holds the result "
                    "written before the commit",
                ]
    return result


def failed_result(error: str, binding_name: str | None, options: RunOptions) -> dict[str, Any]:
    """A failed run publishes no findings."""
    return {
        "status": "failed",
        "error": error,
        "run_id": options.run_id,
        "binding": binding_name,
        "mode": "full" if options.full else "incremental",
        "counts": {},
        "new_findings": 0,
        "offset_ranges": {},
        "records_read": 0,
        "window": {},
        "warnings": [],
        "findings": [],
        "findings_truncated": False,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--binding-json", help="binding as a JSON object, inline or a file path")
    single = parser.add_argument_group("binding fields (instead of --binding-json)")
    single.add_argument("--binding", dest="name")
    single.add_argument("--topic")
    single.add_argument("--bootstrap-servers")
    single.add_argument("--source-url")
    single.add_argument("--table")
    single.add_argument("--key-column")
    single.add_argument("--created-column")
    single.add_argument(
        "--timestamp-zone", default="UTC", help="the IANA zone a created column without a time zone holds"
    )
    single.add_argument(
        "--send-outcome-ms",
        type=int,
        help="how long the topic's producers retry a send (message.timeout.ms + socket.timeout.ms + 5 s; "
        "0: without limit); never less than librdkafka's defaults' 365000",
    )
    single.add_argument("--record-key", default="key")
    single.add_argument("--grace", default="2m")
    single.add_argument("--guarantee", default="at-least-once")
    single.add_argument("--consumer-group", action="append", default=[], dest="consumer_groups")
    single.add_argument("--producer-ledger-topic", default="_audit.producer-ledger")
    single.add_argument("--consumer-ledger-topic", default="_audit.consumer-ledger")
    single.add_argument("--transactions", action=argparse.BooleanOptionalAction, default=None)
    single.add_argument("--since")
    single.add_argument("--lookback", default="5m")
    parser.add_argument("--full", action="store_true", help="ignore the incremental state and read everything")
    parser.add_argument("--state-dir", default="var/reconcile-state")
    parser.add_argument("--run-id")
    parser.add_argument("--output-json", help="write the run result to this file")
    parser.add_argument("--output-jdbc-url", help="append findings to PostgreSQL at this URL")
    parser.add_argument(
        "--output-jdbc-url-env",
        metavar="NAME",
        help="like --output-jdbc-url, read from this environment variable (keeps a password out of the process list)",
    )
    parser.add_argument("--findings-table", default="reconcile_finding")
    parser.add_argument("--max-findings", type=int, default=10_000, help="findings listed in the JSON result")
    parser.add_argument("--master", help="Spark master (default $SPARK_MASTER or local[2])")
    return parser.parse_args(argv)


def binding_from_args(args: argparse.Namespace) -> Binding:
    if args.binding_json:
        return load_binding_json(args.binding_json)
    return binding_from_dict(
        {
            "name": args.name,
            "topic": args.topic,
            "bootstrap_servers": args.bootstrap_servers,
            "source_url": args.source_url,
            "table": args.table,
            "key_column": args.key_column,
            "created_column": args.created_column,
            "timestamp_zone": args.timestamp_zone,
            "send_outcome_ms": args.send_outcome_ms,
            "record_key": args.record_key,
            "grace": args.grace,
            "guarantee": args.guarantee,
            "consumer_groups": args.consumer_groups,
            "producer_ledger_topic": args.producer_ledger_topic,
            "consumer_ledger_topic": args.consumer_ledger_topic,
            "transactions": args.transactions,
            "since": args.since,
            "lookback": args.lookback,
        }
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    output_jdbc_url = args.output_jdbc_url
    if args.output_jdbc_url_env:
        output_jdbc_url = os.environ.get(args.output_jdbc_url_env) or None
    options = RunOptions(
        state_dir=args.state_dir,
        full=args.full,
        run_id=args.run_id,
        max_findings=args.max_findings,
        output_json=args.output_json,
        output_jdbc_url=output_jdbc_url,
        findings_table=args.findings_table,
    )
    try:
        if args.output_jdbc_url_env and not output_jdbc_url:
            raise BindingError(f"--output-jdbc-url-env: environment variable {args.output_jdbc_url_env} is not set")
        binding = binding_from_args(args)
    except BindingError as exc:
        result = failed_result(f"BindingError: {exc}", None, options)
        if options.output_json:
            load_json(result, options.output_json)
        print(json.dumps(result))
        return 2
    try:
        spark = build_spark_session(f"reconcile-{binding.name}", master=args.master)
    except SparkMasterError as exc:
        result = failed_result(f"SparkMasterError: {exc}", binding.name, options)
        if options.output_json:
            load_json(result, options.output_json)
        print(json.dumps(result))
        return 1
    result = run(spark, binding, options)
    print(json.dumps(result, default=str))
    return 0 if result["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
