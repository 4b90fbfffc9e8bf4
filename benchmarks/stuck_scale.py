"""Stuck-item diagnosis at scale: --stuck stuck items among --rows rows (default 100,000 among
10,000,000), every row's record in a 4-partition topic except a tenth of the stuck ones.

    .venv/bin/python benchmarks/stuck_scale.py [--rows 10000000] [--stuck 100000] [--engine spark]
        [--ledgers] [--store] [--no-index | --compare] [--keep | --reuse SUFFIX] [--driver-memory 2g]

Setup (not timed): the topic with one record per produced row (key B-<id>, no audit headers);
empty ledger topics; a consumer group committed halfway through every partition; then a source
table with --rows rows (every (rows/stuck)-th one NEW, the rest DONE) filled by generate_series,
stamped over the 10 s before it is filled: after the topic's first records, as in a pipeline
whose topic predates its rows (a row stamped before the topic's first record may have had its
record in a topic deleted before it, and is never called never-produced); a stuck rule (rows
older than 5 s) and its binding (grace 1 s), in memory, saved only with --store.
``--ledgers`` makes it a probed pipeline: audit headers, a producer-ledger entry per record,
and a consumer ledger in which the group processed the first half of every partition except
the stuck rows (so those are skipped).

Setup also runs a real reconciliation of the binding (full, in-process, not timed) so the stuck
keys are looked up in its key index and only the records after it are read; ``--no-index``
skips it (the whole topic is read), ``--compare`` also times a diagnosis that reads the whole
topic, in the same run.

Timed: ``diagnose_rule`` — select the stuck rows, read the cluster, locate their records (from
the key index, then the Spark job joins the rest of the topic with the stuck keys; the driver
only receives matches), judge, re-check the rows. The SparkSession is started before (a worker keeps one; its start time is
printed apart). ``--store`` also times storing the run (items, counts, alerts). Everything
created is removed at the end unless ``--keep`` (then ``--reuse SUFFIX`` skips the setup).

The last line is always ``items_per_s=<x>`` (stuck items diagnosed per second of wall time),
with ``full_read_items_per_s=<y> vs_full_read=<x/y>`` after it under ``--compare``.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import sys
import time
import uuid
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from auditor.lib.env import load_env_file  # noqa: E402 - after the path is set

load_env_file(ROOT / ".env")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "auditor.settings")

import django  # noqa: E402
import django.db  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402

# `make up` leaves a new stack's auditor database unmigrated: the rule and cluster need their tables.
call_command("migrate", interactive=False, verbosity=0)

import psycopg  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from psycopg import sql  # noqa: E402

from auditor.pipelines.models import Binding, Cluster, SourceDatabase, StuckRule  # noqa: E402
from auditor.probes.codec import encode_consumer_batch, encode_producer_batch  # noqa: E402
from auditor.stuck.service import DiagnosisOptions, diagnose_rule, record_diagnosis, start_run  # noqa: E402

PARTITIONS = 4


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000, help="source rows (default 10,000,000)")
    parser.add_argument("--stuck", type=int, default=100_000, help="stuck rows among them (default 100,000)")
    parser.add_argument("--engine", choices=("spark", "python", "auto"), default="spark")
    parser.add_argument("--store", action="store_true", help="also store the run (items, counts, alerts)")
    parser.add_argument(
        "--ledgers",
        action="store_true",
        help="a probed pipeline: audit headers, a producer ledger entry per record, a consumer ledger",
    )
    parser.add_argument("--no-index", action="store_true", help="no reconciliation first: read the whole topic")
    parser.add_argument("--compare", action="store_true", help="also time a diagnosis reading the whole topic")
    parser.add_argument("--keep", action="store_true", help="keep the table, topics and rule for --reuse")
    parser.add_argument("--reuse", metavar="SUFFIX", help="reuse what a --keep run set up")
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    parser.add_argument(
        "--driver-memory",
        default="2g",
        help="spark.driver.memory of the session (default 2g): the untimed set-up reconciles the whole topic in it, "
        "which failed with OutOfMemoryError at Spark's 1g in some runs of 10,000,000 records",
    )
    args = parser.parse_args()
    if not 0 < args.stuck <= args.rows:
        parser.error("--stuck must be between 1 and --rows")
    return args


def names(suffix: str) -> dict[str, str]:
    return {
        "table": f"stuck_bench_{suffix}",
        "topic": f"stuck-bench-{suffix}",
        "producer_ledger": f"stuck-bench-pl-{suffix}",
        "consumer_ledger": f"stuck-bench-cl-{suffix}",
        "group": f"stuck-bench-{suffix}",
        "rule": f"stuck-bench-{suffix}",
    }


def _stat(path: Path) -> list[str]:
    """A /proc/<pid>/stat's fields after the command name (ppid first, utime and stime at 11 and 12)."""
    return path.read_text().rsplit(")", 1)[-1].split()


