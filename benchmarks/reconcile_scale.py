"""Reconciliation at scale: a full run and an incremental run against a raw scan of both sources.

    .venv/bin/python benchmarks/reconcile_scale.py [--rows 10000000] [--partitions 4] [--driver-memory 4g]
        [--master spark://127.0.0.1:7077 --executor-memory 4g]

On a cluster master (a standalone one as the README starts it) the driver JVM holds no
executor, so its memory printed is the driver's alone: runs at two sizes tell whether it
grows with the topic.

Builds a source table of N rows (PostgreSQL, generated server-side; indexed on its key and
creation time, as a real table read by time window would be) and a topic of about N
records written by Spark's Kafka sink, with audit headers. About 0.1% of the rows get no
record (missing) and about 0.1% get two (duplicated: half producer retries, half
application re-sends). Then, in one SparkSession:

1. a raw scan: the same topic offsets and table rows read by the job's own extract
   functions, only counted (the floor any reconciliation pays), timed the second time: the
   session's first read pays for loading the Kafka source and JDBC code, which the runs
   measured after it do not;
2. a full reconciliation run (empty state), checked against the ground truth;
3. 1% new rows and records (with their own missing and duplicated ones), and an
   incremental run over them, checked too;
4. --incrementals more such rounds (default 2), each 1% more: the runs a resident driver
   (RECONCILE_RUNNER=resident) makes once it has run the incremental plans before, where the
   first incremental run above still compiles them. Each names the key index deltas it
   leaves; with --incrementals 7 or more, one run merges them (reconcile_state.COMPACT_AFTER);
5. the floor (floor_run): the same inputs, now the whole topic and table, reconciled in one
   pass with nothing but a key index written (per key: copies, first record, source status),
   timed the second time, against a scan of those inputs timed between the two passes. It
   bounds a full run from below: no Spark job that keeps such an index can take less here;
6. a second full run over those same inputs, into an empty state of its own: warm (the JVM has
   compiled the full run's code once), like for like with the floor and its scan.

Prints the timings, records/s, the time the JVM's JIT compilers and garbage collectors spent
during each run (CPU the run competes with on a small machine) and the CPU of the driver JVM's
threads during it by kind (thread_cpu: the driver's planning and scheduling, the tasks, the JIT,
the collectors, the rest), the driver's peak memory (the
JVM's peak resident set, which in local mode includes the executors, each heap pool's peak
(their sum bounds the heap's peak from above), and the Python driver's), and as its last line
``full_vs_scan=<x> incremental_vs_full=<y> warm_incremental_vs_full=<z> floor_vs_scan=<f>
warm_full_vs_scan=<w>``: y is the first incremental run's, z the median of the later ones
(absent with --incrementals 0), f the floor's, w the warm full run's against the same scan as
f. The table,
the topic and the state are removed at the end.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from auditor.lib.env import load_env_file
from spark_jobs.binding import Binding, binding_from_dict
from spark_jobs.common import build_spark_session
from spark_jobs.kafka_offsets import admin_client, partition_offsets, topic_partitions
from spark_jobs.reconcile import run
from spark_jobs.reconcile_extract import extract_source, extract_source_columns, extract_topic, plan_offsets
from spark_jobs.reconcile_parsing import transform_records, transform_source_rows
from spark_jobs.reconcile_plan import RunOptions
from spark_jobs.reconcile_state import StateStore
from spark_jobs.reconcile_transform import FINDING_KINDS, RECORD_COUNTS, UNVERIFIABLE

ROOT = Path(__file__).resolve().parent.parent
MISSING_EVERY = 1000  # id % 1000 == 3: no record
DUPLICATE_EVERY = 1000  # id % 1000 == 7: two records (odd thousands: same seq, even: a new seq)
SESSION = "b3c4" * 8  # a session id as the contract spells it: 32 lowercase hex digits


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000, help="source rows (default 10,000,000)")
    parser.add_argument("--partitions", type=int, default=4, help="topic partitions (default 4)")
    parser.add_argument("--driver-memory", default="4g", help="spark.driver.memory (default 4g)")
    parser.add_argument("--master", default=os.environ.get("SPARK_MASTER") or "local[*]")
    parser.add_argument(
        "--executor-memory",
        default=None,
        help="spark.executor.memory on a cluster master (Spark's default: 1g); local mode has no executors of its own",
    )
    parser.add_argument(
        "--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"), help="Kafka bootstrap"
    )
    parser.add_argument("--incrementals", type=int, default=2, help="incremental rounds after the first (default 2)")
    parser.add_argument("--keep", action="store_true", help="keep the table, topic and state afterwards")
    args = parser.parse_args()
    if args.rows < 10_000:
        parser.error("--rows must be at least 10,000 (0.1% of it must be a few rows)")
    return args


def expected_counts(first: int, last: int) -> dict[str, int]:
    ids = range(first, last + 1)
    return {
        "missing": sum(1 for i in ids if i % MISSING_EVERY == 3),
        "duplicate": sum(1 for i in ids if i % DUPLICATE_EVERY == 7),
    }


# --- data ---------------------------------------------------------------------------------


def create_table(url: str, table: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint NOT NULL, created_at timestamptz NOT NULL, title text)")


def insert_rows(url: str, table: str, first: int, last: int, age: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {table} SELECT g, now() - %s::interval, 'ticket ' || g FROM generate_series(%s::bigint, %s::bigint) g",
            (age, first, last),
        )


def index_table(url: str, table: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE {table} ADD PRIMARY KEY (id)")
        conn.execute(f"CREATE INDEX ON {table} (created_at)")
        conn.execute(f"ANALYZE {table}")


def records(spark: SparkSession, first: int, last: int) -> DataFrame:
    """The topic's records for ids first..last: no record for missing ids, two for duplicated ones."""
    ids = spark.range(first, last + 1).where(F.col("id") % MISSING_EVERY != 3)
    dup_ids = ids.where(F.col("id") % DUPLICATE_EVERY == 7)
    retry = dup_ids.where((F.col("id") / DUPLICATE_EVERY).cast("long") % 2 == 1).withColumn("seq", F.col("id"))
    resend = dup_ids.where((F.col("id") / DUPLICATE_EVERY).cast("long") % 2 == 0).withColumn(
        "seq", F.col("id") + F.lit(10 * (last + 1))
    )
    rows = ids.withColumn("seq", F.col("id")).unionByName(retry).unionByName(resend)
    return rows.select(
        F.col("id").cast("string").alias("key"),
        F.to_json(F.struct(F.col("id").alias("ticket_id"), F.lit("x" * 40).alias("pad"))).alias("value"),
        F.array(
            F.struct(F.lit("audit-id").alias("key"), F.col("id").cast("string").cast("binary").alias("value")),
            F.struct(F.lit("audit-pid").alias("key"), F.lit(SESSION).cast("binary").alias("value")),
            F.struct(F.lit("audit-seq").alias("key"), F.col("seq").cast("string").cast("binary").alias("value")),
            F.struct(
                F.lit("audit-ts").alias("key"),
                F.unix_millis(F.current_timestamp()).cast("string").cast("binary").alias("value"),
            ),
        ).alias("headers"),
    )


