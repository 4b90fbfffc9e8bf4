"""Storing diagnoses: items tracked across runs, counts over time, live events after commit,
alert problems per verdict, failed runs that change nothing."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection
from django.utils import timezone

from auditor.alerts.models import Alert, Channel
from auditor.lib.claimants import claimant_name
from auditor.pipelines.models import StuckRule
from auditor.reports.providers.stuck import stuck_section
from auditor.stuck import alerting as stuck_alerting
from auditor.stuck import service as stuck_service
from auditor.stuck.models import DiagnosisRun, StuckItem, VerdictCount
from auditor.stuck.runlock import DiagnosisBusy, diagnosis_lock, diagnosis_running, holder_value
from auditor.stuck.service import record_diagnosis, run_diagnosis, start_run
from auditor.vocabulary import STUCK_VERDICTS
from tests.support.stuck import fake_result

pytestmark = pytest.mark.django_db


def test_it_tracks_items_across_runs(plain_rule: StuckRule) -> None:
    first = record_diagnosis(start_run(plain_rule, "cli"), fake_result(plain_rule, {"A": "waiting", "B": "skipped"}))
    assert (first.status, first.total, first.became_stuck, first.got_unstuck) == ("ok", 2, 2, 0)
    b_before = StuckItem.objects.open().get(rule=plain_rule, key="B")

    second = record_diagnosis(
        start_run(plain_rule, "cli"), fake_result(plain_rule, {"B": "processed-not-updated", "C": "never-produced"})
    )

    assert (second.became_stuck, second.got_unstuck, second.total) == (1, 1, 2)
    open_items = {i.key: i for i in StuckItem.objects.open().filter(rule=plain_rule)}
    assert {k: i.verdict for k, i in open_items.items()} == {"B": "processed-not-updated", "C": "never-produced"}
    b_after = open_items["B"]
    assert b_after.pk == b_before.pk and b_after.first_seen == b_before.first_seen
    assert b_after.verdict_since > b_before.verdict_since and b_after.last_run == second
    resolved = StuckItem.objects.get(rule=plain_rule, key="A")
    assert resolved.resolved_at is not None and resolved.last_run == second
    assert second.counts == dict.fromkeys(STUCK_VERDICTS, 0) | {"processed-not-updated": 1, "never-produced": 1}
    points = VerdictCount.objects.filter(run=second)
    assert points.count() == len(STUCK_VERDICTS) and points.get(verdict="never-produced").count == 1

    # A key that gets stuck again opens a new item; the old one stays resolved.
    record_diagnosis(start_run(plain_rule, "cli"), fake_result(plain_rule, {"A": "waiting"}))
    assert StuckItem.objects.filter(rule=plain_rule, key="A").count() == 2
    assert StuckItem.objects.open().get(rule=plain_rule, key="A").pk != resolved.pk


def test_it_publishes_the_run_only_after_commit(
    plain_rule: StuckRule, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    sent: list[tuple[str, str, dict[str, Any]]] = []
    monkeypatch.setattr(
        "auditor.lib.live.publish_now", lambda group, event, payload: sent.append((group, event, payload))
    )
    record_diagnosis(start_run(plain_rule, "cli"), fake_result(plain_rule, {"A": "waiting"}))

    with django_capture_on_commit_callbacks(execute=True):
        run = record_diagnosis(start_run(plain_rule, "cli"), fake_result(plain_rule, {"B": "skipped"}))
        assert sent == []  # nothing before the commit

    (event,) = [s for s in sent if s[0] == "stuck"]
    group, name, payload = event
    assert (group, name) == ("stuck", "diagnosis")
    assert payload["run"]["id"] == run.pk and payload["run"]["counts"]["skipped"] == 1
    assert payload["became_stuck"] == [{"key": "B", "verdict": "skipped", "reason": "because skipped"}]
    assert payload["got_unstuck"] == [{"key": "A", "verdict": "waiting", "reason": "because waiting"}]


def test_it_raises_and_resolves_one_problem_per_verdict(plain_rule: StuckRule) -> None:
    Channel.objects.create(
        name="oncall",
        url="https://hooks.example.invalid/x",
        secret="${X}",
        events={"stuck_verdicts": list(STUCK_VERDICTS)},
    )
    record_diagnosis(start_run(plain_rule, "cli"), fake_result(plain_rule, {"A": "skipped", "B": "skipped"}))
    alert = Alert.objects.get(fingerprint=f"stuck:{plain_rule.name}:skipped")
    assert (alert.kind, alert.state, alert.details["count"]) == ("stuck:skipped", "open", 2)
    assert alert.details["keys"] == ["A", "B"]

    # Kafka unreadable: everything unknown, but nothing recovered, so nothing is resolved.
    record_diagnosis(start_run(plain_rule, "cli"), fake_result(plain_rule, {"A": "unknown"}, degraded=True))
    alert.refresh_from_db()
    assert alert.state == "open"
    assert Alert.objects.get(fingerprint=f"stuck:{plain_rule.name}:unknown").state == "open"

    record_diagnosis(start_run(plain_rule, "cli"), fake_result(plain_rule, {}))
    alert.refresh_from_db()
    assert alert.state == "resolved"
    assert not Alert.objects.filter(fingerprint__startswith=f"stuck:{plain_rule.name}:", state="open").exists()


def test_it_raises_the_problems_of_a_rule_renamed_while_it_was_diagnosed_under_its_new_name(
    plain_rule: StuckRule,
) -> None:
    """The rename resolved the problems of the old name (auditor.alerts.owners): one raised under
    it afterwards would never be resolved."""
    Channel.objects.create(
        name="oncall", url="https://hooks.example.invalid/x", secret="${X}", events={"stuck_verdicts": ["waiting"]}
    )
    run = start_run(plain_rule, "cli")  # the diagnosis holds the rule as it was when it started
    renamed = StuckRule.objects.get(pk=plain_rule.pk)
    renamed.name = f"{plain_rule.name}-v2"
    renamed.save()

    stored = record_diagnosis(run, fake_result(plain_rule, {"A": "waiting"}))

    assert stored.status == "ok"
    assert list(Alert.objects.filter(state="open").values_list("fingerprint", flat=True)) == [
        f"stuck:{renamed.name}:waiting"
    ]


def test_it_raises_and_resolves_the_other_verdicts_when_one_cannot_be(
    plain_rule: StuckRule, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A problem that fails to be raised (here a database error, which aborts the transaction
    unless rolled back to a savepoint) is logged; the other verdicts are still raised and
    resolved, and the diagnosis is stored."""
    Channel.objects.create(
        name="oncall",
        url="https://hooks.example.invalid/x",
        secret="${X}",
        events={"stuck_verdicts": list(STUCK_VERDICTS)},
    )
    record_diagnosis(start_run(plain_rule, "cli"), fake_result(plain_rule, {"A": "waiting"}))
    real_raise = stuck_alerting.raise_problem
    failing = f"stuck:{plain_rule.name}:never-produced"

    def raise_failing(kind: str, fingerprint: str, *args: Any, **kwargs: Any) -> Any:
        if fingerprint == failing:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1/0")
        return real_raise(kind, fingerprint, *args, **kwargs)

    monkeypatch.setattr(stuck_alerting, "raise_problem", raise_failing)
    run = record_diagnosis(
        start_run(plain_rule, "cli"), fake_result(plain_rule, {"B": "never-produced", "C": "skipped"})
    )

    assert DiagnosisRun.objects.get(pk=run.pk).status == "ok"
    assert set(StuckItem.objects.open().filter(rule=plain_rule).values_list("key", flat=True)) == {"B", "C"}
    assert dict(Alert.objects.values_list("fingerprint", "state")) == {
        f"stuck:{plain_rule.name}:waiting": "resolved",
        f"stuck:{plain_rule.name}:skipped": "open",
    }
    assert f"could not raise or resolve problem {failing}" in caplog.text


