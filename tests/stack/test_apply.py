"""`audit apply`: creates and updates by name; bad files change nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from auditor.pipelines.models import Binding, Cluster, SourceDatabase, StuckRule
from tests.support.apply_config import GOOD, write

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("secrets_env")]


def apply(path: Path) -> str:
    from io import StringIO

    out = StringIO()
    call_command("audit", "apply", str(path), "--json", stdout=out)
    return out.getvalue()


def test_it_creates_then_updates_by_name(tmp_path):
    path = write(tmp_path, GOOD)
    assert json.loads(apply(path))["created"] == [
        "cluster local",
        "source tickets_db",
        "binding tickets",
        "stuck rule tickets-new",
    ]
    binding = Binding.objects.get(name="tickets")
    assert (binding.grace_seconds, binding.schedule_seconds, binding.record_key) == (120, 300, "json:$.ticket_id")
    assert StuckRule.objects.get(name="tickets-new").older_than_seconds == 600

    path.write_text(GOOD.replace("grace: 2m", "grace: 30s"))
    result = json.loads(apply(path))
    assert result["created"] == []
    assert "binding tickets" in result["updated"]
    assert Binding.objects.get(name="tickets").grace_seconds == 30
    assert Binding.objects.count() == 1
    assert Binding.objects.get(name="tickets").timestamp_zone == ""  # the default: the database's own

    path.write_text(GOOD.replace("    schedule: 5m\n", "    schedule: 5m\n    timestamp_zone: Europe/Paris\n", 1))
    apply(path)
    assert Binding.objects.get(name="tickets").timestamp_zone == "Europe/Paris"


def test_a_bindings_own_ledger_topics_come_before_the_deployments(tmp_path, settings, admin_client):
    from auditor.pipelines.ledgers import ledger_topics

    settings.AUDITOR_PRODUCER_LEDGER_TOPIC = "deployment.producer-ledger"
    settings.AUDITOR_CONSUMER_LEDGER_TOPIC = "deployment.consumer-ledger"
    path = write(tmp_path, GOOD)
    apply(path)
    assert ledger_topics(Binding.objects.get(name="tickets")) == (
        "deployment.producer-ledger",
        "deployment.consumer-ledger",
    )
    own = (
        "    schedule: 5m\n    producer_ledger_topic: tickets.produced\n    consumer_ledger_topic: tickets.processed\n"
    )
    path.write_text(GOOD.replace("    schedule: 5m\n", own, 1))
    assert "binding tickets" in json.loads(apply(path))["updated"]
    binding = Binding.objects.get(name="tickets")
    assert (binding.producer_ledger_topic, binding.consumer_ledger_topic) == ("tickets.produced", "tickets.processed")
    assert ledger_topics(binding) == ("tickets.produced", "tickets.processed")
    page = admin_client.get("/pipelines/").content.decode()
    assert "<code>tickets.produced</code>, <code>tickets.processed</code>" in page
    # only one named: the other is still the deployment's
    path.write_text(
        GOOD.replace("    schedule: 5m\n", "    schedule: 5m\n    consumer_ledger_topic: tickets.processed\n", 1)
    )
    apply(path)
    assert ledger_topics(Binding.objects.get(name="tickets")) == ("deployment.producer-ledger", "tickets.processed")


def test_it_keeps_secrets_as_env_references(tmp_path):
    apply(write(tmp_path, GOOD))
    source = SourceDatabase.objects.get(name="tickets_db")
    cluster = Cluster.objects.get(name="local")
    assert "db-s3cret" not in source.url and "${TEST_APP_DB_PASSWORD}" in source.url
    assert source.resolved_url().startswith("postgresql://app:db-s3cret@")
    assert cluster.config == {"sasl.password": "${TEST_KAFKA_SECRET}"}
    assert cluster.client_config()["sasl.password"] == "kafka-s3cret"


def test_its_clients_take_the_settings_of_how_to_reach_the_cluster_and_nothing_else(tmp_path):
    apply(write(tmp_path, GOOD))
    cluster = Cluster.objects.get(name="local")
    cluster.config |= {
        "enable.ssl.certificate.verification": "false",
        "broker.address.family": "v4",
        # an application's settings pasted in: not the auditor's clients' to take
        "acks": "1",
        "group.id": "${NOT_SET_ANYWHERE}",
        "transactional.id": "app-tx",
    }
    cluster.save()

    assert cluster.client_config() == {
        "bootstrap.servers": "127.0.0.1:9092",
        "sasl.password": "kafka-s3cret",
        "enable.ssl.certificate.verification": "false",
        "broker.address.family": "v4",
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GOOD.replace("    topic: tickets\n", ""), ":10: bindings.tickets: missing required field 'topic'"),
        (
            GOOD.replace("cluster: local", "cluster: nowhere"),
            ":11: bindings.tickets.cluster: unknown cluster 'nowhere'",
        ),
        (
            GOOD.replace("binding: tickets", "binding: nope"),
            ":24: stuck_rules.tickets-new.binding: unknown binding 'nope'",
        ),
        (GOOD.replace("grace: 2m", "grace: soon"), ":18: bindings.tickets.grace: 'soon' is not a duration"),
        (GOOD.replace("key_column: id", "key_column: id; drop table x"), ":15: bindings.tickets.key_column:"),
        (GOOD.replace("guarantee: at-least-once", "guarantee: maybe-once"), ":19: bindings.tickets.guarantee:"),
        (
            GOOD.replace("${TEST_APP_DB_PASSWORD}", "${TEST_UNSET_VARIABLE}"),
            ":8: sources.tickets_db.url: environment variable TEST_UNSET_VARIABLE is not set",
        ),
        (GOOD.replace("  local:\n", "  local:\n   bad: [\n", 1), ":5: (syntax): not valid YAML"),
        ("- just\n- a list\n", ":1: (top level): must be a mapping"),
        (GOOD + "webhoks: {}\n", ":29: webhoks: unknown field"),
        (
            GOOD.replace("    schedule: 5m\n", "    schedule: 5m\n    consumer_ledger_topic: no/slashes\n", 1),
            ":22: bindings.tickets.consumer_ledger_topic: 'no/slashes' is not a valid Kafka topic name",
        ),
        (
            GOOD.replace("    schedule: 5m\n", "    schedule: 5m\n    timestamp_zone: Mars/Olympus\n", 1),
            ":22: bindings.tickets.timestamp_zone: timestamp_zone 'Mars/Olympus' is not a known time zone",
        ),
    ],
)
def test_it_rejects_bad_files_naming_line_and_field(tmp_path, capsys, text, expected):
    apply(write(tmp_path, GOOD.replace("tickets", "existing")))  # something already stored
    before = (list(Binding.objects.values()), list(Cluster.objects.values()), list(StuckRule.objects.values()))
    path = write(tmp_path, text)
    with pytest.raises(CommandError) as info:
        apply(path)
    assert info.value.returncode == 2
    assert f"error: {path}{expected}" in capsys.readouterr().err
    after = (list(Binding.objects.values()), list(Cluster.objects.values()), list(StuckRule.objects.values()))
    assert after == before
    assert Binding.objects.filter(name="tickets").count() == 0


def test_it_prints_file_line_and_field_and_exits_non_zero(tmp_path, live_env):
    path = write(tmp_path, GOOD.replace("    key_column: id\n", ""))
    proc = subprocess.run(
        [sys.executable, "manage.py", "audit", "apply", str(path)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        env=live_env,
    )
    assert proc.returncode == 2
    assert f"error: {path}:10: bindings.tickets: missing required field 'key_column'" in proc.stderr
    assert "nothing in the database changed" in proc.stderr


def test_it_loads_webhooks_with_secret_references(tmp_path, monkeypatch):
    from auditor.alerts.models import Channel

    monkeypatch.setenv("TEST_HOOK_SECRET", "hook-s3cret")
    text = GOOD + textwrap.dedent("""\
        webhooks:
          ops:
            url: https://hooks.example.com/auditor
            secret: ${TEST_HOOK_SECRET}
            format: slack
            bindings: [tickets]
            events:
              finding_kinds: [missing]
        """)
    assert "webhook ops" in json.loads(apply(write(tmp_path, text)))["created"]
    channel = Channel.objects.get(name="ops")
    assert "hook-s3cret" not in str(Channel.objects.filter(name="ops").values().get())
    assert channel.format == "slack"


def test_it_rejects_a_webhook_to_an_unknown_binding(tmp_path, capsys):
    text = GOOD + textwrap.dedent("""\
        webhooks:
          ops:
            url: https://hooks.example.com/auditor
            secret: ${TEST_KAFKA_SECRET}
            bindings: [nope]
        """)
    path = write(tmp_path, text)
    with pytest.raises(CommandError):
        apply(path)
    assert "webhooks.ops.bindings" in capsys.readouterr().err
    assert not Binding.objects.exists()