def machine_cpu() -> tuple[float, float]:
    """(CPU seconds the whole machine has been busy, of which this process and its
    children, the SparkSession's JVM among them), from /proc: read before and after the
    diagnosis, the difference tells what else ran meanwhile (a table's autovacuum, a broker)."""
    tick = os.sysconf("SC_CLK_TCK")
    busy = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    machine = sum(busy) - busy[3] - busy[4]  # less idle and iowait
    ours = 0
    for path in [Path("/proc/self/stat"), *Path("/proc").glob("[0-9]*/stat")]:
        try:
            fields = _stat(path)
        except OSError:
            continue  # ended meanwhile
        if path.parent.name == "self" or int(fields[1]) == os.getpid():  # the JVM spark-submit started
            ours += int(fields[11]) + int(fields[12])
    return machine / tick, ours / tick


def fill_table(url: str, table: str, rows: int, step: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        ident = sql.Identifier(table)
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (id bigint PRIMARY KEY, ticket_id text NOT NULL, status text NOT NULL, "
                "created_at timestamptz NOT NULL)"
            ).format(ident)
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO {} SELECT g, 'B-' || g, CASE WHEN g %% %s = 0 THEN 'NEW' ELSE 'DONE' END, "
                "now() - (%s - g) * interval '1 microsecond' FROM generate_series(1, %s) g"
            ).format(ident),
            [step, rows, rows],
        )
        conn.execute(sql.SQL("CREATE UNIQUE INDEX ON {} (ticket_id)").format(ident))
        conn.execute(sql.SQL("CREATE INDEX ON {} (status, created_at)").format(ident))
        conn.execute(sql.SQL("ANALYZE {}").format(ident))


