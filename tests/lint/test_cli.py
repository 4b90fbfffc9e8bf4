"""`audit lint --config FILE`: every input format, exit codes, --json, malformed input, secrets."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

ROOT = Path(__file__).resolve().parents[2]
SECRET = "hunter2-Sup3rS3cret"
WriteFile = Callable[[str, str], str]

LIBRDKAFKA_JSON = (
    "{\n"
    '  "bootstrap.servers": "broker:9092",\n'
    '  "acks": "1",\n'
    '  "sasl.username": "orders",\n'
    f'  "sasl.password": "{SECRET}"\n'
    "}\n"
)
JAVA_PROPERTIES = (
    "group.id=orders\n"
    "enable.auto.commit=true\n"
    "isolation.level=read_uncommitted\n"
    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
    f'username="orders" password="{SECRET}";\n'
)
SPRING_YAML = f"""spring:
  kafka:
    properties:
      sasl.jaas.config: 'PlainLoginModule required password="{SECRET}";'
    producer:
      acks: 1
      retries: 0
    consumer:
      enable-auto-commit: true
      auto-offset-reset: latest
"""
AT_MOST_ONCE_PRODUCER = '{"acks": "0", "retries": 0, "linger.ms": 5}\n'


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`audit lint ARGS` through the management command: (exit code, stdout, stderr)."""
    out = io.StringIO()
    try:
        call_command("audit", "lint", *args, stdout=out)
        code = 0
    except CommandError as exc:
        code = exc.returncode
    captured = capsys.readouterr()
    return code, out.getvalue(), captured.err


@pytest.fixture
def config_file(tmp_path: Path) -> WriteFile:
    def write(name: str, text: str) -> str:
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    return write


def rule_ids(stdout: str) -> list[str]:
    return [result["rule"] for result in json.loads(stdout)["results"]]


def test_it_lints_a_librdkafka_json_file_and_fails_on_an_error(
    capsys: pytest.CaptureFixture[str], config_file: WriteFile
) -> None:
    path = config_file("producer.json", LIBRDKAFKA_JSON)
    code, out, err = run_cli(capsys, "--config", path, "--kind", "producer", "--guarantee", "at-least-once", "--json")
    assert code == 1
    assert rule_ids(out) == ["P001", "P006", "P007"]
    first = json.loads(out)["results"][0]
    assert {"rule", "severity", "target", "config", "value", "expected", "message"} <= set(first)
    assert (first["rule"], first["severity"], first["target"], first["config"], first["value"], first["expected"]) == (
        "P001",
        "error",
        "producer",
        "acks",
        "1",
        "all",
    )
    assert first["explains"] == [["gap", "broker-lost"], ["missing", None], ["gap", "send-unconfirmed"]]
    assert SECRET not in out + err


def test_it_lints_java_properties_against_each_guarantee(
    capsys: pytest.CaptureFixture[str], config_file: WriteFile
) -> None:
    path = config_file("consumer.properties", JAVA_PROPERTIES)
    code, out, _ = run_cli(
        capsys, "--config", path, "--client", "java", "--kind", "consumer", "--guarantee", "exactly-once", "--json"
    )
    assert (code, rule_ids(out)) == (1, ["C002", "C003", "C006"])
    # at-least-once: the Java client's auto-commit and the reset policy are only warnings
    code, out, _ = run_cli(capsys, "--config", path, "--client", "java", "--kind", "consumer", "--json")
    assert (code, rule_ids(out)) == (0, ["C001", "C003"])
    assert SECRET not in out


def test_it_lints_every_section_of_a_spring_yaml_file(
    capsys: pytest.CaptureFixture[str], config_file: WriteFile
) -> None:
    path = config_file("application.yml", SPRING_YAML)
    code, out, err = run_cli(capsys, "--config", path, "--json")
    results = json.loads(out)["results"]
    assert code == 1
    assert [(r["rule"], r["target"]) for r in results] == [
        ("P001", "producer"),
        ("P002", "producer"),
        ("C001", "consumer"),
        ("C003", "consumer"),
    ]
    assert SECRET not in out + err
    # --kind picks one section
    code, out, _ = run_cli(capsys, "--config", path, "--kind", "consumer", "--json")
    assert (code, rule_ids(out)) == (0, ["C001", "C003"])


def test_it_passes_a_clean_at_most_once_config(capsys: pytest.CaptureFixture[str], config_file: WriteFile) -> None:
    path = config_file("fire-and-forget.json", AT_MOST_ONCE_PRODUCER)
    code, out, _ = run_cli(capsys, "--config", path, "--kind", "producer", "--guarantee", "at-most-once")
    assert code == 0
    assert "no findings" in out
    code, out, _ = run_cli(capsys, "--config", path, "--kind", "producer", "--guarantee", "at-most-once", "--json")
    assert (code, json.loads(out)) == (0, {"java_version": None, "results": []})