def write_records(spark: SparkSession, bootstrap: str, topic: str, first: int, last: int) -> int:
    frame = records(spark, first, last).cache()
    count = frame.count()
    (
        frame.write.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.linger.ms", "20")
        .option("kafka.batch.size", "262144")
        .option("kafka.compression.type", "lz4")
        .option("topic", topic)
        .save()
    )
    frame.unpersist()
    return count


# --- measurements -------------------------------------------------------------------------


def whole_topic(spark: SparkSession, binding: Binding) -> DataFrame:
    """Every record the topic holds now, through the job's own extract."""
    admin = admin_client(binding.bootstrap_servers)
    offsets = partition_offsets(admin, binding.topic, topic_partitions(admin, binding.topic))
    return extract_topic(spark, binding, plan_offsets(binding.topic, offsets, {}))


def whole_table(spark: SparkSession, binding: Binding) -> DataFrame:
    """Every row of the table up to now, through the job's own extract."""
    table, columns = extract_source_columns(spark, binding)
    return extract_source(spark, binding, table, columns, None, datetime.now(UTC))


def raw_scan(spark: SparkSession, binding: Binding) -> tuple[float, int, int]:
    """The job's own reads of the whole topic and table, only counted."""
    started = time.monotonic()
    topic_count = whole_topic(spark, binding).count()
    row_count = whole_table(spark, binding).count()
    return time.monotonic() - started, topic_count, row_count


