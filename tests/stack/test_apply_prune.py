"""`audit apply --prune`: removes what the file declared before and no longer declares.

Without --yes it lists what it would do and changes nothing; objects made in the UI
(or declared by another file) are never removed; all or nothing.
"""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django_celery_beat.models import PeriodicTask

from auditor.alerts.models import Alert, Channel, Delivery
from auditor.alerts.problems import raise_problem
from auditor.pipelines.models import Binding, Cluster, SourceDatabase, StuckRule
from auditor.reconcile.models import Finding, ReconcileRun
from tests.support.apply_config import GOOD, write

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("secrets_env")]

SECOND = """\
  orders:
    cluster: local
    topic: orders
    source: tickets_db
    table: public.orders
    key_column: id
"""
WEBHOOK = """\
webhooks:
  ops:
    url: https://hooks.example.com/x
    secret: ${TEST_KAFKA_SECRET}
"""
TWO = GOOD.replace("stuck_rules:\n", SECOND + "stuck_rules:\n") + WEBHOOK


def audit_apply(path: Path, *args: str) -> dict:
    out = StringIO()
    call_command("audit", "apply", str(path), "--json", *args, stdout=out)
    return json.loads(out.getvalue())


def names(model) -> list[str]:
    return sorted(model.objects.values_list("name", flat=True))


def test_it_records_the_file_that_declares_each_object(tmp_path: Path) -> None:
    path = write(tmp_path, TWO)
    audit_apply(path)
    expected = str(path.resolve())
    for model in (Cluster, SourceDatabase, Binding, StuckRule, Channel):
        assert set(model.objects.values_list("config_file", flat=True)) == {expected}, model


def test_without_yes_it_lists_what_it_would_remove_and_changes_nothing(tmp_path: Path) -> None:
    path = write(tmp_path, TWO)
    audit_apply(path)
    orders = Binding.objects.get(name="orders")
    run = ReconcileRun.objects.create(binding=orders, trigger="cli", status="ok")
    Finding.objects.create(run=run, binding=orders, kind="missing", key="1")
    path.write_text(GOOD)  # orders and the webhook dropped

    result = audit_apply(path, "--prune")

    assert result["status"] == "dry-run"
    assert result["removed"] == ["webhook ops", "binding orders"]
    assert names(Binding) == ["orders", "tickets"]
    assert names(Channel) == ["ops"]
    assert Finding.objects.filter(binding=orders).count() == 1
    assert PeriodicTask.objects.filter(name="reconcile: orders").exists()


def test_with_yes_it_removes_them_and_their_schedule_in_one_go(tmp_path: Path) -> None:
    path = write(tmp_path, TWO)
    audit_apply(path)
    path.write_text(GOOD.replace("stuck_rules:\n  tickets-new:", "stuck_rules:\n  tickets-old:"))

    result = audit_apply(path, "--prune", "--yes")

    assert result["status"] == "applied"
    assert result["created"][-1] == "stuck rule tickets-old"
    assert result["removed"] == ["stuck rule tickets-new", "webhook ops", "binding orders"]
    assert names(Binding) == ["tickets"]
    assert names(StuckRule) == ["tickets-old"]
    assert names(Channel) == []
    assert not PeriodicTask.objects.filter(name="reconcile: orders").exists()


def test_it_resolves_the_problems_of_what_it_removes(tmp_path: Path) -> None:
    """A removed binding or stuck rule never reports again: its open problems are resolved,
    each channel that heard of one told why (the resolved webhook's details)."""
    path = write(tmp_path, TWO)
    audit_apply(path)
    ops = Channel.objects.get(name="ops")
    ops.events = {"finding_kinds": ["missing"], "stuck_verdicts": ["waiting"]}
    ops.save()
    orders, tickets = Binding.objects.get(name="orders"), Binding.objects.get(name="tickets")
    raise_problem("finding:missing", "finding:orders:missing", orders, "1 missing", {"count": 1})
    raise_problem("finding:missing", "finding:tickets:missing", tickets, "1 missing", {"count": 1})
    raise_problem("stuck:waiting", "stuck:tickets-new:waiting", tickets, "1 waiting", {"count": 1})
    path.write_text(GOOD.replace("stuck_rules:\n  tickets-new:", "stuck_rules:\n  tickets-old:") + WEBHOOK)

    audit_apply(path, "--prune", "--yes")

    assert dict(Alert.objects.values_list("fingerprint", "state")) == {
        "finding:orders:missing": Alert.RESOLVED,
        "finding:tickets:missing": Alert.OPEN,
        "stuck:tickets-new:waiting": Alert.RESOLVED,
    }
    resolved = {
        d.payload["fingerprint"]: d.payload["details"]["resolved_because"]
        for d in Delivery.objects.filter(channel=ops, event=Delivery.RESOLVED)
    }
    assert resolved == {
        "finding:orders:missing": "binding orders was deleted",
        "stuck:tickets-new:waiting": "stuck rule tickets-new was deleted",
    }


def test_it_keeps_objects_made_in_the_ui(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    audit_apply(path)
    cluster = Cluster.objects.create(name="by-hand", bootstrap_servers="127.0.0.1:9")
    assert audit_apply(path, "--prune", "--yes")["removed"] == []
    assert Cluster.objects.filter(pk=cluster.pk).exists()


def test_it_removes_nothing_when_something_made_elsewhere_still_uses_it(tmp_path: Path) -> None:
    path = write(tmp_path, TWO)
    audit_apply(path)
    Binding.objects.create(
        name="by-hand",
        cluster=Cluster.objects.get(name="local"),
        topic="t",
        source=SourceDatabase.objects.get(name="tickets_db"),
        table="public.t",
        key_column="id",
    )
    path.write_text("clusters: {}\n")
    with pytest.raises(CommandError):
        call_command("audit", "apply", str(path), "--prune", "--yes", stdout=StringIO(), stderr=StringIO())
    assert names(Binding) == ["by-hand", "orders", "tickets"]  # all or nothing
    assert names(Cluster) == ["local"]


def test_the_readable_dry_run_says_nothing_changed(tmp_path: Path) -> None:
    path = write(tmp_path, TWO)
    audit_apply(path)
    path.write_text(GOOD + WEBHOOK)
    out = StringIO()
    call_command("audit", "apply", str(path), "--prune", stdout=out)
    text = out.getvalue()
    assert "would remove binding orders\n" in text
    assert "dry run: nothing changed; run again with --prune --yes to apply and remove" in text
    assert names(Binding) == ["orders", "tickets"]


def test_the_pages_say_which_objects_come_from_a_file(tmp_path: Path, admin_client) -> None:
    path = write(tmp_path, TWO)
    audit_apply(path)
    Cluster.objects.create(name="by-hand", bootstrap_servers="127.0.0.1:9")
    pipelines = admin_client.get("/pipelines/").content.decode()
    assert pipelines.count(f'<code title="{path.resolve()}">') == 5  # a cluster, a source, 2 bindings, a rule
    assert pipelines.count("made here") >= 1
    channel = Channel.objects.get(name="ops")
    detail = admin_client.get(f"/alerts/channels/{channel.pk}/").content.decode()
    assert f'<code title="{path.resolve()}">' in detail
    admin = admin_client.get("/admin/pipelines/binding/").content.decode()
    assert str(path.resolve())[:40] in admin
