"""The start-up rules agree with the installed clients: they refuse exactly those configs.

No broker is needed: librdkafka validates its configuration when the client is created, and
so does the Java KafkaConsumer in its constructor (the stack's kafka-clients jar).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, libversion

from auditor.lint.engine.linter import lint
from auditor.lint.engine.terms import LintContext

ROOT = Path(__file__).resolve().parents[2]
KAFKA_LIBS = ROOT / ".cache" / "kafka" / "libs"  # stack/bootstrap.sh puts the broker's jars there
CONSUMER_STARTS = ROOT / "stack" / "kafka" / "ConsumerStarts.java"

REFUSING_PRODUCER_RULES = {"P101", "P102", "P103", "P104", "P105", "P106", "P108"}
QUIET = {"bootstrap.servers": "127.0.0.1:1", "log_level": 0}

PRODUCER_CONFIGS: list[dict[str, Any]] = [
    {},
    {"acks": "1"},
    {"enable.idempotence": True, "acks": "1"},
    {"enable.idempotence": True, "request.required.acks": 0},
    {"transactional.id": "orders-tx-0", "acks": 1},
    {"retries": 0},
    {"enable.idempotence": True, "retries": 0},
    {"enable.idempotence": True, "message.send.max.retries": 0},
    {"enable.idempotence": True},
    {"enable.idempotence": True, "max.in.flight": 6},
    {"enable.idempotence": True, "max.in.flight.requests.per.connection": 5},
    {"transactional.id": "orders-tx-0", "max.in.flight": 6},
    {"transactional.id": "orders-tx-0", "enable.idempotence": False},
    {"transactional.id": "orders-tx-0"},
    {"transactional.id": "orders-tx-0", "message.timeout.ms": 70_000},
    {"transactional.id": "orders-tx-0", "delivery.timeout.ms": 70_000},
    {"transactional.id": "orders-tx-0", "delivery.timeout.ms": 60_000},
    {"transactional.id": "orders-tx-0", "transaction.timeout.ms": 10_000},
    {"transactional.id": "orders-tx-0", "message.timeout.ms": 0},
    {"linger.ms": 1000, "message.timeout.ms": 1000},
    {"queue.buffering.max.ms": 2000, "message.timeout.ms": 1000},
    {"linger.ms": 999, "message.timeout.ms": 1000},
    {"message.timeout.ms": 4},
    {"message.timeout.ms": 0, "linger.ms": 100},
    {"transactional.id": "orders-tx-0", "socket.timeout.ms": 70_000},
    {"transactional.id": "orders-tx-0", "socket.timeout.ms": 60_100},
    {"socket.timeout.ms": 70_000},
]


def test_it_was_checked_against_this_librdkafka_major_version() -> None:
    # defaults.py's librdkafka table was verified against 2.16.0; 1.x had other defaults (acks=1)
    version, _ = libversion()
    assert version.split(".")[0] == "2"


def _producer_refused(config: dict[str, Any]) -> bool:
    try:
        Producer({**QUIET, **config})
    except KafkaException:
        return True
    return False


@pytest.mark.parametrize("config", PRODUCER_CONFIGS, ids=lambda c: repr(sorted(c.items())))
def test_it_predicts_which_producer_configs_librdkafka_refuses(config: dict[str, Any]) -> None:
    predicted = {
        r.rule
        for guarantee in ("at-most-once", "at-least-once", "exactly-once")
        for r in lint(config, client="librdkafka", kind="producer", guarantee=guarantee)
        if r.message.startswith("the client refuses to start:")
    }
    assert bool(predicted & REFUSING_PRODUCER_RULES) == _producer_refused(config)


def test_it_predicts_that_every_produce_fails_when_linger_reaches_the_default_timeout() -> None:
    config = {"linger.ms": 300_000}
    (p106,) = [
        r for r in lint(config, client="librdkafka", kind="producer", guarantee="at-least-once") if r.rule == "P106"
    ]
    assert p106.message.startswith("the client refuses to start producing: every produce() fails")
    producer = Producer({**QUIET, **config})
    with pytest.raises(KafkaException, match="Invalid argument or configuration"):
        producer.produce("lint-never-created", b"x")


@pytest.mark.parametrize(
    ("config", "refused"),
    [
        ({"max.poll.interval.ms": 10_000}, True),
        ({"max.poll.interval.ms": 60_000, "session.timeout.ms": 70_000}, True),
        ({"max.poll.interval.ms": 45_000}, False),
        ({}, False),
        # KIP-848: the session timeout is the broker's, so only setting it is refused
        ({"group.protocol": "consumer", "max.poll.interval.ms": 30_000}, False),
        ({"group.protocol": "consumer", "session.timeout.ms": 45_000}, True),
        ({"group.protocol": "consumer", "heartbeat.interval.ms": 3_000}, True),
        ({"group.protocol": "consumer", "partition.assignment.strategy": "range"}, True),
        ({"group.protocol": "classic", "session.timeout.ms": 45_000}, False),
    ],
)
def test_it_predicts_which_consumer_configs_librdkafka_refuses(config: dict[str, Any], refused: bool) -> None:
    results = lint(config, client="librdkafka", kind="consumer", guarantee="at-least-once")
    assert bool({"C101", "C102"} & {r.rule for r in results}) == refused
    try:
        Consumer({**QUIET, "group.id": "lint-test", **config}).close()
    except KafkaException:
        actually_refused = True
    else:
        actually_refused = False
    assert actually_refused == refused


JAVA_CONSUMER_CONFIGS: list[dict[str, str]] = [
    {},
    {"group.protocol": "consumer"},
    {"group.protocol": "consumer", "max.poll.interval.ms": "10000"},
    {"group.protocol": "consumer", "group.remote.assignor": "uniform"},
    {"group.protocol": "consumer", "session.timeout.ms": "45000"},
    {"group.protocol": "CONSUMER", "heartbeat.interval.ms": "3000"},
    {"group.protocol": "consumer", "partition.assignment.strategy": "org.apache.kafka.clients.consumer.RangeAssignor"},
    {"group.protocol": "classic", "session.timeout.ms": "45000", "heartbeat.interval.ms": "3000"},
    # the assignor is the consumer protocol's: refused under classic from 3.9.0, a blank value excepted
    {"group.remote.assignor": "uniform"},
    {"group.protocol": "classic", "group.remote.assignor": "range"},
    {"group.protocol": "CLASSIC", "group.remote.assignor": " "},
]


def _missing(what: str) -> None:
    """Skip for want of ``what``, except under CI (CI=true), whose make test installs it: fail."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(what)
    pytest.skip(what)


