"""The webhooks: section of the config file: validation and apply."""

from __future__ import annotations

import pytest
import yaml

from auditor.alerts.config import apply_webhooks, parse_webhooks_section
from auditor.alerts.models import Channel
from auditor.pipelines.models import Binding, Cluster, SourceDatabase
from tests.support.webhooks import SECRET_ENV

pytestmark = pytest.mark.django_db

GOOD = f"""
ops-slack:
  url: https://hooks.example.com/services/T/B/X
  secret: ${{{SECRET_ENV}}}
  format: slack
  bindings: [tickets]
  events:
    finding_kinds: [missing, duplicate]
    stuck_verdicts: all
    lint_severity: error
    canary_loss: 1
    canary_latency: 5s
    reports: true
pager:
  url: ${{AUDITOR_TEST_HOOK_URL}}
  secret: ${{{SECRET_ENV}}}
  enabled: false
"""


def parse(text: str, known: set[str] = frozenset({"tickets"})) -> tuple[dict, list[tuple[str, str]]]:
    problems: list[tuple[str, str]] = []
    parsed = parse_webhooks_section(yaml.safe_load(text), lambda path, msg: problems.append((path, msg)), known)
    return parsed, problems


def test_it_parses_and_applies_a_good_section(monkeypatch):
    monkeypatch.setenv("AUDITOR_TEST_HOOK_URL", "https://pager.example.com/hook")
    cluster = Cluster.objects.create(name="local", bootstrap_servers="127.0.0.1:9092")
    source = SourceDatabase.objects.create(name="db", url="postgresql://x@127.0.0.1/db")
    Binding.objects.create(name="tickets", cluster=cluster, topic="t", source=source, table="t", key_column="id")
    parsed, problems = parse(GOOD)
    assert problems == []
    assert parsed["ops-slack"]["events"]["canary_latency_ms"] == 5000
    assert len(parsed["ops-slack"]["events"]["stuck_verdicts"]) == 9
    assert apply_webhooks(parsed) == [("ops-slack", True), ("pager", True)]
    slack = Channel.objects.get(name="ops-slack")
    assert slack.format == "slack" and [b.name for b in slack.bindings.all()] == ["tickets"]
    assert slack.secret == "${" + SECRET_ENV + "}"  # the reference, never the secret
    assert Channel.objects.get(name="pager").url == "${AUDITOR_TEST_HOOK_URL}"
    assert apply_webhooks(parsed) == [("ops-slack", False), ("pager", False)]


def test_it_reports_every_problem_with_its_path():
    _, problems = parse(
        """
bad name!: {url: https://x.example.com/, secret: "${X}"}
a:
  url: ftp://x.example.com/
  secret: plain-text-secret
  format: teams
  enabled: maybe
  bindings: [nope]
  colour: red
  events: {lint_severity: fatal}
b:
  secret: ${AUDITOR_TEST_NOT_SET_ANYWHERE}
  url: ${AUDITOR_TEST_NOT_SET_EITHER}/hook
"""
    )
    paths = [path for path, _ in problems]
    assert paths == [
        "webhooks.bad name!",
        "webhooks.a.colour",
        "webhooks.a.url",
        "webhooks.a.secret",
        "webhooks.a.format",
        "webhooks.a.enabled",
        "webhooks.a.bindings",
        "webhooks.a.events.lint_severity",
        "webhooks.b.url",
        "webhooks.b.secret",
    ]
    messages = dict(problems)
    assert "must start with http:// or https://" in messages["webhooks.a.url"]
    assert "must be a ${ENV} reference" in messages["webhooks.a.secret"]
    assert "unknown binding 'nope'" in messages["webhooks.a.bindings"]
    assert messages["webhooks.b.secret"] == "environment variable AUDITOR_TEST_NOT_SET_ANYWHERE is not set"
    assert "plain-text-secret" not in str(problems)


def test_it_reports_a_section_that_is_not_a_mapping():
    _, problems = parse("[a, b]")
    assert problems == [("webhooks", "must be a mapping of channel name to settings, got list")]
    assert parse("")[0] == {}
