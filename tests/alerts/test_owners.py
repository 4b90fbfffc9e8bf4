"""The problems of a binding, stuck rule or cluster that is deleted or renamed are resolved:
nothing reports under the old name again (auditor/alerts/owners.py)."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from auditor.alerts.models import Alert, Channel, Delivery
from auditor.alerts.problems import raise_problem
from auditor.canary import alerting as canary_alerting
from auditor.lint import alerting as lint_alerting
from auditor.pipelines.models import Binding, Cluster, StuckRule
from auditor.reconcile.alerting import problem_fingerprint
from auditor.vocabulary import STUCK_VERDICTS
from tests.support.reports import make_binding

pytestmark = pytest.mark.django_db


@pytest.fixture
def channel() -> Channel:
    return Channel.objects.create(
        name="ops",
        url="http://127.0.0.1:9/hook",
        secret="${X}",
        events={
            "finding_kinds": ["missing"],
            "stuck_verdicts": list(STUCK_VERDICTS),
            "lint_severity": "info",
            "canary_loss": 1,
        },
    )


def raise_missing(binding: Binding) -> str:
    fingerprint = problem_fingerprint(binding, "missing", None)
    raise_problem("finding:missing", fingerprint, binding, f"1 missing on {binding.name}", {"count": 1})
    return fingerprint


def raise_waiting(rule: StuckRule) -> str:
    fingerprint = f"stuck:{rule.name}:waiting"
    raise_problem("stuck:waiting", fingerprint, rule.binding, f"1 item of {rule.name} waiting", {"count": 1})
    return fingerprint


def make_rule(binding: Binding, name: str) -> StuckRule:
    return StuckRule.objects.create(
        name=name, binding=binding, status_column="status", stuck_values=["NEW"], age_column="created_at"
    )


def states() -> dict[str, str]:
    return dict(Alert.objects.values_list("fingerprint", "state"))


def resolved_deliveries() -> dict[str, str]:
    """fingerprint → the reason the resolved webhook carries."""
    return {
        d.payload["fingerprint"]: d.payload["details"].get("resolved_because")
        for d in Delivery.objects.filter(event=Delivery.RESOLVED)
    }


def test_it_resolves_the_problems_of_a_deleted_binding_and_of_its_stuck_rules(channel: Channel) -> None:
    tickets, tickets_eu = make_binding("tickets"), make_binding("tickets-eu")
    missing, missing_eu = raise_missing(tickets), raise_missing(tickets_eu)
    waiting = raise_waiting(make_rule(tickets, "tickets-new"))

    tickets.delete()

    assert states() == {missing: Alert.RESOLVED, waiting: Alert.RESOLVED, missing_eu: Alert.OPEN}
    alert = Alert.objects.get(fingerprint=missing)
    assert alert.details == {"count": 1, "resolved_because": "binding tickets was deleted"}
    assert alert.resolved_at is not None
    assert resolved_deliveries() == {
        missing: "binding tickets was deleted",
        waiting: "stuck rule tickets-new was deleted",
    }


def test_it_resolves_the_problems_of_a_renamed_binding_and_opens_them_again_under_its_new_name(
    channel: Channel,
) -> None:
    tickets = make_binding("tickets")
    missing = raise_missing(tickets)
    tickets.grace_seconds = 60
    tickets.save()  # no rename: nothing changes
    assert states() == {missing: Alert.OPEN}

    tickets.name = "tickets-v2"
    tickets.save()

    assert states() == {missing: Alert.RESOLVED}
    assert resolved_deliveries() == {missing: "binding tickets was renamed to tickets-v2"}
    renamed = raise_missing(tickets)
    assert renamed == "finding:tickets-v2:missing"
    assert states() == {missing: Alert.RESOLVED, renamed: Alert.OPEN}


def test_it_resolves_nothing_for_a_rename_that_was_not_stored(channel: Channel) -> None:
    tickets = make_binding("tickets")
    make_binding("orders")
    missing = raise_missing(tickets)

    tickets.name = "orders"  # taken: the database refuses it
    with pytest.raises(IntegrityError), transaction.atomic():
        tickets.save()
    tickets.grace_seconds = 60
    tickets.save(update_fields=["grace_seconds"])  # the name in memory is not saved

    assert Binding.objects.get(pk=tickets.pk).name == "tickets"
    assert states() == {missing: Alert.OPEN}


def test_it_resolves_the_problems_of_a_renamed_or_deleted_stuck_rule(channel: Channel) -> None:
    rule = make_rule(make_binding("tickets"), "tickets-new")
    before = raise_waiting(rule)

    rule.name = "tickets-fresh"
    rule.save()
    assert states() == {before: Alert.RESOLVED}
    after = raise_waiting(rule)

    rule.delete()

    assert states() == {before: Alert.RESOLVED, after: Alert.RESOLVED}
    assert resolved_deliveries() == {
        before: "stuck rule tickets-new was renamed to tickets-fresh",
        after: "stuck rule tickets-fresh was deleted",
    }


def test_it_resolves_the_lint_and_canary_problems_of_a_renamed_or_deleted_cluster(channel: Channel) -> None:
    def lint_problem(cluster: str) -> str:
        fingerprint = lint_alerting.fingerprint("warning", "L101", cluster, "brokers")
        raise_problem("lint:warning", fingerprint, None, f"L101 on {cluster}", {"cluster": cluster, "rule": "L101"})
        return fingerprint

    def canary_problem(cluster: str) -> str:
        fingerprint = canary_alerting.fingerprint("loss", "canary", 0, cluster)
        raise_problem("canary:loss", fingerprint, None, f"lost on {cluster}", {"cluster": cluster, "lost": 3})
        return fingerprint

    for name in ("east", "west", "north"):
        Cluster.objects.create(name=name, bootstrap_servers="127.0.0.1:9")
    east = {lint_problem("east"), canary_problem("east")}
    west = {lint_problem("west"), canary_problem("west")}
    north = {lint_problem("north"), canary_problem("north")}

    Cluster.objects.filter(name="east").get().delete()
    west_cluster = Cluster.objects.get(name="west")
    west_cluster.name = "west-2"
    west_cluster.save()

    assert states() == dict.fromkeys(east | west, Alert.RESOLVED) | dict.fromkeys(north, Alert.OPEN)
    reasons = resolved_deliveries()
    assert {reasons[f] for f in east} == {"cluster east was deleted"}
    assert {reasons[f] for f in west} == {"cluster west was renamed to west-2"}