def _installed_java_client() -> str:
    """The version of the stack's kafka-clients jar; skipped without it or java, unless CI=true."""
    jars = sorted(KAFKA_LIBS.glob("kafka-clients-*.jar"))
    missing = "java is not installed" if shutil.which("java") is None else ""
    if not jars:
        missing = f"no kafka-clients jar in {KAFKA_LIBS} (run stack/bootstrap.sh)"
    if missing:
        _missing(missing)
    match = re.fullmatch(r"kafka-clients-(\d+\.\d+\.\d+)\.jar", jars[-1].name)
    assert match, jars[-1].name
    return match.group(1)


def _java_consumer_answers(classpath: str) -> list[tuple[dict[str, str], str]]:
    """Each of JAVA_CONSUMER_CONFIGS with what a real KafkaConsumer on ``classpath`` said:
    "created" or "refused: <message>"."""
    configs = [{"group.id": "lint-test", **config} for config in JAVA_CONSUMER_CONFIGS]
    arguments = [";".join(f"{key}={value}" for key, value in config.items()) for config in configs]
    run = subprocess.run(
        ["java", "-cp", classpath, str(CONSUMER_STARTS), *arguments],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    answers = [
        line.removeprefix("consumer-starts: ")
        for line in run.stdout.splitlines()
        if line.startswith("consumer-starts: ")
    ]
    assert len(answers) == len(configs)
    return list(zip(configs, answers, strict=True))


def _assert_predicted(version: str, answers: list[tuple[dict[str, str], str]]) -> None:
    context = LintContext(client_version=version)
    for config, answer in answers:
        results = lint(config, client="java", kind="consumer", guarantee="at-least-once", context=context)
        predicted = any(r.message.startswith("the client refuses to start:") for r in results)
        assert predicted == answer.startswith("refused"), (version, config, answer)


def test_it_predicts_which_consumer_configs_the_java_client_refuses() -> None:
    version = _installed_java_client()
    answers = _java_consumer_answers(f"{KAFKA_LIBS}/*")
    _assert_predicted(version, answers)
    refused = {tuple(sorted(config.items())): answer for config, answer in answers}
    assignor = {"group.id": "lint-test", "group.remote.assignor": "uniform"}
    assert refused[tuple(sorted(assignor.items()))] == (
        "refused: group.remote.assignor cannot be set when group.protocol=CLASSIC"
    )


# Older kafka-clients jars: the refusals changed at 3.9.0 (group.remote.assignor under classic)
# and 4.0.0 (classic-only keys under consumer). make test fetches them
# (stack/bootstrap.sh --with-old-clients, from stack/maven/kafka-clients/pom.xml: the same versions).
OLDER_KAFKA_CLIENTS = ROOT / ".cache" / "kafka-clients"
OLDER_JAVA_CLIENTS = ("3.7.2", "3.8.1", "3.9.0", "3.9.2", "4.0.0")


def test_make_test_fetches_every_older_java_client_the_test_uses() -> None:
    pom = ElementTree.parse(ROOT / "stack" / "maven" / "kafka-clients" / "pom.xml")
    maven = {"m": "http://maven.apache.org/POM/4.0.0"}
    fetched = [
        [item.findtext(f"m:{field}", namespaces=maven) for field in ("groupId", "artifactId", "version")]
        for item in pom.getroot().iterfind(".//m:artifactItem", maven)
    ]
    assert fetched == [["org.apache.kafka", "kafka-clients", version] for version in OLDER_JAVA_CLIENTS]


@pytest.mark.parametrize("version", OLDER_JAVA_CLIENTS)
def test_it_predicts_which_consumer_configs_older_java_clients_refuse(version: str) -> None:
    _installed_java_client()  # java and the stack's libraries (the client's own dependencies)
    jar = OLDER_KAFKA_CLIENTS / f"kafka-clients-{version}.jar"
    if not jar.exists():
        _missing(f"no {jar} (run stack/bootstrap.sh --with-old-clients)")
    dependencies = [path for path in sorted(KAFKA_LIBS.glob("*.jar")) if not path.name.startswith("kafka")]
    _assert_predicted(version, _java_consumer_answers(":".join(map(str, [jar, *dependencies]))))