def test_it_prints_a_readable_table(capsys: pytest.CaptureFixture[str], config_file: WriteFile) -> None:
    path = config_file("producer.json", LIBRDKAFKA_JSON)
    code, out, _ = run_cli(capsys, "--config", path, "--kind", "producer")
    lines = out.splitlines()
    assert code == 1
    assert lines[0] == f"{path}: json, librdkafka client, guarantee at-least-once"
    assert lines[1].split() == ["SEVERITY", "RULE", "TARGET", "SETTING", "VALUE", "EXPECTED"]
    assert lines[2].split() == ["error", "P001", "producer", "acks", "1", "all"]
    assert lines[3].startswith("    with acks=1 the leader acks before any follower has the record")
    assert lines[-1] == "1 error(s), 2 warning(s), 0 info(s)"
    assert SECRET not in out


def test_it_takes_the_format_from_the_option_over_the_file_name(
    capsys: pytest.CaptureFixture[str], config_file: WriteFile
) -> None:
    path = config_file("producer.txt", LIBRDKAFKA_JSON)  # .txt would be read as .properties
    code, out, _ = run_cli(capsys, "--config", path, "--kind", "producer", "--format", "json", "--json")
    assert (code, rule_ids(out)) == (1, ["P001", "P006", "P007"])


@pytest.mark.parametrize(
    ("name", "text", "args", "message"),
    [
        ("broken.json", '{\n  "acks": "all",\n  "retries": \n}\n', ["--kind", "producer"], "line 4: invalid JSON"),
        (
            "broken.properties",
            f"acks=all\nsasl.password {SECRET}\n",
            ["--kind", "producer"],
            "line 2: expected 'key=value'",
        ),
        ("broken.yml", "spring:\n  kafka: [unclosed\n", [], "invalid YAML"),
        ("no-kind.json", '{"acks": "all"}', [], "expected --kind"),
    ],
)
def test_it_rejects_malformed_input_naming_the_file(
    capsys: pytest.CaptureFixture[str], config_file: WriteFile, name: str, text: str, args: list[str], message: str
) -> None:
    path = config_file(name, text)
    code, out, err = run_cli(capsys, "--config", path, *args)
    assert code == 2
    assert out == ""
    assert err.startswith(f"error: {path}: ")
    assert message in err
    assert SECRET not in err


def test_it_rejects_a_missing_file_and_options_without_a_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "nope.json"
    code, _, err = run_cli(capsys, "--config", str(missing), "--kind", "producer")
    assert (code, err) == (2, f"error: {missing}: no such file\n")
    code, _, err = run_cli(capsys, "--kind", "producer")
    assert (code, err) == (2, "error: --kind only apply with --config FILE\n")


