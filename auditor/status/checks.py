"""Health checks of every component the auditor depends on.

Each check returns a ComponentStatus; none raises. They are run by a Celery beat task
and the result is cached in Redis and pushed to browsers when it changes.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, cast

import redis
from confluent_kafka.admin import AdminClient
from django.conf import settings
from django.core.cache import cache
from django.db import connection

from auditor.celery import app
from auditor.lib.secrets import mask_text, mask_url

BEAT_HEARTBEAT_KEY = "status:beat-heartbeat"
BEAT_STALE_SECONDS = 30


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    healthy: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_kafka() -> list[ComponentStatus]:
    """One entry per broker the cluster metadata knows, plus the bootstrap list itself."""
    bootstrap = settings.KAFKA_BOOTSTRAP_SERVERS
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000})
        metadata = admin.list_topics(timeout=5)
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return [ComponentStatus("kafka", False, f"cannot reach {bootstrap}: {exc}")]
    expected = {f"{host}" for host in bootstrap.split(",")}
    seen = {}
    for broker in metadata.brokers.values():
        seen[f"{broker.host}:{broker.port}"] = broker.id
    statuses = [
        ComponentStatus(f"kafka broker {node_id}", True, f"{address} in cluster metadata")
        for address, node_id in sorted(seen.items(), key=lambda item: item[1])
    ]
    for address in sorted(expected - set(seen)):
        statuses.append(ComponentStatus(f"kafka {address}", False, "not in cluster metadata: broker down"))
    return statuses


def check_secured_clusters() -> list[ComponentStatus]:
    """One entry per configured cluster that authenticates or encrypts: does it accept the
    auditor's credentials and trust its CA? (A wrong password shows here before a run fails.)"""
    from auditor.pipelines.connectivity import ConnectivityError, check_cluster, is_secured
    from auditor.pipelines.models import Cluster

    statuses = []
    for cluster in Cluster.objects.all():
        if not is_secured(cluster.config):
            continue
        try:
            check_cluster(cluster, timeout_s=3.0)
        except ConnectivityError as exc:
            statuses.append(ComponentStatus(f"cluster {cluster.name}", False, str(exc)))
            continue
        protocol = cluster.config.get("security.protocol")
        statuses.append(ComponentStatus(f"cluster {cluster.name}", True, f"{protocol}: accepted the auditor"))
    return statuses


def check_postgres() -> ComponentStatus:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT version()")
            version = cursor.fetchone()[0].split(",")[0]
        return ComponentStatus("postgresql", True, version)
    except Exception as exc:  # noqa: BLE001
        return ComponentStatus("postgresql", False, str(exc).strip())


def check_redis() -> ComponentStatus:
    # REDIS_URL may carry a password (redis://:pw@host): the status page shows it masked.
    shown = mask_url(settings.REDIS_URL)
    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2)
        # cast: redis-py annotates the sync and asyncio clients alike; the sync one returns the dict.
        info = cast(dict[str, Any], client.info("server"))
        return ComponentStatus("redis", True, f"redis {info['redis_version']} at {shown}")
    except Exception as exc:  # noqa: BLE001
        return ComponentStatus("redis", False, f"{shown}: {exc}")


def check_celery_workers() -> ComponentStatus:
    try:
        replies = app.control.ping(timeout=1.0)
    except Exception as exc:  # noqa: BLE001
        return ComponentStatus("celery workers", False, str(exc))
    if not replies:
        return ComponentStatus("celery workers", False, "no worker answered a ping")
    names = sorted(name for reply in replies for name in reply)
    return ComponentStatus("celery workers", True, f"{len(names)} worker(s): {', '.join(names)}")


