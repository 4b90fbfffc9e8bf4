"""`audit demo setup|produce|consume|run` from the command line (real Kafka and PostgreSQL)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from auditor.demo.store import TicketStore
from tests.support.paths import ROOT
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def names(make_topic: Callable[..., str], source_url: str) -> Iterator[list[str]]:
    """Options that point every command at this test's own tables, topics and group."""
    suffix = uuid.uuid4().hex[:10]
    table, processed = f"tickets_{suffix}", f"processed_{suffix}"
    yield [
        "--table", table, "--processed-table", processed,
        "--topic", make_topic("demo-cli", partitions=3), "--output-topic", make_topic("demo-cli-out"),
        "--group", f"demo-cli-{suffix}",
    ]  # fmt: skip
    with TicketStore(source_url, table, processed) as store:
        store.drop_tables()


def audit_demo(*args: str) -> dict:
    out = StringIO()
    call_command("audit", "demo", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def statuses(names: list[str], source_url: str) -> dict[str, str]:
    options = dict(zip(names[::2], names[1::2], strict=True))
    with TicketStore(source_url, options["--table"], options["--processed-table"]) as store:
        return store.statuses()


def test_it_sets_up_produces_and_consumes(names: list[str], source_url: str) -> None:
    first = audit_demo("setup", *names)
    assert first["tables"] == [names[1], names[3]]
    assert audit_demo("setup", *names)["topics_created"] == []  # idempotent

    produced = audit_demo("produce", *names, "--count", "12", "--faults", "drop-every=5")
    assert (produced["inserted"], produced["produced"], produced["acked"]) == (12, 10, 10)
    assert produced["dropped"] == [f"TCK-{n}" for n in (5, 10)]

    consumed = audit_demo("consume", *names, "--mode", "exactly-once", "--max-records", "10")
    assert (consumed["handled"], consumed["applied"], consumed["stop_reason"]) == (10, 10, "max-records")
    assert [ticket for ticket, status in statuses(names, source_url).items() if status == "NEW"] == ["TCK-5", "TCK-10"]


def test_it_names_a_bad_environment_setting(
    names: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AUDITOR_DEMO_FAULTS", "crash-after=soon")
    with pytest.raises(CommandError) as raised:
        call_command("audit", "demo", "consume", *names, "--max-records", "1", stdout=StringIO())
    assert raised.value.returncode == 2
    assert "AUDITOR_DEMO_FAULTS: 'crash-after=soon' needs a whole number" in capsys.readouterr().err


def test_it_runs_until_sigterm_and_restarts_a_crashed_consumer(
    names: list[str], source_url: str, tmp_path: Path
) -> None:
    log_path = tmp_path / "demo-run.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "audit", "demo", "run", *names, "--mode", "at-least-once",
             "--faults", "crash-after=10", "--rate", "20", "--restart-delay", "0.5", "--commit-interval", "1"],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:

        def restarted() -> bool:
            assert proc.poll() is None, "audit demo run exited early:\n" + log_path.read_text()
            text = log_path.read_text()
            return "demo consumer crashed (fault)" in text and text.count(" started (at-least-once") >= 2

        wait_until(restarted, 60, "a crash and a restart of the demo consumer")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log_path.read_text()
    assert "crash fault after 10 records, exiting" in text
    assert "consumer starts 2, crashes 1" in text
    done = [ticket for ticket, status in statuses(names, source_url).items() if status == "DONE"]
    assert len(done) >= 10