def test_it_exits_non_zero_from_the_real_command_without_printing_the_secret(config_file: WriteFile) -> None:
    path = config_file("application.yml", SPRING_YAML)
    done = subprocess.run(
        [sys.executable, "manage.py", "audit", "lint", "--config", path, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert rule_ids(done.stdout) == ["P001", "P002", "C001", "C003"]
    assert SECRET not in done.stdout + done.stderr


# KIP-848 consumer with a classic-protocol setting: the Java client refuses it from 4.0 only
KIP848_CONSUMER_PROPERTIES = (
    "group.id=orders\n"
    "enable.auto.commit=false\n"
    "auto.offset.reset=earliest\n"
    "group.protocol=consumer\n"
    "session.timeout.ms=45000\n"
)


def test_it_lints_the_java_client_at_the_version_given(
    capsys: pytest.CaptureFixture[str], config_file: WriteFile
) -> None:
    path = config_file("consumer.properties", KIP848_CONSUMER_PROPERTIES)
    java_consumer = ("--config", path, "--client", "java", "--kind", "consumer")
    # by default the Java client is 4.0, which refuses session.timeout.ms under group.protocol=consumer
    code, out, _ = run_cli(capsys, *java_consumer, "--json")
    assert (code, rule_ids(out), json.loads(out)["java_version"]) == (1, ["C102"], "java 4.0 (default)")
    # 3.7 to 3.9 accept it and ignore it: the consumer starts
    code, out, _ = run_cli(capsys, *java_consumer, "--client-version", "3.9.2", "--json")
    assert (code, json.loads(out)) == (0, {"java_version": "java 3.9.2", "results": []})
    code, out, _ = run_cli(capsys, *java_consumer, "--client-version", "3.9.2")
    assert out.splitlines() == [
        f"{path}: properties, java client, java 3.9.2, guarantee at-least-once",
        "no findings",
    ]
    code, out, _ = run_cli(capsys, *java_consumer, "--client-version", "4.0.0")
    assert out.splitlines()[0] == f"{path}: properties, java client, java 4.0.0, guarantee at-least-once"
    assert out.splitlines()[2].split()[:2] == ["error", "C102"]


def test_it_lints_a_spring_boot_file_at_the_java_version_given_whatever_the_client(
    capsys: pytest.CaptureFixture[str], config_file: WriteFile
) -> None:
    spring = "spring:\n  kafka:\n    consumer:\n      properties:\n        group.remote.assignor: uniform\n"
    path = config_file("application.yml", spring)
    code, out, _ = run_cli(capsys, "--config", path)
    assert out.splitlines()[0] == (
        f"{path}: spring-yaml, Spring Boot's java client, java 4.0 (default), guarantee at-least-once"
    )
    assert "C103" in out and code == 1
    # 3.8 ignores group.remote.assignor under the classic protocol
    code, out, _ = run_cli(capsys, "--config", path, "--client-version", "3.8.1", "--json")
    assert (code, json.loads(out)["java_version"], rule_ids(out)) == (0, "java 3.8.1", ["C003"])


def test_it_lints_a_confluent_platform_client_at_the_kafka_version_it_ships(
    capsys: pytest.CaptureFixture[str], config_file: WriteFile
) -> None:
    path = config_file("consumer.properties", KIP848_CONSUMER_PROPERTIES)
    java_consumer = ("--config", path, "--client", "java", "--kind", "consumer", "--json")
    # CP 7.9 ships Kafka 3.9, which accepts session.timeout.ms under group.protocol=consumer...
    code, out, _ = run_cli(capsys, *java_consumer, "--client-version", "7.9.0-ccs")
    assert (code, json.loads(out)) == (0, {"java_version": "java 3.9.0", "results": []})
    # ... and CP 8.0 (the enterprise build too) ships 4.0, which refuses it
    code, out, _ = run_cli(capsys, *java_consumer, "--client-version", "8.0.0-ce")
    assert (code, rule_ids(out), json.loads(out)["java_version"]) == (1, ["C102"], "java 4.0.0")


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (
            "3.9.x",
            "error: client version: expected the Java client's Apache Kafka version such as 3.9.2 or 4.0, got '3.9.x'",
        ),
        ("latest", "got 'latest'"),
        ("7.6.0", "a Confluent Platform version? give it as its jar names it, 7.6.0-ccs"),
        ("6.2.1-ccs", "'6.2.1-ccs' is a Confluent Platform version whose Apache Kafka version is not known"),
    ],
)
def test_it_rejects_a_client_version_it_cannot_read(
    capsys: pytest.CaptureFixture[str], config_file: WriteFile, version: str, message: str
) -> None:
    path = config_file("consumer.properties", KIP848_CONSUMER_PROPERTIES)
    code, out, err = run_cli(
        capsys, "--config", path, "--client", "java", "--kind", "consumer", "--client-version", version
    )
    assert (code, out) == (2, "")
    assert message in err


def test_it_rejects_a_client_version_for_a_config_linted_as_librdkafkas(
    capsys: pytest.CaptureFixture[str], config_file: WriteFile
) -> None:
    path = config_file("producer.json", LIBRDKAFKA_JSON)
    code, out, err = run_cli(capsys, "--config", path, "--kind", "producer", "--client-version", "3.9.2")
    assert (code, out) == (2, "")
    assert err == (
        "error: client version: 3.9.2 is a Java client's version, and this json config is linted as "
        "librdkafka's: choose the java client, or leave the version out\n"
    )
    code, _, err = run_cli(capsys, "--client-version", "3.9.2")
    assert (code, err) == (2, "error: --client-version only apply with --config FILE\n")


def test_it_lints_a_spring_profiles_documents_only_with_that_profile(
    capsys: pytest.CaptureFixture[str], config_file: WriteFile
) -> None:
    path = config_file(
        "application.yml",
        "spring.kafka.producer.acks: all\n---\nspring.config.activate.on-profile: local\nspring.kafka.producer.acks: 0\n",
    )
    code, out, _ = run_cli(capsys, "--config", path)
    assert code == 0
    assert out.splitlines()[1] == (
        f"note: {path}: document 2 (line 3) not linted: it applies only with profile 'local' (active: none, so default)"
    )
    code, out, _ = run_cli(capsys, "--config", path, "--profile", "local", "--json")
    assert (code, rule_ids(out)) == (1, ["P001"])
    assert json.loads(out)["notes"] == [
        f"{path}: document 2 (line 3) linted: its profile 'local' is active (active: local, given)"
    ]