def test_it_stores_a_failed_run_and_keeps_the_last_good_items(plain_rule: StuckRule) -> None:
    record_diagnosis(start_run(plain_rule, "cli"), fake_result(plain_rule, {"A": "waiting"}))

    run = run_diagnosis(plain_rule, DiagnosisRun.CLI)  # its table does not exist

    assert run.status == "failed" and plain_rule.binding.table in run.error
    assert list(StuckItem.objects.open().filter(rule=plain_rule).values_list("key", flat=True)) == ["A"]


def test_it_runs_one_diagnosis_of_a_rule_at_a_time(plain_rule: StuckRule) -> None:
    cache.delete(f"stuck:diagnosis-running:{plain_rule.pk}")
    with diagnosis_lock(plain_rule), pytest.raises(DiagnosisBusy):
        run_diagnosis(plain_rule, DiagnosisRun.CLI)
    assert not DiagnosisRun.objects.filter(rule=plain_rule).exists()
    run_diagnosis(plain_rule, DiagnosisRun.CLI)  # the lock is released
    assert DiagnosisRun.objects.filter(rule=plain_rule).count() == 1


def test_a_diagnosis_takes_over_from_one_whose_process_ended(plain_rule: StuckRule) -> None:
    """A worker killed, or aborted by its Kafka client (librdkafka#4605), in the middle of a
    diagnosis leaves the rule's lock and a run marked running. The next diagnosis fails that
    run naming the process and goes on, instead of refusing the rule for an hour."""
    key = f"stuck:diagnosis-running:{plain_rule.pk}"
    ended = subprocess.Popen([sys.executable, "-c", "import os; os.abort()"], stderr=subprocess.DEVNULL)
    assert ended.wait(30) == -signal.SIGABRT
    cache.set(key, holder_value(claimant_name(ended.pid), "t", timezone.now()), timeout=3600)
    orphan = start_run(plain_rule, DiagnosisRun.SCHEDULE)
    assert not diagnosis_running(plain_rule)  # the pages do not show it running

    run = run_diagnosis(plain_rule, DiagnosisRun.CLI)

    orphan.refresh_from_db()
    assert orphan.status == "failed" and orphan.finished_at is not None
    assert f"its process (pid {ended.pid} on {socket.gethostname()}) stopped before finishing" in orphan.error
    assert run.pk != orphan.pk and run.status == "failed" and plain_rule.binding.table in run.error  # it ran
    assert cache.get(key) is None  # and released the lock

    # A holder that runs, or one on another host (which cannot be checked), is waited for.
    for holder in (
        holder_value(claimant_name(os.getpid()), "t", timezone.now()),
        f"{socket.gethostname()}:{os.getpid()}:t",
        "another-host:1:t",
    ):
        cache.set(key, holder, timeout=3600)
        assert diagnosis_running(plain_rule)
        with pytest.raises(DiagnosisBusy):
            run_diagnosis(plain_rule, DiagnosisRun.CLI)
    cache.delete(key)
    assert DiagnosisRun.objects.filter(rule=plain_rule, status="running").count() == 0