def check_reconciler() -> list[ComponentStatus]:
    """With RECONCILE_RUNNER=resident: is a worker taking the reconcile queue? (Without one,
    reconciliations wait there unrun.) A reconciler in the middle of a run cannot answer (one
    run at a time, in its main thread): a running run stands for it."""
    from auditor.reconcile import conf as reconcile_conf  # deferred: the reconcile app loads after status
    from auditor.reconcile.models import ReconcileRun

    if reconcile_conf.runner() != reconcile_conf.RESIDENT:
        return []
    queue = reconcile_conf.reconciler_queue()
    try:
        answers = app.control.inspect(timeout=1.0).active_queues() or {}
    except Exception as exc:  # noqa: BLE001
        return [ComponentStatus("reconciler", False, str(exc))]
    takers = sorted(worker for worker, queues in answers.items() if any(q.get("name") == queue for q in queues))
    if takers:
        return [ComponentStatus("reconciler", True, f"{', '.join(takers)} takes {queue}")]
    running = ReconcileRun.objects.filter(status=ReconcileRun.RUNNING).order_by("-started_at").first()
    if running is not None:
        return [
            ComponentStatus("reconciler", True, f"busy: run #{running.pk} is running (claimed by {running.claimed_by})")
        ]
    return [
        ComponentStatus(
            "reconciler",
            False,
            f"RECONCILE_RUNNER=resident, but no worker takes queue {queue}: reconciliations wait there unrun "
            "(make run starts the reconciler)",
        )
    ]


def check_beat() -> ComponentStatus:
    last = cache.get(BEAT_HEARTBEAT_KEY)
    if last is None:
        return ComponentStatus("celery beat", False, "no heartbeat from beat yet")
    age = time.time() - float(last)
    if age > BEAT_STALE_SECONDS:
        return ComponentStatus("celery beat", False, f"last heartbeat {age:.0f}s ago")
    return ComponentStatus("celery beat", True, f"heartbeat {age:.0f}s ago")


def check_spark() -> ComponentStatus:
    master = settings.SPARK_MASTER
    jars_dir = settings.SPARK_JARS_DIR
    jars = sorted(p.name for p in jars_dir.glob("*.jar")) if jars_dir.is_dir() else []
    if not any(name.startswith("spark-sql-kafka") for name in jars):
        return ComponentStatus("spark", False, f"spark-sql-kafka jar missing in {jars_dir}")
    if not any(name.startswith("postgresql") for name in jars):
        return ComponentStatus("spark", False, f"PostgreSQL JDBC driver missing in {jars_dir}")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return ComponentStatus("spark", False, "java not found")
    try:
        import pyspark  # deferred: pyspark is heavy, and the check reports it missing rather than failing
    except ImportError as exc:
        return ComponentStatus("spark", False, f"pyspark not importable: {exc}")
    if master.startswith("spark://"):
        host, _, port = master.removeprefix("spark://").partition(":")
        try:
            socket.create_connection((host, int(port or 7077)), timeout=2).close()
        except OSError as exc:
            return ComponentStatus("spark", False, f"master {master} unreachable: {exc}")
    return ComponentStatus("spark", True, f"pyspark {pyspark.__version__}, master {master}, {len(jars)} jars")


CHECKS: list[Callable[[], ComponentStatus | list[ComponentStatus]]] = [
    check_kafka,
    check_secured_clusters,
    check_postgres,
    check_redis,
    check_celery_workers,
    check_reconciler,
    check_beat,
    check_spark,
]


def run_all_checks() -> list[ComponentStatus]:
    """Every check's result; a URL quoted in any detail (an error message, say) is masked,
    since the details are cached, pushed to browsers and shown on the status page."""
    results: list[ComponentStatus] = []
    for check in CHECKS:
        try:
            outcome = check()
        except Exception as exc:  # noqa: BLE001 - one broken check must not take the page down
            name = check.__name__.removeprefix("check_").replace("_", " ")
            outcome = ComponentStatus(name, False, f"the check itself failed: {type(exc).__name__}: {exc}")
        for status in outcome if isinstance(outcome, list) else [outcome]:
            results.append(ComponentStatus(status.name, status.healthy, mask_text(status.detail)))
    return results
