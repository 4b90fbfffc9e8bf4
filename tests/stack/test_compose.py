"""docker-compose.yml stays in step with the native stack."""

from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"
# An empty env file, so a checkout's .env (with real secrets) never feeds the check.
EMPTY_ENV = Path(__file__).resolve().parent / "empty.env"


def _native_kafka_version() -> str:
    pom = ET.parse(COMPOSE.parent / "stack" / "maven" / "kafka" / "pom.xml")
    (version,) = [el.text for el in pom.iter() if el.tag.endswith("kafka.version")]
    assert version
    return version


def test_it_describes_the_same_stack():
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    assert {
        "kafka-1",
        "kafka-2",
        "kafka-3",
        "postgres",
        "redis",
        "spark-master",
        "spark-worker",
        "web",
        "worker",
        "beat",
    } <= set(services)
    for name in ("kafka-1", "kafka-2", "kafka-3"):
        env = services[name]["environment"]
        assert services[name]["image"] == f"apache/kafka:{_native_kafka_version()}"
        # the image's default log.dirs is /tmp inside the container: the volume must hold the data
        assert env["KAFKA_LOG_DIRS"] == "/var/lib/kafka/data"
        assert services[name]["volumes"] == [f"{name}:/var/lib/kafka/data"]
        assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == 2 and env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == 3
    assert {str(services[n]["environment"]["KAFKA_NODE_ID"]) for n in ("kafka-1", "kafka-2", "kafka-3")} == {
        "1",
        "2",
        "3",
    }
    assert "celery_beat" not in services["beat"]["command"]  # beat uses the database scheduler from settings
    assert services["worker"]["environment"]["KAFKA_BOOTSTRAP_SERVERS"].count("kafka-") == 3


def test_its_reconciler_takes_the_queue_resident_runs_are_sent_to():
    from django.test import override_settings

    from auditor.reconcile import conf

    reconciler = yaml.safe_load(COMPOSE.read_text())["services"]["reconciler"]
    command = reconciler["command"]
    # one run at a time, in the worker's main thread: the resident driver is not shared
    assert "--pool=solo" in command and "--concurrency=1" in command
    with override_settings(CELERY_TASK_DEFAULT_QUEUE="celery", RECONCILE_RUNNER="resident"):
        route = conf.route_task("auditor.reconcile.tasks.execute_run_task", (), {}, {})
    assert route == {"queue": command[command.index("-Q") + 1]}
    native = (COMPOSE.parent / "stack" / "run.sh").read_text()
    assert (
        "--pool=solo --concurrency=1 --without-gossip --without-mingle -n reconciler@%h -Q $RECONCILE_QUEUE" in native
    )
    assert 'RECONCILE_QUEUE="${AUDITOR_CELERY_QUEUE:-celery}.reconcile"' in native


def _compose_command() -> list[str] | None:
    """`docker compose` (plugin) or Debian's `docker-compose`; neither needs a running engine."""
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


@pytest.mark.skipif(_compose_command() is None, reason="no docker compose client is installed")
def test_it_is_accepted_by_docker_compose_config():
    env = {
        **os.environ,
        "DJANGO_SECRET_KEY": "x",
        "APP_DB_PASSWORD": "x",
        "PG_SUPER_PASSWORD": "x",
        "AUDITOR_ADMIN_PASSWORD": "x",
    }
    proc = subprocess.run(
        [*_compose_command(), "--env-file", str(EMPTY_ENV), "-f", str(COMPOSE), "config", "--quiet"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr


def test_it_refuses_to_start_without_secrets():
    command = _compose_command()
    if command is None:
        pytest.skip("no docker compose client is installed")
    env = {k: v for k, v in os.environ.items() if k not in {"DJANGO_SECRET_KEY", "APP_DB_PASSWORD"}}
    proc = subprocess.run(
        [*command, "--env-file", str(EMPTY_ENV), "-f", str(COMPOSE), "config", "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
    )
    assert proc.returncode != 0
    assert "DJANGO_SECRET_KEY" in proc.stderr or "APP_DB_PASSWORD" in proc.stderr