def test_a_diagnosis_waits_for_a_holder_of_another_pid_namespace_of_the_same_host_name(
    plain_rule: StuckRule,
) -> None:
    """Two worker containers may share a host name, each with its own pids: a pid another
    namespace's holder names means nothing here, even one no process of this namespace holds.
    Taking its lock over would let two diagnoses of the rule run, the older one then writing
    its verdicts over the newer one's."""
    key = f"stuck:diagnosis-running:{plain_rule.pk}"
    absent = 2**22 + 1  # above any pid_max: no process here
    elsewhere = start_run(plain_rule, DiagnosisRun.SCHEDULE)
    for holder in (
        holder_value(f"{socket.gethostname()}#00000000:{absent}", "t", timezone.now()),
        f"{socket.gethostname()}:{absent}:t",  # named the way locks were before the machine was
    ):
        cache.set(key, holder, timeout=3600)
        assert diagnosis_running(plain_rule)
        with pytest.raises(DiagnosisBusy):
            run_diagnosis(plain_rule, DiagnosisRun.CLI)
        assert cache.get(key) == holder
    cache.delete(key)
    elsewhere.refresh_from_db()
    assert elsewhere.status == "running" and not elsewhere.error


def test_a_diagnosis_takes_over_from_a_holder_whose_pid_a_later_process_holds(plain_rule: StuckRule) -> None:
    key = f"stuck:diagnosis-running:{plain_rule.pk}"
    newcomer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # the lock was taken an hour before the process now holding its pid started
        cache.set(key, holder_value(claimant_name(newcomer.pid), "t", timezone.now() - timedelta(hours=1)), 3600)
        assert not diagnosis_running(plain_rule)
        run = run_diagnosis(plain_rule, DiagnosisRun.CLI)
        assert run.status == "failed" and plain_rule.binding.table in run.error  # it ran
        assert cache.get(key) is None
    finally:
        newcomer.kill()
        newcomer.wait()