def _never_produced(g: int, step: int) -> bool:
    return g % step == 0 and (g // step) % 10 == 0


def produce(bootstrap: str, topic: str, rows: int, step: int) -> int:
    """One record per row, except every tenth stuck row (never produced); returns records sent."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    sent = 0
    for g in range(1, rows + 1):
        if _never_produced(g, step):
            continue
        key = b"B-%d" % g
        while True:
            try:
                producer.produce(topic, b'{"id":%d}' % g, key)
                break
            except BufferError:
                producer.poll(0.1)
        sent += 1
        if sent % 100_000 == 0:
            producer.poll(0)
    if producer.flush(300):
        raise RuntimeError("records left undelivered")
    return sent


def _send(producer: Producer, topic: str, value: bytes, key: bytes | None = None, **extra: Any) -> None:
    while True:
        try:
            producer.produce(topic, value, key, **extra)
            return
        except BufferError:
            producer.poll(0.1)


def produce_probed(bootstrap: str, n: dict[str, str], rows: int, step: int) -> tuple[int, dict[int, int]]:
    """Like produce(), as an AuditedProducer would: audit headers, row g in partition g % 4, and a
    producer ledger with an acked entry per record; then the consumer ledger of a group that
    processed the first half of every partition except the stuck rows (those were skipped).

    Offsets are known without delivery callbacks: one idempotent producer per partition order.
    Returns (records sent, the committed offset per partition)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "enable.idempotence": True,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    pid = uuid.uuid4().hex
    ts = int(time.time() * 1000)
    offsets = dict.fromkeys(range(PARTITIONS), 0)
    ledger: list[tuple[Any, ...]] = []
    sent = 0
    for g in range(1, rows + 1):
        if _never_produced(g, step):
            continue
        key = b"B-%d" % g
        partition = g % PARTITIONS
        headers = [
            ("audit-id", key),
            ("audit-pid", pid.encode()),
            ("audit-seq", b"%d" % sent),
            ("audit-ts", b"%d" % ts),
        ]
        _send(producer, n["topic"], b'{"id":%d}' % g, key, partition=partition, headers=headers)
        ledger.append((sent, "acked", partition, offsets[partition], None, "persisted", key.decode(), ts))
        offsets[partition] += 1
        sent += 1
        if len(ledger) == 1000:
            for record in encode_producer_batch(pid, "bench", n["topic"], ledger):
                _send(producer, n["producer_ledger"], record, pid.encode())
            ledger = []
            producer.poll(0)
    for record in encode_producer_batch(pid, "bench", n["topic"], ledger):
        _send(producer, n["producer_ledger"], record, pid.encode())

    half = {p: count // 2 for p, count in offsets.items()}
    sid = uuid.uuid4().hex
    position = dict.fromkeys(range(PARTITIONS), 0)
    marks: list[tuple[Any, ...]] = []
    for g in range(1, rows + 1):
        if _never_produced(g, step):
            continue
        partition = g % PARTITIONS
        offset = position[partition]
        position[partition] += 1
        if offset < half[partition] and g % step != 0:
            marks.append((n["topic"], partition, offset, f"B-{g}", ts))
            if len(marks) == 1000:
                for record in encode_consumer_batch(sid, n["group"], marks):
                    _send(producer, n["consumer_ledger"], record, sid.encode())
                marks = []
                producer.poll(0)
    for record in encode_consumer_batch(sid, n["group"], marks):
        _send(producer, n["consumer_ledger"], record, sid.encode())
    if producer.flush(300):
        raise RuntimeError("records left undelivered")
    return sent, half


def commit(bootstrap: str, topic: str, group: str, offsets: dict[int, int] | None = None) -> None:
    """The group's committed offsets: the given ones, else halfway through every partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        if offsets is None:
            offsets = {}
            for p in range(PARTITIONS):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
                offsets[p] = (low + high) // 2
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def setup(args: argparse.Namespace, n: dict[str, str], url: str) -> StuckRule:
    step = args.rows // args.stuck
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    topics = [
        NewTopic(n["topic"], PARTITIONS, 1),
        NewTopic(n["producer_ledger"], 1, 1),
        NewTopic(n["consumer_ledger"], 1, 1),
    ]
    for future in admin.create_topics(topics).values():
        future.result(timeout=60)
    time.sleep(2)
    started = time.monotonic()
    if args.ledgers:
        sent, half = produce_probed(args.bootstrap, n, args.rows, step)
        commit(args.bootstrap, n["topic"], n["group"], half)
    else:
        sent = produce(args.bootstrap, n["topic"], args.rows, step)
        commit(args.bootstrap, n["topic"], n["group"])
    what = " with audit headers and both ledgers" if args.ledgers else ""
    print(f"setup: {sent} records in {n['topic']}{what} ({time.monotonic() - started:.1f} s)", flush=True)
    started = time.monotonic()
    fill_table(url, n["table"], args.rows, step)
    print(f"setup: {args.rows} rows in {n['table']} ({time.monotonic() - started:.1f} s)", flush=True)
    return make_rule(args, n, saved=args.store)


def make_rule(args: argparse.Namespace, n: dict[str, str], saved: bool) -> StuckRule:
    """The rule and its binding; unsaved (no write to the auditor's database) unless --store."""
    cluster = Cluster(name=n["rule"], bootstrap_servers=args.bootstrap)
    source = SourceDatabase(name=n["rule"], url="${SOURCE_DATABASE_URL}")
    binding = Binding(
        name=n["rule"],
        cluster=cluster,
        topic=n["topic"],
        source=source,
        table=n["table"],
        key_column="ticket_id",
        created_column="created_at",
        consumer_groups=[n["group"]],
        grace_seconds=1,
    )
    rule = StuckRule(
        name=n["rule"],
        binding=binding,
        status_column="status",
        stuck_values=["NEW"],
        age_column="created_at",
        older_than_seconds=5,
        schedule_seconds=0,
    )
    if saved:
        for obj in (cluster, source):
            obj.save()
        binding.cluster, binding.source = cluster, source
        binding.save()
        rule.binding = binding
        rule.save()
    return rule


def build_key_index(rule: StuckRule, spark: Any) -> None:
    """A full reconciliation of the binding in this SparkSession, its state in a temporary
    folder: the key index the diagnosis reads (not timed)."""
    import tempfile

    from django.conf import settings

    from auditor.reconcile.job import job_input
    from spark_jobs.binding import binding_from_dict
    from spark_jobs.reconcile import run
    from spark_jobs.reconcile_plan import RunOptions

    if spark is None:
        from spark_jobs.common import build_spark_session

        spark = build_spark_session("stuck-bench-index")
    state_dir = tempfile.mkdtemp(prefix="stuck-bench-state-")
    settings.RECONCILE_STATE_DIR = state_dir  # where the diagnosis looks for the key index
    atexit.register(shutil.rmtree, state_dir, True)
    started = time.monotonic()
    binding = binding_from_dict(job_input(rule.binding).payload)
    options = RunOptions(state_dir=state_dir, full=True, run_id="bench-index", max_findings=0)
    result = run(spark, binding, options)
    if result.get("status") != "ok":
        raise RuntimeError(f"the reconciliation that builds the key index failed: {result.get('error')}")
    print(f"setup: key index by reconciliation ({time.monotonic() - started:.1f} s)", flush=True)


class _NothingStored(Exception):
    """Without --store the rule and binding never reached the database."""


def teardown(args: argparse.Namespace, n: dict[str, str], url: str) -> None:
    try:
        if not (args.store or args.reuse):
            raise _NothingStored
        StuckRule.objects.filter(name=n["rule"]).delete()
        Binding.objects.filter(name=n["rule"]).delete()
        Cluster.objects.filter(name=n["rule"]).delete()
        SourceDatabase.objects.filter(name=n["rule"]).delete()
    except _NothingStored:
        pass
    except django.db.Error as exc:
        print(f"warning: could not remove the rule and binding {n['rule']}: {exc}", file=sys.stderr)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(n["table"])))
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    for future in admin.delete_topics([n["topic"], n["producer_ledger"], n["consumer_ledger"]]).values():
        try:
            future.result(timeout=60)
        except Exception:  # noqa: BLE001 - best effort
            pass
    admin.delete_consumer_groups([n["group"]])


def main() -> int:
    args = parse_args()
    url = os.environ["SOURCE_DATABASE_URL"]
    suffix = args.reuse or uuid.uuid4().hex[:8]
    n = names(suffix)
    rule = make_rule(args, n, saved=False) if args.reuse else setup(args, n, url)
    if args.reuse and args.store:
        rule = StuckRule.objects.filter(name=n["rule"]).first() or make_rule(args, n, saved=True)
    try:
        spark: Any = None
        if args.engine != "python":
            from spark_jobs.common import build_spark_session

            os.environ["PYSPARK_SUBMIT_ARGS"] = f"--driver-memory {args.driver_memory} pyspark-shell"
            started = time.monotonic()
            spark = build_spark_session("stuck-bench")
            print(f"driver memory: {args.driver_memory}", flush=True)
            print(f"spark session start: {time.monotonic() - started:.1f} s", flush=True)
        if not args.no_index:
            build_key_index(rule, spark)
        options = DiagnosisOptions(
            engine=args.engine,
            use_index=not args.no_index,
            spark=spark,
            producer_ledger_topic=n["producer_ledger"],
            consumer_ledger_topic=n["consumer_ledger"],
            max_items=max(args.stuck, 200_000),
            timeout_s=30,
        )
        machine_before, ours_before = machine_cpu()
        started = time.monotonic()
        result = diagnose_rule(rule, options)
        wall = time.monotonic() - started
        machine_after, ours_after = machine_cpu()
        machine_busy, ours = machine_after - machine_before, ours_after - ours_before
        verdicts = Counter(item.diagnosis.verdict for item in result.items)
        print(f"diagnosed {len(result.items)} stuck items among {args.rows} rows with {result.engine or args.engine}")
        print(f"verdicts: {dict(sorted(verdicts.items()))}")
        print(f"phases: {result.timings}")
        print(f"diagnosis wall time: {wall:.1f} s")
        print(
            f"CPU during it: the machine {machine_busy:.1f} s, this process and its JVM {ours:.1f} s, "
            f"everything else {machine_busy - ours:.1f} s (of {2 * wall:.1f} s on two cores)"
        )
        if args.store:
            started = time.monotonic()
            record_diagnosis(start_run(rule, "cli"), result)
            print(f"storing the run: {time.monotonic() - started:.1f} s")
        if len(result.items) != args.stuck:
            print(f"warning: expected {args.stuck} items", file=sys.stderr)
        step = args.rows // args.stuck
        dropped = sum(1 for g in range(step, args.rows + 1, step) if _never_produced(g, step))
        if verdicts["never-produced"] != dropped:  # as the set-up built them (no ledger tells without --ledgers)
            print(f"warning: {dropped} rows were never produced, {verdicts['never-produced']} said so", file=sys.stderr)
        full_wall = None
        if args.compare:
            started = time.monotonic()
            full = diagnose_rule(rule, replace(options, use_index=False))
            full_wall = time.monotonic() - started
            same = {i.row.key: i.diagnosis.verdict for i in full.items} == {
                i.row.key: i.diagnosis.verdict for i in result.items
            }
            print(f"full read: {full_wall:.1f} s, phases {full.timings}; same verdicts: {same}")
            if not same:
                print("error: the index and the full read disagree", file=sys.stderr)
                return 1
    finally:
        if args.keep:
            print(f"kept: --reuse {suffix}")
        else:
            teardown(args, n, url)
    line = f"items_per_s={len(result.items) / wall:.1f}"
    if full_wall:
        line += f" full_read_items_per_s={len(result.items) / full_wall:.1f} vs_full_read={full_wall / wall:.2f}"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