def floor_run(spark: SparkSession, binding: Binding, out: Path) -> tuple[float, dict[str, int]]:
    """The least any reconciliation that keeps a key index does, in one pass: the same reads
    and record parse as the job, one aggregation per key (copies, first record, its audit
    session and sequence), one full join with the table's keys, one Parquet dataset written
    (the index with each key's source status), and the missing and duplicated keys counted
    from it. No earlier state, no ledgers, no checks: a bound from below on a full run, not a
    design (see the README's "floor")."""
    started = time.monotonic()
    parsed = transform_records(whole_topic(spark, binding), binding.record_key)
    first = F.struct("partition", "offset", "timestamp", "session", "seq")
    per_key = (
        parsed.where(F.col("key").isNotNull())
        .groupBy("key")
        .agg(F.count(F.lit(1)).alias("n"), F.min(first).alias("first"))
    )
    rows = transform_source_rows(
        whole_table(spark, binding),
        "audit_key",
        "audit_created",
        unique=True,
    )
    per_key.join(rows, "key", "full_outer").write.mode("overwrite").parquet(str(out))
    index = spark.read.parquet(str(out))
    counts = index.agg(
        F.count(F.when(F.col("n").isNull(), 1)).alias("missing"),
        F.count(F.when(F.col("n") > 1, 1)).alias("duplicate"),
    ).first()
    assert counts is not None
    return time.monotonic() - started, {"missing": int(counts["missing"]), "duplicate": int(counts["duplicate"])}


def driver_jvm(spark: SparkSession) -> Any:
    jvm = spark.sparkContext._jvm
    assert jvm is not None, "the session's JVM gateway is gone"
    return jvm


def jvm_cpu_spent(spark: SparkSession) -> tuple[float, float]:
    """(seconds the driver JVM's JIT compilers have spent, seconds its collectors have spent)
    since it started. In local mode the executors run in that JVM too."""
    factory = driver_jvm(spark).java.lang.management.ManagementFactory
    collected = sum(int(bean.getCollectionTime()) for bean in factory.getGarbageCollectorMXBeans())
    return int(factory.getCompilationMXBean().getTotalCompilationTime()) / 1000, collected / 1000


# What a driver JVM's threads are, by their name's start (Linux names a thread by its first
# 15 characters): the run's own planning and scheduling on the driver, its tasks, the JIT's
# compilers and the collectors. Everything else (listeners, RPC, the broadcast and file-listing
# pools) is "other".
THREAD_KINDS = (
    ("driver", ("Thread-", "dag-scheduler", "main")),
    ("tasks", ("Executor task",)),
    ("jit", ("C1 Compiler", "C2 Compiler")),
    ("gc", ("G1 ", "GC Thread", "VM Thread")),
)


def thread_cpu(spark: SparkSession) -> dict[str, float] | None:
    """CPU seconds the driver JVM's threads have spent, by THREAD_KINDS (threads that ended
    are left out), from /proc; None where there is none (not Linux) or the JVM is not this
    machine's. In local mode the executors' tasks run in this JVM too."""
    tasks = Path(f"/proc/{int(driver_jvm(spark).java.lang.ProcessHandle.current().pid())}/task")
    if not tasks.is_dir():
        return None
    tick = os.sysconf("SC_CLK_TCK")
    spent: dict[str, float] = dict.fromkeys([kind for kind, _ in THREAD_KINDS] + ["other"], 0.0)
    for thread in tasks.iterdir():
        try:
            stat = (thread / "stat").read_text()
        except OSError:
            continue  # ended since the listing
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        kind = next((k for k, starts in THREAD_KINDS if name.startswith(starts)), "other")
        spent[kind] += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return spent


def timed_run(spark: SparkSession, binding: Binding, state: Path) -> tuple[float, dict[str, Any], str]:
    """(seconds, the run's result, what the JVM's JIT compilers and collectors spent meanwhile,
    and the CPU of the driver JVM's threads by kind). On two cores the JIT's compiler threads
    compete with the run: a run early in a JVM's life pays for compiling the code paths it is
    the first to take."""
    jit_before, gc_before = jvm_cpu_spent(spark)
    threads_before = thread_cpu(spark)
    started = time.monotonic()
    result = run(spark, binding, RunOptions(state_dir=str(state), max_findings=0))
    elapsed = time.monotonic() - started
    jit_after, gc_after = jvm_cpu_spent(spark)
    threads_after = thread_cpu(spark)
    if result["status"] != "ok":
        raise SystemExit(f"the run failed: {result['error']}")
    spent = f"driver JVM's JIT compiling {jit_after - jit_before:.1f}s, GC {gc_after - gc_before:.1f}s"
    if threads_before is not None and threads_after is not None:
        by_kind = ", ".join(f"{kind} {threads_after[kind] - threads_before[kind]:.1f}" for kind in threads_after)
        spent += f"; its threads' CPU (s): {by_kind}"
    return elapsed, result, spent