def test_it_drops_history_older_than_the_retention(plain_rule: StuckRule, settings: Any) -> None:
    settings.AUDITOR_STUCK_HISTORY_DAYS = 30
    old = record_diagnosis(start_run(plain_rule, "cli"), fake_result(plain_rule, {"A": "waiting"}))
    record_diagnosis(start_run(plain_rule, "cli"), fake_result(plain_rule, {}))  # A got unstuck
    long_ago = timezone.now() - timedelta(days=31)
    DiagnosisRun.objects.filter(pk=old.pk).update(started_at=long_ago)
    StuckItem.objects.filter(rule=plain_rule, key="A").update(resolved_at=long_ago)

    latest = record_diagnosis(start_run(plain_rule, "cli"), fake_result(plain_rule, {"B": "skipped"}))

    assert not DiagnosisRun.objects.filter(pk=old.pk).exists()
    assert not VerdictCount.objects.filter(run_id=old.pk).exists()
    assert list(StuckItem.objects.filter(rule=plain_rule).values_list("key", flat=True)) == ["B"]
    assert DiagnosisRun.objects.filter(rule=plain_rule).count() == 2 and latest.status == "ok"


def test_it_counts_the_items_a_truncated_run_left_open_in_the_chart_and_the_report(
    plain_rule: StuckRule, monkeypatch: pytest.MonkeyPatch
) -> None:
    five = {"A": "waiting", "B": "waiting", "C": "skipped", "D": "skipped", "E": "never-produced"}
    record_diagnosis(start_run(plain_rule, "cli"), fake_result(plain_rule, five))
    # --max-items 2: the two oldest rows examined; the source says the other three are still stuck
    checked: list[list[str]] = []

    def source_says_still_stuck(url: str, query: Any, keys: list[str], *args: Any) -> set[str]:
        checked.append(sorted(keys))
        return set(keys)

    monkeypatch.setattr(stuck_service, "still_stuck", source_says_still_stuck)
    truncated = fake_result(plain_rule, {"A": "waiting", "B": "expired"})
    truncated.truncated = True
    run = record_diagnosis(start_run(plain_rule, "cli"), truncated)

    assert checked == [["C", "D", "E"]]
    assert (run.total, run.truncated, run.got_unstuck) == (2, True, 0)
    assert StuckItem.objects.open().filter(rule=plain_rule).count() == 5
    points = {p.verdict: p.count for p in VerdictCount.objects.filter(run=run)}
    assert sum(points.values()) == 5
    assert {v: n for v, n in points.items() if n} == {"waiting": 1, "expired": 1, "skipped": 2, "never-produced": 1}
    section = stuck_section([plain_rule.binding], timezone.now() - timedelta(hours=1), timezone.now())
    entry = section["summary"]["bindings"][plain_rule.binding.name]
    assert entry["stuck_at_end"] == 5 and section["summary"]["totals"]["stuck"] == 5
    assert {v: n for v, n in entry["verdicts"].items() if n} == {
        "waiting": 1,
        "expired": 1,
        "skipped": 2,
        "never-produced": 1,
    }
    assert len(section["csv_rows"]) == 5
