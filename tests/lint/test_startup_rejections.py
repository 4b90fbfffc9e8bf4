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
PRODUCER_STARTS = ROOT / "stack" / "kafka" / "ProducerStarts.java"

REFUSING_PRODUCER_RULES = {"P101", "P102", "P103", "P104", "P105", "P106", "P108", "P109"}
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
    # values as written (P109): librdkafka reads a bool as true, t, false, f (any case), 1 or 0
    {"enable.idempotence": "yes"},
    {"enable.idempotence": "on"},
    {"enable.idempotence": "TRUE"},
    {"enable.idempotence": "1"},
    {"enable.idempotence": "true "},
    {"acks": "ALL"},
    {"acks": " all"},
    {"acks": "1000"},
    {"acks": "1001"},
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
        # values as written (C105)
        ({"enable.auto.commit": "yes"}, True),
        ({"enable.auto.commit": "off"}, True),
        ({"enable.auto.commit": "F"}, False),
        ({"enable.auto.offset.store": "0"}, False),
        ({"isolation.level": "READ_COMMITTED"}, False),
        ({"isolation.level": "read-committed"}, True),
        ({"isolation.level": "read_committed "}, True),
        ({"auto.offset.reset": "LATEST"}, False),
        ({"auto.offset.reset": "smallest"}, False),
        ({"auto.offset.reset": " error"}, False),
        ({"auto.offset.reset": "none"}, True),
        ({"auto.offset.reset": "by_duration:PT1H"}, True),
    ],
)
def test_it_predicts_which_consumer_configs_librdkafka_refuses(config: dict[str, Any], refused: bool) -> None:
    results = lint(config, client="librdkafka", kind="consumer", guarantee="at-least-once")
    assert bool({"C101", "C102", "C105"} & {r.rule for r in results}) == refused
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
    # values as written (C105): ConfigDef trims, then reads a boolean as true or false in any case
    # and checks a string against its list as written (by_duration from 4.0, KIP-1106)
    {"enable.auto.commit": "yes"},
    {"enable.auto.commit": "1"},
    {"enable.auto.commit": " TRUE "},
    {"isolation.level": "READ_COMMITTED"},
    {"isolation.level": "read-committed"},
    {"isolation.level": " read_committed"},
    {"auto.offset.reset": "smallest"},
    {"auto.offset.reset": "LATEST"},
    {"auto.offset.reset": "earliest "},
    {"auto.offset.reset": "by_duration:PT1H"},
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
    return _java_answers(CONSUMER_STARTS, "consumer-starts: ", configs, classpath)


def _java_answers(
    program: Path, prefix: str, configs: list[dict[str, str]], classpath: str
) -> list[tuple[dict[str, str], str]]:
    arguments = [";".join(f"{key}={value}" for key, value in config.items()) for config in configs]
    run = subprocess.run(
        ["java", "-cp", classpath, str(program), *arguments],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    answers = [line.removeprefix(prefix) for line in run.stdout.splitlines() if line.startswith(prefix)]
    assert len(answers) == len(configs)
    return list(zip(configs, answers, strict=True))


def _assert_predicted(version: str, answers: list[tuple[dict[str, str], str]], kind: str = "consumer") -> None:
    context = LintContext(client_version=version)
    for config, answer in answers:
        results = lint(config, client="java", kind=kind, guarantee="at-least-once", context=context)
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


# Producer values as written (P109): ConfigDef trims, reads a boolean as true or false in any case,
# and checks acks against all, -1, 0, 1 as written
JAVA_PRODUCER_CONFIGS: list[dict[str, str]] = [
    {},
    {"acks": "ALL"},
    {"acks": "All"},
    {"acks": " all "},
    {"acks": "2"},
    {"acks": "-1"},
    {"enable.idempotence": "yes"},
    {"enable.idempotence": "1"},
    {"enable.idempotence": "TRUE", "acks": "all"},
    {"enable.idempotence": "off", "acks": "1"},
]


@pytest.mark.parametrize("version", ("installed", *OLDER_JAVA_CLIENTS))
def test_it_predicts_which_producer_values_java_clients_refuse(version: str) -> None:
    installed = _installed_java_client()
    if version == "installed":
        version, classpath = installed, f"{KAFKA_LIBS}/*"
    else:
        jar = OLDER_KAFKA_CLIENTS / f"kafka-clients-{version}.jar"
        if not jar.exists():
            _missing(f"no {jar} (run stack/bootstrap.sh --with-old-clients)")
        dependencies = [path for path in sorted(KAFKA_LIBS.glob("*.jar")) if not path.name.startswith("kafka")]
        classpath = ":".join(map(str, [jar, *dependencies]))
    answers = _java_answers(PRODUCER_STARTS, "producer-starts: ", JAVA_PRODUCER_CONFIGS, classpath)
    _assert_predicted(version, answers, kind="producer")
    refused = {tuple(sorted(config.items())): answer for config, answer in answers}
    assert refused[(("acks", "ALL"),)] == (
        "refused: Invalid value ALL for configuration acks: String must be one of: all, -1, 0, 1"
    )
