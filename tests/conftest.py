"""Fixtures shared by the whole suite.

The backing services are real and started before pytest (`make test` starts the test
stack: 3 Kafka brokers, PostgreSQL, Redis, and exports its settings). Running pytest by
hand falls back to the dev stack's .env. Under CI an unreachable service fails the run;
it is never skipped.

Live-process fixtures (ASGI server, Celery worker and beat) use the test database that
pytest-django creates; tests that use them are marked django_db (never transactional_db,
whose flush would delete the data those processes rely on).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import pytest

from auditor.lib.env import load_env_file
from tests.support.live import LiveProcesses, daphne, start_celery_worker
from tests.support.paths import ROOT, TEST_LOGS, WORKER
from tests.support.secured import Secured
from tests.support.waiting import wait_until

pytest_plugins = [
    "tests.support.fixtures.accounts",
    "tests.support.fixtures.alerts",
    "tests.support.fixtures.demo",
    "tests.support.fixtures.held_watermark",
]

load_env_file(ROOT / ".env")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "auditor.settings")
# Reconciliation reads the consumer ledger's end MARK_SETTLE_SECONDS (3 s) after the committed
# offsets, for marks a live probe writes at its next flush. The suite's consumers flush their
# ledgers before a run reads them (they commit synchronously or close), and its runs wait
# 0.5 s; test_marks_that_trail_an_auto_commit_are_waited_for_not_called_unprocessed sets its own.
os.environ.setdefault("RECONCILE_MARK_SETTLE_SECONDS", "0.5")
# A record a probed consumer session's last commit passed unprocessed is not called skipped
# until that session's max.poll.interval.ms (300 s) has passed since the commit: it may be
# paused mid-processing. The suite's crashed consumers are known dead, so it does not wait;
# tests/stuck/test_processing_hold.py lifts the cap to see the hold.
os.environ.setdefault("AUDITOR_PROCESSING_BOUND_SECONDS", "0")
# Playwright's sync API keeps an event loop running in the test thread; the test's own
# ORM calls are still synchronous (pytest-django's documented setting for this case).
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
# py4j logs at interpreter exit, after pytest closed the streams.
logging.getLogger("py4j").setLevel(logging.WARNING)


def pytest_configure(config: pytest.Config) -> None:
    """The test stack's Redis outlives a run; a cached status snapshot or count from the
    last run would hide what a fresh clone (CI) sees. Only the test stack's Redis is cleared,
    once per pytest run, and only this session's namespace (other checkouts' sessions run beside
    it on the same Redis): by the process that runs the tests, or by pytest-xdist's controller
    before its workers start (a worker clearing would wipe what another worker's tests stored)."""
    if os.environ.get("STACK") != "test" or hasattr(config, "workerinput"):
        return
    import redis

    from tests.support.redis_reset import reset_session_redis

    reset_session_redis(redis.Redis.from_url(os.environ["REDIS_URL"], socket_timeout=5), _NAMESPACE)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A transactional_db test ends by flushing the test database, which deletes what the
    migrations wrote (the role groups, beat's schedules) for the tests after it in its process:
    pytest-django runs such tests last, and make test runs them alone, after the parallel pass
    (where a worker would go on to other files after one)."""
    for item in items:
        marker = item.get_closest_marker("django_db")
        if marker is not None and (
            marker.kwargs.get("transaction") or "transactional_db" in getattr(item, "fixturenames", ())
        ):
            item.add_marker(pytest.mark.alone)


@pytest.fixture(autouse=True)
def _broker_faults_only_where_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """`make test` runs most tests in parallel workers on one broker stack, and the tests marked
    `alone` after them: a broker stopped or frozen by an unmarked test would stall or fail the
    tests beside it. In an unmarked test the lab cluster only starts or resumes brokers (the
    lab's heal after a scenario); stopping, killing, pausing and losing a disk are refused."""
    if request.node.get_closest_marker("alone"):
        return
    from auditor.lab.cluster import Cluster

    def refuse(what: str) -> None:
        raise AssertionError(
            f"{request.node.nodeid} {what}: mark it @pytest.mark.alone so that make test runs it alone"
        )

    original = Cluster.broker

    def broker(self: Cluster, action: str, broker_id: int) -> None:
        if action not in ("start", "resume"):
            refuse(f"would {action} broker {broker_id}")
        original(self, action, broker_id)

    def lose_disk(self: Cluster, *args: object, **kwargs: object) -> None:
        refuse("would make a broker lose a partition's log")

    monkeypatch.setattr(Cluster, "broker", broker)
    monkeypatch.setattr(Cluster, "lose_disk", lose_disk)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    return os.environ["KAFKA_BOOTSTRAP_SERVERS"]


@pytest.fixture(scope="session")
def kafka_brokers() -> int:
    return int(os.environ.get("KAFKA_BROKERS", "1"))


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.list_topics(timeout=10)  # fail fast with the broker's error if unreachable
    return admin


def _topics_deleted_after(kafka_admin) -> Iterator[Callable[..., str]]:
    """Create uniquely named topics; they are deleted when the generator is closed."""
    from confluent_kafka.admin import NewTopic

    from auditor.lab.cluster import all_led

    created: list[str] = []

    def create(prefix: str = "t", partitions: int = 1, replication_factor: int = -1, config: dict | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        futures = kafka_admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=replication_factor, config=config or {})]
        )
        futures[name].result(timeout=30)
        created.append(name)
        wait_until(lambda: all_led(kafka_admin, name, partitions), 20, f"topic {name} with a leader for each partition")
        return name

    yield create
    if created:
        for future in kafka_admin.delete_topics(created).values():
            try:
                future.result(timeout=30)
            except Exception:  # noqa: BLE001 - a test may have deleted it itself
                pass


@pytest.fixture
def make_topic(kafka_admin) -> Iterator[Callable[..., str]]:
    """Create uniquely named topics; they are deleted after the test."""
    yield from _topics_deleted_after(kafka_admin)


@pytest.fixture(scope="module")
def make_module_topic(kafka_admin) -> Iterator[Callable[..., str]]:
    """make_topic for module-scoped fixtures: the topics are deleted after the module."""
    yield from _topics_deleted_after(kafka_admin)


@pytest.fixture(scope="session")
def spark():
    from auditor.reconcile.resident import KAFKA_POOL_SETTINGS
    from spark_jobs.common import build_spark_session

    # One JVM reads many topics, as the resident reconciler's does, and its Kafka consumer
    # pool is set as that driver's: idle consumers of earlier tests' reads are evicted, and
    # never closed inside a later read's task (test_spark_read_frozen_broker).
    session = build_spark_session("auditor-tests", shuffle_partitions=2, settings=KAFKA_POOL_SETTINGS)
    yield session
    session.stop()


def _session_namespace() -> str:
    """Queue and channel prefix of this test session, so concurrent sessions on one Redis stay apart.

    Taken from the configured database name before pytest-django renames it to test_*, and
    the pytest-xdist worker's name (each worker has its own test database and processes).
    """
    return _NAMESPACE


_NAMESPACE = "auditor-" + os.environ["DATABASE_URL"].rsplit("/", 1)[-1] + (f"-{WORKER}" if WORKER else "")


@pytest.fixture(scope="session", autouse=True)
def _isolated_redis_namespace() -> None:
    from django.conf import settings

    namespace = _session_namespace()
    # Celery reads its configuration from settings lazily, on first use.
    settings.CELERY_TASK_DEFAULT_QUEUE = namespace
    settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = namespace
    # Read by the cache handler on its first use; pytest-xdist's workers share the test Redis.
    settings.CACHES["default"]["KEY_PREFIX"] = namespace


def _test_database_url() -> str:
    from django.conf import settings

    db = settings.DATABASES["default"]
    return f"postgresql://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


@pytest.fixture(scope="session")
def live_env(django_db_setup, django_db_blocker) -> dict[str, str]:
    """Environment for subprocesses that must use the test database."""
    env = dict(os.environ)
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # the live processes keep Django's async safety
    env["DATABASE_URL"] = _test_database_url()
    env["AUDITOR_CELERY_QUEUE"] = env["AUDITOR_CHANNEL_PREFIX"] = env["AUDITOR_CACHE_PREFIX"] = _session_namespace()
    return env


@pytest.fixture(scope="session")
def celery_worker_process(live_env) -> Iterator[LiveProcesses]:
    procs = LiveProcesses(live_env)
    start_celery_worker(procs, "worker", f"test-{uuid.uuid4().hex[:6]}@test", _session_namespace(), "threads", 4)
    yield procs
    procs.stop()


@pytest.fixture(scope="session")
def celery_beat_process(live_env, celery_worker_process) -> Iterator[LiveProcesses]:
    procs = LiveProcesses(live_env)
    schedule_dir = TEST_LOGS
    procs.start(
        "beat",
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "auditor",
            "beat",
            "--loglevel=INFO",
            "-s",
            str(schedule_dir / "beat-schedule"),
        ],
    )
    yield procs
    procs.stop()


