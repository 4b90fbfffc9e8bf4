"""`audit lab`: listing, bad usage, the three-broker requirement, the table and the JSON shape."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from auditor.lab import cli
from auditor.lab.models import LabResult, LabRun
from auditor.lab.registry import all_scenarios

pytestmark = pytest.mark.django_db


def test_it_lists_every_scenario() -> None:
    out = io.StringIO()
    call_command("audit", "lab", "--list", stdout=out)
    listed = [line.split()[0] for line in out.getvalue().splitlines()]
    assert listed == list(all_scenarios())
    assert {"failover-idempotent", "unclean-truncation", "producer-retry", "crash-at-most-once"} <= set(listed)


def test_it_names_an_unknown_scenario_and_stores_nothing(capsys) -> None:
    with pytest.raises(CommandError) as raised:
        call_command("audit", "lab", "no-such-scenario", stdout=io.StringIO())
    assert raised.value.returncode == 2
    assert "unknown lab scenario(s): no-such-scenario" in capsys.readouterr().err
    assert not LabRun.objects.exists()


def test_it_says_it_needs_three_brokers_when_kafka_does_not_answer(monkeypatch, capsys) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9")  # nothing listens on the discard port
    with pytest.raises(CommandError) as raised:
        call_command("audit", "lab", "failover-idempotent", stdout=io.StringIO())
    assert raised.value.returncode == 2
    assert "needs a 3-broker stack: make up BROKERS=3" in capsys.readouterr().err
    assert not LabRun.objects.exists()


def stored_run() -> tuple[LabRun, list[LabResult]]:
    run = LabRun.objects.create(started_at=timezone.now(), command="audit lab", status=LabRun.OK, duration_seconds=12)
    results = [
        LabResult.objects.create(
            run=run,
            name="unclean-truncation",
            injected="kill -9",
            expected={"missing/broker-lost": 20},
            got={"missing/broker-lost": 20},
            detect_seconds=41.26,
        ),
        LabResult.objects.create(
            run=run, name="producer-retry", injected="pause", expected={"duplicate/producer-retry": 3}, misses=3
        ),
    ]
    return run, results


def test_it_gives_the_json_shape_of_the_issue() -> None:
    run, results = stored_run()
    report = cli.report(run, results)
    assert [
        set(s) >= {"name", "injected", "expected", "got", "false_alarms", "misses", "detect_s"}
        for s in report["scenarios"]
    ] == [True, True]
    first = report["scenarios"][0]
    assert (first["name"], first["got"], first["false_alarms"], first["misses"], first["detect_s"]) == (
        "unclean-truncation",
        {"missing/broker-lost": 20},
        0,
        0,
        41.3,
    )


def test_it_prints_one_table_row_per_scenario() -> None:
    _, results = stored_run()
    lines = cli.table_lines(results)
    assert lines[0].split() == ["scenario", "expected", "got", "false", "alarms", "misses", "detect_s"]
    assert (
        lines[1].startswith("unclean-truncation") and "missing/broker-lost 20" in lines[1] and lines[1].endswith("41.3")
    )
    assert lines[2].split()[-3:] == ["0", "3", "-"] and "nothing" in lines[2]


def test_a_run_naming_every_scenario_is_stored_with_its_whole_command() -> None:
    # `make lab SCENARIOS="<all of them>"` once failed as it began: the command (about 2,400
    # characters) did not fit a 500-character column, and nothing ran.
    command = "python manage.py audit lab " + " ".join(all_scenarios())
    assert len(command) > 2000
    run = LabRun.objects.create(started_at=timezone.now(), command=command)
    assert LabRun.objects.get(pk=run.pk).command == command