def key_deltas(state: Path, binding: Binding) -> int:
    """How many key index deltas the committed state names."""
    return len(StateStore(state, binding.name, "").read_meta().key_deltas)


def check(result: dict[str, Any], expected: dict[str, int], what: str) -> None:
    got = {kind: result["counts"].get(kind, 0) for kind in ("missing", "duplicate")}
    # findings of other kinds, or rows it could not check, would mean a wrong result; the
    # header counts are records, reported apart (findings())
    others = {
        k: v for k, v in result["counts"].items() if k in (*FINDING_KINDS, UNVERIFIABLE) and k not in expected and v
    }
    if got != expected or others:
        raise SystemExit(f"{what}: expected {expected} and nothing else, got {result['counts']}")


def findings(result: dict[str, Any]) -> str:
    counts = result["counts"]
    headers = ", ".join(f"{name} {counts.get(name, 0):,}" for name in RECORD_COUNTS)
    return f"{sum(counts.get(kind, 0) for kind in FINDING_KINDS):,} findings ({headers})"


def jvm_memory(spark: SparkSession) -> tuple[int, dict[str, int], int]:
    """(peak resident set of the driver JVM, each heap pool's peak use, max heap), in bytes.
    The pools (eden, survivor, old) peak at different moments, so their sum bounds the heap's
    peak from above and can exceed the maximum heap. The old generation's peak is the one that
    grows with what the driver keeps: the young pools peak at their size whatever is kept."""
    jvm = driver_jvm(spark)
    pid = int(jvm.java.lang.ProcessHandle.current().pid())
    hwm = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) * 1024
    factory = jvm.java.lang.management.ManagementFactory
    pools = {
        str(pool.getName()): int(pool.getPeakUsage().getUsed())
        for pool in factory.getMemoryPoolMXBeans()
        if str(pool.getType().toString()) == "Heap memory"
    }
    return hwm, pools, int(factory.getMemoryMXBean().getHeapMemoryUsage().getMax())


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def main() -> int:
    args = parse_args()
    load_env_file(ROOT / ".env")
    source_url = os.environ["SOURCE_DATABASE_URL"]
    executor = f"--executor-memory {args.executor_memory} " if args.executor_memory else ""
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--driver-memory {args.driver_memory} {executor}pyspark-shell"
    suffix = uuid.uuid4().hex[:8]
    table, topic = f"bench_{suffix}", f"bench-reconcile-{suffix}"
    state = Path(tempfile.mkdtemp(prefix="reconcile-bench-"))
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    n, extra = args.rows, max(args.rows // 100, 1000)

    spark = build_spark_session("reconcile-scale", master=args.master)
    try:
        started = time.monotonic()
        admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(timeout=30)
        create_table(source_url, table)
        insert_rows(source_url, table, 1, n, "1 hour")
        index_table(source_url, table)
        table_s = time.monotonic() - started
        started = time.monotonic()
        record_count = write_records(spark, args.bootstrap, topic, 1, n)
        topic_s = time.monotonic() - started
        expected = expected_counts(1, n)
        print(
            f"rows={n:,} records={record_count:,} (missing {expected['missing']:,}, "
            f"duplicated {expected['duplicate']:,}) partitions={args.partitions} master={args.master} "
            f"driver-memory={args.driver_memory}"
        )
        print(f"generate: table {table_s:.1f}s, topic {topic_s:.1f}s")

        binding = binding_from_dict(
            {
                "name": f"bench-{suffix}",
                "topic": topic,
                "bootstrap_servers": args.bootstrap,
                "source_url": source_url,
                "table": table,
                "key_column": "id",
                "created_column": "created_at",
                "record_key": "key",
                "grace": "30s",
                "producer_ledger_topic": f"_audit.bench-none-{suffix}",  # no probes' ledger: none read
            }
        )
        # The session's first read of a topic and a table loads and compiles the Kafka source's
        # and JDBC's code: ~4-6 s at 1M that a second read does not pay. The runs below come
        # after reads, so the scan they are compared with is timed after one untimed read too.
        warm_s, _, _ = raw_scan(spark, binding)
        scan_s, scanned_records, scanned_rows = raw_scan(spark, binding)
        print(
            f"scan: {scan_s:.1f}s ({scanned_records:,} records, {scanned_rows:,} rows counted; "
            f"the first, untimed scan of the session took {warm_s:.1f}s)"
        )

        full_s, full, full_jvm = timed_run(spark, binding, state)
        check(full, expected, "full run")
        print(
            f"full: {full_s:.1f}s, {full['records_read'] / full_s:,.0f} records/s, "
            f"{findings(full)}, {full_jvm}, phases {full['timings']}"
        )

        incrementals: list[float] = []
        for round_no in range(1 + max(args.incrementals, 0)):
            first, last = n + round_no * extra + 1, n + (round_no + 1) * extra
            insert_rows(source_url, table, first, last, "1 minute")
            new_records = write_records(spark, args.bootstrap, topic, first, last)
            deltas_before = key_deltas(state, binding)
            incremental_s, incremental, incremental_jvm = timed_run(spark, binding, state)
            deltas_after = key_deltas(state, binding)
            for kind, count in expected_counts(first, last).items():
                expected[kind] += count
            check(incremental, expected, f"incremental {round_no + 1}")
            incrementals.append(incremental_s)
            print(
                f"incremental {round_no + 1}: {incremental_s:.1f}s over {extra:,} new rows and {new_records:,} "
                f"new records ({incremental['records_read']:,} read, mode {incremental['mode']}), "
                f"{findings(incremental)}, key index deltas {deltas_after}"
                f"{' (merged)' if deltas_after <= deltas_before else ''}, {incremental_jvm}, "
                f"phases {incremental['timings']}"
            )

        # The floor: the same inputs (the whole topic and table now) read and reconciled in one
        # pass, timed after one untimed pass, against a scan of the same inputs timed between.
        floor_dir = state / "floor"
        floor_run(spark, binding, floor_dir)
        end_scan_s, _, _ = raw_scan(spark, binding)
        floor_s, floor_counts = floor_run(spark, binding, floor_dir)
        if floor_counts != expected:
            raise SystemExit(f"floor: expected {expected}, got {floor_counts}")
        print(
            f"floor: {floor_s:.1f}s against a scan of the same inputs of {end_scan_s:.1f}s "
            f"(missing {floor_counts['missing']:,}, duplicated {floor_counts['duplicate']:,}: exact)"
        )

        # The full run again, warm: the same job over the same inputs as the floor and the scan
        # just before it, into a state of its own (empty: a full run), in a JVM that has compiled
        # the full run's code once. The full run above pays for that compiling (its JIT line).
        (state / "warm-full").mkdir()
        warm_full_s, warm_full, warm_full_jvm = timed_run(spark, binding, state / "warm-full")
        check(warm_full, expected, "warm full run")
        print(
            f"warm full: {warm_full_s:.1f}s over the same inputs as the floor ({warm_full['records_read']:,} read, "
            f"mode {warm_full['mode']}), {warm_full_jvm}, phases {warm_full['timings']}"
        )

        hwm, pools, heap_max = jvm_memory(spark)
        python_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        where = "local mode: executors included" if args.master.startswith("local") else "the driver alone"
        peaks = ", ".join(f"{name} {mib(peak)}" for name, peak in pools.items())
        print(
            f"peak driver memory: JVM resident {mib(hwm)} (heap pools' peaks: {peaks}; summed "
            f"{mib(sum(pools.values()))}, an upper bound; max heap {mib(heap_max)}; {where}), Python {mib(python_peak)}"
        )
        last_line = f"full_vs_scan={full_s / scan_s:.2f} incremental_vs_full={incrementals[0] / full_s:.3f}"
        if len(incrementals) > 1:
            last_line += f" warm_incremental_vs_full={statistics.median(incrementals[1:]) / full_s:.3f}"
        last_line += f" floor_vs_scan={floor_s / end_scan_s:.2f} warm_full_vs_scan={warm_full_s / end_scan_s:.2f}"
        print(last_line)
        return 0
    finally:
        spark.stop()
        if not args.keep:
            shutil.rmtree(state, ignore_errors=True)
            admin.delete_topics([topic])
            with psycopg.connect(source_url, autocommit=True) as conn:
                conn.execute(f"DROP TABLE IF EXISTS {table}")


if __name__ == "__main__":
    sys.exit(main())