@pytest.fixture(scope="session")
def admin_credentials(django_db_setup, django_db_blocker) -> tuple[str, str]:
    """A superuser committed to the test database (visible to the live processes)."""
    from django.contrib.auth import get_user_model

    password = uuid.uuid4().hex
    with django_db_blocker.unblock():
        user, _ = get_user_model().objects.get_or_create(username="e2e-admin")
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
    return "e2e-admin", password


@pytest.fixture(scope="session")
def asgi_server(live_env) -> Iterator[str]:
    """Daphne serving the real ASGI app (HTTP + websockets) on a free port."""
    with daphne(live_env) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium driven by Playwright (no browser download)."""
    from playwright.sync_api import sync_playwright

    executable = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=executable,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield b
        b.close()


# --- the stack's secured listener (SASL_SSL, SCRAM-SHA-512) and TLS database -----------------


@pytest.fixture(scope="session")
def secured() -> Secured:
    names = ("KAFKA_SECURE_BOOTSTRAP_SERVERS", "KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD", "KAFKA_CA_LOCATION")
    missing = [name for name in names if not os.environ.get(name)]
    if missing:
        pytest.fail(f"the stack's secured listener is not configured ({', '.join(missing)}): run stack/stack.sh up")
    source = urlsplit(os.environ["SOURCE_DATABASE_URL"])
    url = (
        # auditor_tls may connect over TLS only (stack.sh): the source is really read over TLS.
        f"postgresql://auditor_tls:${{APP_DB_PASSWORD}}@127.0.0.1:{source.port}{source.path}"
        "?sslmode=verify-full&sslrootcert=${KAFKA_CA_LOCATION}"
    )
    return Secured(
        os.environ["KAFKA_SECURE_BOOTSTRAP_SERVERS"],
        os.environ["KAFKA_SASL_USERNAME"],
        os.environ["KAFKA_SASL_PASSWORD"],
        os.environ["KAFKA_CA_LOCATION"],
        url,
    )


@pytest.fixture(scope="session")
def untrusted_ca(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A CA certificate that signed nothing of the stack's: trusting only it must fail."""
    folder = tmp_path_factory.mktemp("untrusted-ca")
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"),
            *("-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=not the stack's CA", "-days", "2"),
        ],
        cwd=folder,
        check=True,
        capture_output=True,
    )
    return str(folder / "ca.pem")
