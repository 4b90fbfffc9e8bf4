"""Which channels hear about which problems: event filters, thresholds, bindings."""

from __future__ import annotations

import pytest

from auditor.alerts.events import EventFilter, parse_event_filter
from auditor.alerts.models import Alert
from auditor.alerts.problems import raise_problem
from auditor.pipelines.models import Binding, Cluster, SourceDatabase

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_bindings(db):
    cluster = Cluster.objects.create(name="local", bootstrap_servers="127.0.0.1:9092")
    source = SourceDatabase.objects.create(name="db", url="postgresql://x@127.0.0.1/db")
    return [
        Binding.objects.create(name=name, cluster=cluster, topic=name, source=source, table="t", key_column="id")
        for name in ("tickets", "orders")
    ]


def channels_alerted(fingerprint: str) -> set[str]:
    return set(Alert.objects.filter(fingerprint=fingerprint).values_list("channel__name", flat=True))


def test_it_routes_by_kind_severity_threshold_and_binding(make_channel, two_bindings):
    tickets, orders = two_bindings
    make_channel("all-bindings")  # missing/duplicate, skipped, lint error, canary loss >= 5
    make_channel("tickets-only", bindings=[tickets])
    make_channel("lint-warnings", events={"lint_severity": "warning", "canary_latency_ms": 1000})
    raise_problem("finding:missing", "f1", orders, "x")
    raise_problem("finding:missing", "f2", tickets, "x")
    raise_problem("finding:orphan", "f3", tickets, "x")
    raise_problem("lint:warning", "l1", None, "x")
    raise_problem("lint:error", "l2", "tickets", "x")
    raise_problem("canary:loss", "c1", None, "x", {"lost": 4})
    raise_problem("canary:loss", "c2", None, "x", {"lost": 5})
    raise_problem("canary:latency", "c3", None, "x", {"latency_ms": 1500})
    assert channels_alerted("f1") == {"all-bindings"}
    assert channels_alerted("f2") == {"all-bindings", "tickets-only"}
    assert channels_alerted("f3") == set()
    assert channels_alerted("l1") == {"lint-warnings"}
    assert channels_alerted("l2") == {"all-bindings", "tickets-only", "lint-warnings"}
    assert channels_alerted("c1") == set()
    assert channels_alerted("c2") == {"all-bindings", "tickets-only"}  # no binding: passes binding filters
    assert channels_alerted("c3") == {"lint-warnings"}


def test_it_ignores_disabled_channels(make_channel):
    make_channel(enabled=False)
    assert raise_problem("finding:missing", "fp", None, "x") == []


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"kind": "finding:lost"}, "problem kind 'finding:lost' is not known"),
        ({"fingerprint": ""}, "fingerprint must be"),
        ({"binding": "nope"}, "binding 'nope' does not exist"),
        ({"details": {"when": object()}}, "not JSON serializable"),
    ],
)
def test_it_rejects_bad_problems_with_a_clear_error(make_channel, kwargs, message):
    args = {"kind": "finding:missing", "fingerprint": "fp", "binding": None, "summary": "x", "details": {}, **kwargs}
    with pytest.raises((ValueError, TypeError), match=message):
        raise_problem(**args)


def test_it_parses_an_events_filter_and_reports_every_problem():
    problems: list[tuple[str, str]] = []
    parsed = parse_event_filter(
        {
            "finding_kinds": "all",
            "stuck_verdicts": ["skipped", "lost"],
            "lint_severity": "fatal",
            "canary_loss": 0,
            "canary_latency": "2s",
            "colour": "red",
        },
        "events",
        lambda path, message: problems.append((path, message)),
    )
    assert parsed.finding_kinds[0] == "missing" and len(parsed.finding_kinds) == 7
    assert parsed.stuck_verdicts == ("skipped",) and parsed.canary_latency_ms == 2000
    assert [path for path, _ in problems] == [
        "events.colour",
        "events.lint_severity",
        "events.stuck_verdicts",
        "events.canary_loss",
    ]
    assert EventFilter().wants("finding:missing", {}) is False
