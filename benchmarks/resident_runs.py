"""Scheduled reconciliations: the resident driver against a spark-submit per run.

    .venv/bin/python benchmarks/resident_runs.py [--rows 10000] [--new 100] [--rounds 5] [--soak 30]

Builds a source table of N rows and a topic of N records (one per row, with audit headers)
on the dev stack (`make up`), and a binding over them. Two state folders, one per arm, each
starting with a full run (untimed). Then rounds: --new rows and records are added, and each
arm runs the same incremental reconciliation, in turn:

* submit: `job.run_spark_submit`, what the worker runs with RECONCILE_RUNNER=submit (a new
  driver JVM per run);
* resident: `resident.run_resident` in this process's one session, what the reconciler runs
  with RECONCILE_RUNNER=resident.

Both arms must report the same counts every round. Then --soak more rounds of the resident
arm alone, to see whether its driver's heap stays flat over many runs. Prints each round's
wall times, the resident driver's heap in use after a full GC following each run, and as its
last line ``resident_vs_submit=<median resident / median submit> heap_growth=<median heap of
the later half of the incremental runs / of the earlier half>`` (the heap after GC saws up and
down as the Kafka source's idle consumers and the status store's oldest entries are dropped,
so single runs say little).
Everything it created is removed at the end.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from auditor.lib.env import load_env_file  # noqa: E402 - after the path is set

load_env_file(ROOT / ".env")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "auditor.settings")
os.environ.setdefault("RECONCILE_RESIDENT_MAX_RUNS", "0")  # one driver throughout: its heap is what is measured

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402

# `make up` leaves a new stack's auditor database unmigrated: the rule and cluster need their tables.
call_command("migrate", interactive=False, verbosity=0)
logging.getLogger("auditor.reconcile.job").setLevel(logging.WARNING)  # not each spark-submit command line

import psycopg  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from auditor.pipelines.models import Binding, Cluster, SourceDatabase  # noqa: E402
from auditor.reconcile import job, resident  # noqa: E402

SESSION = "5e55" * 8  # an audit session id as the contract spells it


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000, help="rows and records before the first run")
    parser.add_argument("--new", type=int, default=100, help="rows and records added before each round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of both arms (at least 1)")
    parser.add_argument("--soak", type=int, default=30, help="then rounds of the resident arm alone")
    return parser.parse_args()


def add(url: str, table: str, bootstrap: str, topic: str, first: int, last: int) -> None:
    """Rows first..last, created a minute ago, and one record each."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {table} (id, created_at) SELECT g, now() - interval '1 minute' "
            "FROM generate_series(%s::bigint, %s::bigint) g",
            (first, last),
        )
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    for n in range(first, last + 1):
        key = str(n).encode()
        headers: list[tuple[str, str | bytes | None]] = [
            ("audit-id", key),
            ("audit-pid", SESSION.encode()),
            ("audit-seq", key),
            ("audit-ts", str(int(time.time() * 1000)).encode()),
        ]
        producer.produce(topic, key=key, value=b"{}", headers=headers)
        if n % 10_000 == 0:
            producer.poll(0)
    if producer.flush(60):
        raise SystemExit("records were left unsent")


def heap_after_gc() -> int:
    spark, _ = resident.session()
    runtime = spark._jvm.java.lang.Runtime.getRuntime()  # type: ignore[union-attr]
    spark._jvm.java.lang.System.gc()  # type: ignore[union-attr]
    return int(runtime.totalMemory() - runtime.freeMemory())


def timed(arm: str, state: Path, run: Callable[[str], dict[str, Any]], run_id: str) -> tuple[float, dict[str, Any]]:
    os.environ["RECONCILE_STATE_DIR"] = str(state)
    started = time.monotonic()
    result = run(run_id)
    elapsed = time.monotonic() - started
    if result.get("status") != "ok":
        raise SystemExit(f"{arm}: the run failed: {result.get('error')}")
    return elapsed, result


