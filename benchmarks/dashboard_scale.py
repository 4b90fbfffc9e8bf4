"""The dashboard's pages at scale: the overview, the findings and the stuck items with
--findings current findings and --stuck open stuck items across --bindings bindings
(default 1,000,000 / 100,000 / 50).

    .venv/bin/python benchmarks/dashboard_scale.py [--bindings 50] [--findings 1000000]
        [--stuck 100000] [--requests 40] [--keep | --reuse SUFFIX]

Setup (not timed): the bindings (one cluster, one source), for each 20 older successful
runs (counts only, findings pruned, for the trend) and a current one holding its share of
the findings (mostly missing, some duplicates with their copies as evidence, orphans), a
stuck rule with one diagnosis and its share of open items over four verdicts, 200
acknowledged findings and 200 muted items, a lint scan with errors on the cluster, then
VACUUM ANALYZE (as autovacuum would after a bulk load). It is filled with SQL (generate_series).

Baseline, in the same run: the same pages with 2 bindings, 200 findings and 20 stuck items.

Timed: server time of each page (Django's test client in this process: the whole request
through middleware, view, queries and template; no network), --requests times each, the
pages interleaved; the findings and stuck pages are asked for their first, a middle and
the last page and a filter by kind / verdict in turn. The first request of each page after
setup is printed apart (cold: the overview's and the findings page's caches are empty).

The last line is ``overview_p95_ms=<x> findings_p95_ms=<y> stuck_p95_ms=<z>`` followed by
each figure's ratio to the baseline (``overview_vs_small=<r> ...``). Goal: each p95 < 150 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from auditor.lib.env import load_env_file  # noqa: E402 - after the path is set

load_env_file(ROOT / ".env")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "auditor.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402

# `make up` leaves a new stack's auditor database unmigrated: the rule and cluster need their tables.
call_command("migrate", interactive=False, verbosity=0)

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

from auditor.accounts.acknowledgements import acknowledge_many  # noqa: E402
from auditor.accounts.roles import OPERATOR, VIEWER, grant_role  # noqa: E402
from auditor.lint.models import LintResultRow, LintScan  # noqa: E402
from auditor.pipelines.models import Binding, Cluster, SourceDatabase, StuckRule  # noqa: E402
from auditor.reconcile.models import FINDING_ACK_KIND, Finding, ReconcileRun  # noqa: E402
from auditor.stuck.models import STUCK_ITEM_ACK_KIND, DiagnosisRun, StuckItem  # noqa: E402

OLDER_RUNS = 20
ACKED = 200
GOAL_MS = 150.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bindings", type=int, default=50)
    parser.add_argument("--findings", type=int, default=1_000_000)
    parser.add_argument("--stuck", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=40, help="requests per page (default 40)")
    parser.add_argument("--keep", action="store_true", help="keep what was set up, for --reuse")
    parser.add_argument("--reuse", metavar="SUFFIX", help="reuse what a --keep run set up")
    return parser.parse_args()


def fill(prefix: str, bindings: int, findings: int, stuck: int) -> list[Binding]:
    """Bindings named <prefix>-NN with their runs, findings, rules, stuck items; see the docstring."""
    now = timezone.now()
    cluster = Cluster.objects.create(name=prefix, bootstrap_servers="127.0.0.1:9")
    source = SourceDatabase.objects.create(name=prefix, url="postgresql://app:${APP_DB_PASSWORD}@127.0.0.1/app")
    made = []
    per_binding, stuck_per_rule = findings // bindings, stuck // bindings
    missing = per_binding * 8 // 10
    duplicates = per_binding // 10
    orphans = per_binding - missing - duplicates
    with transaction.atomic():
        for n in range(bindings):
            binding = Binding.objects.create(
                name=f"{prefix}-{n:02}",
                cluster=cluster,
                topic=f"{prefix}-{n:02}",
                source=source,
                table="public.items",
                key_column="id",
                schedule_seconds=300,
            )
            made.append(binding)
            for age in range(OLDER_RUNS, 0, -1):
                ReconcileRun.objects.create(
                    binding=binding,
                    trigger="schedule",
                    status="ok",
                    finished_at=now - age * timedelta(minutes=5),
                    counts={"missing": max(0, missing - age * 10), "duplicate": duplicates, "orphan": orphans},
                    findings_pruned=True,
                )
            run = ReconcileRun.objects.create(
                binding=binding,
                trigger="schedule",
                status="ok",
                finished_at=now - timedelta(minutes=1),
                counts={"missing": missing, "duplicate": duplicates, "orphan": orphans},
            )
            with connection.cursor() as cursor:
                cursor.execute(
                    """
                    INSERT INTO reconcile_finding (run_id, binding_id, kind, key, cause, partition, "offset", offsets,
                        timestamp, session, seq, seq_end, "group", evidence, is_new)
                    SELECT %(run)s, %(binding)s,
                           CASE WHEN i < %(missing)s THEN 'missing'
                                WHEN i < %(missing)s + %(dup)s THEN 'duplicate' ELSE 'orphan' END,
                           'K-' || i,
                           CASE WHEN i >= %(missing)s AND i < %(missing)s + %(dup)s THEN 'producer-retry'
                                WHEN i >= %(missing)s + %(dup)s THEN 'no-key' END,
                           CASE WHEN i >= %(missing)s THEN i %% 4 END,
                           CASE WHEN i >= %(missing)s THEN i END,
                           CASE WHEN i >= %(missing)s AND i < %(missing)s + %(dup)s
                                THEN jsonb_build_array(jsonb_build_object('partition', i %% 4, 'offset', i),
                                                       jsonb_build_object('partition', i %% 4, 'offset', i + 1)) END,
                           %(now)s - (i || ' seconds')::interval,
                           md5(%(binding)s::text), i, i, NULL,
                           CASE WHEN i >= %(missing)s AND i < %(missing)s + %(dup)s
                                THEN jsonb_build_object('count', 2, 'records', jsonb_build_array(
                                    jsonb_build_object('partition', i %% 4, 'offset', i, 'ts_ms', 1700000000000 + i),
                                    jsonb_build_object('partition', i %% 4, 'offset', i + 1, 'ts_ms', 1700000000001 + i)))
                                ELSE jsonb_build_object('created_at', %(now)s::text) END,
                           i %% 50 = 0
                    FROM generate_series(0, %(total)s - 1) AS i
                    """,
                    {
                        "run": run.pk,
                        "binding": binding.pk,
                        "missing": missing,
                        "dup": duplicates,
                        "total": per_binding,
                        "now": now,
                    },
                )
            rule = StuckRule.objects.create(
                name=binding.name, binding=binding, status_column="status", stuck_values=["NEW"], age_column="created"
            )
            diagnosis = DiagnosisRun.objects.create(
                rule=rule, status="ok", started_at=now, finished_at=now, total=stuck_per_rule, engine="python"
            )
            with connection.cursor() as cursor:
                cursor.execute(
                    """
                    INSERT INTO stuck_stuckitem (rule_id, key, status, age_seconds, since, verdict, reason, evidence,
                        first_seen, last_seen, verdict_since, resolved_at, first_run_id, last_run_id)
                    SELECT %(rule)s, 'K-' || i, 'NEW', 600 + i, %(now)s - ((600 + i) || ' seconds')::interval,
                           (ARRAY['skipped', 'waiting', 'never-produced', 'processed-not-updated'])[1 + i %% 4],
                           'group g committed past it but no consumer processed it',
                           jsonb_build_object('topic', %(topic)s, 'partition', i %% 4, 'offset', i,
                               'records', jsonb_build_array(jsonb_build_object('partition', i %% 4, 'offset', i,
                                   'state', 'committed')),
                               'groups', jsonb_build_array(jsonb_build_object('group', 'g', 'committed', i + 10))),
                           %(now)s, %(now)s, %(now)s, NULL, %(run)s, %(run)s
                    FROM generate_series(0, %(total)s - 1) AS i
                    """,
                    {"rule": rule.pk, "now": now, "topic": binding.topic, "total": stuck_per_rule, "run": diagnosis.pk},
                )
        scan = LintScan.objects.create(started_at=now, finished_at=now, trigger="manual", error_count=1)
        LintResultRow.objects.create(
            scan=scan,
            rule="P001",
            title="acks",
            severity="error",
            target_kind="producer",
            cluster=prefix,
            subject="producer app",
            config_key="acks",
            value="1",
            expected="all",
            message="acks=1 loses acked writes on failover",
            guarantee="at-least-once",
            source="explicit",
        )
    return made


def acknowledge_some(prefix: str, user: User) -> None:
    binding = Binding.objects.filter(name__startswith=f"{prefix}-").order_by("name").first()
    findings = Finding.objects.filter(binding=binding, kind="missing").order_by("id")[:ACKED]
    acknowledge_many(
        user, FINDING_ACK_KIND, [f.acknowledgement_key for f in findings], action="ack", reason="benchmark"
    )
    items = StuckItem.objects.filter(rule__name__startswith=f"{prefix}-").order_by("id")[:ACKED]
    acknowledge_many(user, STUCK_ITEM_ACK_KIND, [str(i.pk) for i in items], action="mute", reason="benchmark")


def analyze() -> None:
    """VACUUM ANALYZE the filled tables: what autovacuum does after a bulk load (statistics for the
    planner, the visibility map for index-only scans)."""
    with connection.cursor() as cursor:
        for table in ("reconcile_finding", "reconcile_reconcilerun", "stuck_stuckitem", "accounts_acknowledgement"):
            cursor.execute(f"VACUUM ANALYZE {table}")


def remove(prefix: str) -> None:
    started = time.monotonic()
    with transaction.atomic():
        StuckRule.objects.filter(name__startswith=f"{prefix}-").delete()
        Binding.objects.filter(name__startswith=f"{prefix}-").delete()
        Cluster.objects.filter(name=prefix).delete()
        SourceDatabase.objects.filter(name=prefix).delete()
        LintScan.objects.filter(results__cluster=prefix).delete()
    print(f"removed {prefix} ({time.monotonic() - started:.1f} s)", flush=True)


def viewer_client(prefix: str) -> Client:
    user = get_user_model().objects.create_user(username=f"{prefix}-viewer")
    grant_role(user, VIEWER)
    client = Client()
    client.force_login(user)
    return client


def timed(client: Client, url: str) -> float:
    started = time.perf_counter()
    response = client.get(url)
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise SystemExit(f"GET {url} answered {response.status_code}")
    return elapsed


def measure(client: Client, requests: int, urls: dict[str, Callable[[int], str]]) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in urls}
    for n in range(requests):
        for name, url in urls.items():
            times[name].append(timed(client, url(n)))
    return times


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[-1]


def pages(findings: int, stuck: int) -> dict[str, Callable[[int], str]]:
    finding_pages = max(1, findings // 50)
    stuck_pages = max(1, stuck // 50)
    finding_urls = [
        "/reconcile/findings/",
        f"/reconcile/findings/?page={finding_pages // 2}",
        f"/reconcile/findings/?page={finding_pages}",
        "/reconcile/findings/?kind=duplicate",
    ]
    stuck_urls = [
        "/stuck/",
        f"/stuck/?page={stuck_pages // 2}",
        f"/stuck/?page={stuck_pages}",
        "/stuck/?verdict=waiting",
    ]
    return {
        "overview": lambda n: "/",
        "findings": lambda n: finding_urls[n % len(finding_urls)],
        "stuck": lambda n: stuck_urls[n % len(stuck_urls)],
    }


def main() -> int:
    args = parse_args()
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    suffix = args.reuse or uuid.uuid4().hex[:6]
    small, big = f"dsb-s{suffix}", f"dsb-{suffix}"
    client = viewer_client(f"dsb-{uuid.uuid4().hex[:6]}")
    try:
        # Baseline: a small installation, measured in this run.
        if not args.reuse:
            fill(small, 2, 200, 20)
            analyze()
        measure(client, 3, pages(200, 20))  # warm up: templates compiled, connections opened
        base = measure(client, args.requests, pages(200, 20))
        base_p95 = {name: p95(values) for name, values in base.items()}
        print(
            "baseline (2 bindings, 200 findings, 20 stuck): " + " ".join(f"{k}={v:.1f}ms" for k, v in base_p95.items()),
            flush=True,
        )

        if not args.reuse:
            started = time.monotonic()
            fill(big, args.bindings, args.findings, args.stuck)
            operator = get_user_model().objects.create_user(username=f"dsb-{suffix}-operator")
            grant_role(operator, OPERATOR)
            acknowledge_some(big, operator)
            analyze()
            print(
                f"setup: {args.bindings} bindings, {Finding.objects.filter(binding__name__startswith=big + '-').count()} "
                f"findings, {StuckItem.objects.filter(rule__name__startswith=big + '-').count()} stuck items "
                f"({time.monotonic() - started:.1f} s)",
                flush=True,
            )
        urls = pages(args.findings, args.stuck)
        cold = {name: timed(client, url(0)) for name, url in urls.items()}
        print("cold (first request, empty caches): " + " ".join(f"{k}={v:.1f}ms" for k, v in cold.items()), flush=True)
        times = measure(client, args.requests, urls)
        for name, values in times.items():
            print(
                f"{name}: median {statistics.median(values):.1f} ms, p95 {p95(values):.1f} ms, "
                f"max {max(values):.1f} ms over {len(values)} requests",
                flush=True,
            )
        big_p95 = {name: p95(values) for name, values in times.items()}
        met = all(v < GOAL_MS for v in big_p95.values())
        print(f"goal each p95 < {GOAL_MS:.0f} ms: {'met' if met else 'NOT met'}")
        last_line = (
            f"overview_p95_ms={big_p95['overview']:.1f} findings_p95_ms={big_p95['findings']:.1f} "
            f"stuck_p95_ms={big_p95['stuck']:.1f} "
            + " ".join(f"{k}_vs_small={big_p95[k] / base_p95[k]:.2f}" for k in big_p95)
        )
    finally:
        get_user_model().objects.filter(username__startswith="dsb-").delete()
        if args.keep:
            print(f"kept: --reuse {suffix}")
        else:
            remove(small)
            remove(big)
    print(last_line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
