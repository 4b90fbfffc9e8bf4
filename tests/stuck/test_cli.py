"""`audit stuck RULE [--json]`: exit codes, the JSON shape, the table, stored runs."""

from __future__ import annotations

import io
import json

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from auditor.demo.options import DeliveryMode, Faults
from auditor.pipelines.models import StuckRule
from auditor.stuck.models import DiagnosisRun, StuckItem
from auditor.stuck.service import run_diagnosis
from tests.support.stuck import StuckSetup

pytestmark = pytest.mark.django_db


def audit_stuck(*args: str) -> str:
    out = io.StringIO()
    call_command("audit", "stuck", *args, stdout=out)
    return out.getvalue()


def ledger_options(setup: StuckSetup) -> list[str]:
    probes = setup.pipeline.probes
    return ["--producer-ledger-topic", probes.producer_ledger, "--consumer-ledger-topic", probes.consumer_ledger]


def test_it_exits_2_for_an_unknown_rule(plain_rule: StuckRule, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(CommandError) as raised:
        audit_stuck("no-such-rule")
    assert raised.value.returncode == 2
    err = capsys.readouterr().err
    assert "unknown stuck rule 'no-such-rule'" in err and plain_rule.name in err  # names the known rules


@pytest.mark.integration
def test_it_prints_each_item_as_json_and_stores_the_run(stuck: StuckSetup) -> None:
    pipeline = stuck.pipeline
    ids = pipeline.produce(6, Faults(drop_every=3))
    pipeline.consumer(DeliveryMode.AT_LEAST_ONCE).run(max_records=4, timeout_s=60)

    report = json.loads(audit_stuck(stuck.rule.name, "--json", "--engine", "python", *ledger_options(stuck)))

    assert report["rule"] == stuck.rule.name and report["run"]["status"] == "ok"
    assert sorted(item["key"] for item in report["items"]) == sorted([ids[2], ids[5]])
    for item in report["items"]:
        assert {"key", "status", "age_seconds", "verdict", "evidence", "reason"} <= set(item)
        assert (item["status"], item["verdict"]) == ("NEW", "never-produced")
        assert isinstance(item["age_seconds"], float) and item["age_seconds"] >= 0
        assert item["evidence"]["topic"] == pipeline.topic and item["evidence"]["records"] == []
    assert report["counts"]["never-produced"] == 2
    run = DiagnosisRun.objects.get(pk=report["run"]["id"])
    assert (run.trigger, run.total, run.engine) == ("cli", 2, "python")
    assert StuckItem.objects.open().filter(rule=stuck.rule).count() == 2


@pytest.mark.integration
def test_it_prints_a_table_for_people_and_can_skip_storing(stuck: StuckSetup) -> None:
    ids = stuck.pipeline.produce(3, Faults(drop_every=3))

    text = audit_stuck(stuck.rule.name, "--no-store", "--engine", "python", *ledger_options(stuck))

    assert f"stuck rule {stuck.rule.name}" in text and "3 stuck item(s)" in text
    assert "never-produced 1" in text and "waiting 2" in text
    row = next(line for line in text.splitlines() if line.startswith(ids[2]))
    assert "NEW" in row and "never-produced" in row
    assert not DiagnosisRun.objects.filter(rule=stuck.rule).exists()


def test_it_shows_control_characters_of_keys_escaped_in_the_table() -> None:
    from auditor.stuck.cli import _write

    out = io.StringIO()
    item = {"key": "TCK-\x1b[2J\nx", "status": "NEW", "age_seconds": 700.0, "verdict": "waiting", "reason": "r\rs"}
    counts = dict.fromkeys(["waiting"], 1)
    _write({"rule": "r", "binding": "b", "counts": counts, "items": [item], "risks": [], "notes": []}, {}, out)

    text = out.getvalue()
    assert "\x1b" not in text and "\r" not in text
    assert "TCK-\\x1b[2J\\nx" in text and "r\\rs" in text


@pytest.mark.integration
def test_it_leaves_open_the_items_a_run_with_max_items_did_not_examine(stuck: StuckSetup) -> None:
    """A scheduled run stores 20 stuck items; `--max-items 5` examines the oldest 5. The other
    rows are still stuck (the table says so), bar one set DONE meanwhile: only that one is
    resolved, and the rest keep their first_seen (no new "opened")."""
    pipeline = stuck.pipeline
    ids = pipeline.produce(20)  # never consumed: all waiting
    scheduled = run_diagnosis(stuck.rule, DiagnosisRun.SCHEDULE, options=stuck.options("python"))
    assert scheduled.status == DiagnosisRun.OK and scheduled.total == 20
    first_seen = dict(StuckItem.objects.open().filter(rule=stuck.rule).values_list("key", "first_seen"))
    assert sorted(first_seen) == sorted(ids)
    with psycopg.connect(pipeline.source_url, autocommit=True) as conn:
        conn.execute(f"UPDATE {pipeline.table} SET status = 'DONE' WHERE ticket_id = %s", [ids[-1]])
    # Ground truth: the table's statuses.
    statuses = pipeline.statuses()
    still = {k for k in ids if statuses[k] == "NEW"}
    assert still == set(ids[:-1])

    report = json.loads(
        audit_stuck(stuck.rule.name, "--json", "--engine", "python", "--max-items", "5", *ledger_options(stuck))
    )

    assert report["run"]["status"] == "ok"
    now_open = dict(StuckItem.objects.open().filter(rule=stuck.rule).values_list("key", "first_seen"))
    assert set(now_open) == still
    assert now_open == {k: first_seen[k] for k in still}
    run = DiagnosisRun.objects.get(pk=report["run"]["id"])
    assert (run.total, run.truncated, run.became_stuck, run.got_unstuck) == (5, True, 0, 1)
    assert sorted(item["key"] for item in report["items"]) == sorted(still)  # the report lists the open items