def main() -> int:
    args = parse_args()
    suffix = uuid.uuid4().hex[:8]
    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    url = os.environ["SOURCE_DATABASE_URL"]
    topic, table, name = f"resident-bench-{suffix}", f"resident_bench_{suffix}", f"resident-bench-{suffix}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    folder = Path(tempfile.mkdtemp(prefix="resident-bench-"))
    run_ids: list[str] = []
    binding = None
    try:
        admin.create_topics([NewTopic(topic, 4, -1)])[topic].result(30)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, created_at timestamptz NOT NULL)")
        add(url, table, bootstrap, topic, 1, args.rows)
        cluster = Cluster.objects.create(name=name, bootstrap_servers=bootstrap)
        source = SourceDatabase.objects.create(name=name, url="${SOURCE_DATABASE_URL}")
        binding = Binding.objects.create(
            name=name, cluster=cluster, topic=topic, source=source, table=f"public.{table}", key_column="id",
            created_column="created_at", record_key="key", grace_seconds=30, schedule_seconds=0,
        )  # fmt: skip
        job_input = job.job_input(binding)

        def submit(run_id: str) -> dict[str, Any]:
            run_ids.append(run_id)
            return job.run_spark_submit(job_input, run_id, False)

        def in_resident(run_id: str) -> dict[str, Any]:
            run_ids.append(run_id)
            return resident.run_resident(job_input, run_id, False)

        arms = {"submit": (folder / "submit", submit), "resident": (folder / "resident", in_resident)}
        print(
            f"rows=records={args.rows:,} new per round={args.new:,} rounds={args.rounds} master={os.environ.get('SPARK_MASTER', 'local[*]')}"
        )
        for arm, (state, run) in arms.items():
            elapsed, result = timed(arm, state, run, f"{arm}-full-{suffix}")
            print(
                f"{arm}: full run {elapsed:.1f}s ({result['mode']}), timings {result.get('timings', {}).get('driver_start')}"
            )
        heaps: list[int] = []
        times: dict[str, list[float]] = {arm: [] for arm in arms}
        last = args.rows
        for n in range(args.rounds):
            add(url, table, bootstrap, topic, last + 1, last + args.new)
            last += args.new
            counts = {}
            for arm, (state, run) in arms.items():
                elapsed, result = timed(arm, state, run, f"{arm}-{n}-{suffix}")
                times[arm].append(elapsed)
                counts[arm] = result["counts"]
            if counts["submit"] != counts["resident"]:
                raise SystemExit(f"round {n}: the arms disagree: {counts}")
            heaps.append(heap_after_gc())
            print(
                f"round {n}: submit {times['submit'][-1]:.1f}s, resident {times['resident'][-1]:.1f}s, "
                f"resident heap after GC {heaps[-1] / 2**20:.0f} MiB, counts {counts['resident']}"
            )
        for n in range(args.soak):
            add(url, table, bootstrap, topic, last + 1, last + args.new)
            last += args.new
            elapsed, _ = timed("resident", folder / "resident", in_resident, f"resident-soak-{n}-{suffix}")
            heaps.append(heap_after_gc())
            print(f"soak {n}: resident {elapsed:.1f}s, heap after GC {heaps[-1] / 2**20:.0f} MiB")
        medians = {arm: statistics.median(t) for arm, t in times.items()}
        print(f"medians: submit {medians['submit']:.1f}s, resident {medians['resident']:.1f}s")
        half = len(heaps) // 2
        growth = statistics.median(heaps[half:]) / statistics.median(heaps[:half]) if half else 1.0
        print(f"resident heap after GC: {min(heaps) / 2**20:.0f}-{max(heaps) / 2**20:.0f} MiB over {len(heaps)} runs")
        print(f"resident_vs_submit={medians['resident'] / medians['submit']:.3f} heap_growth={growth:.2f}")
        return 0
    finally:
        if binding is not None:
            cluster, source = binding.cluster, binding.source
            binding.delete()
            cluster.delete()
            source.delete()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
        with psycopg.connect(job.auditor_jdbc_url(), autocommit=True) as conn:
            conn.execute("DELETE FROM reconcile_finding_staging WHERE run_id = ANY(%s)", (run_ids,))
        admin.delete_topics([topic])
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
