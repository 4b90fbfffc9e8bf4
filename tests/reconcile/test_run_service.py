"""A run's life without Spark: claiming, overlap, abandoned runs, publishing or failing, alerts."""

from __future__ import annotations

import socket
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from kombu import Connection

from auditor.alerts.models import Alert, Channel, Delivery
from auditor.alerts.tasks import deliver_webhook
from auditor.reconcile import alerting, conf, service
from auditor.reconcile.models import Finding, FindingStaging, ReconcileRun
from auditor.reconcile.service import (
    RunInProgress,
    claim_run,
    current_run_ids,
    execute_run,
    finish_run,
    prune_findings,
    start_run,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def binding(make_binding):
    return make_binding("tickets", "tickets", "public.tickets")


def staged(run: ReconcileRun, *rows: dict[str, Any]) -> None:
    FindingStaging.objects.bulk_create(FindingStaging(run_id=run.job_run_id, **row) for row in rows)


def staging_of(run: ReconcileRun) -> bool:
    # Scoped to the run: Spark's JDBC writes in other tests commit outside the test transaction.
    return FindingStaging.objects.filter(run_id=run.job_run_id).exists()


def running(binding) -> ReconcileRun:
    run = start_run(binding, ReconcileRun.SCHEDULE)
    assert claim_run(run)
    return run


def ok_result(**counts: int) -> dict[str, Any]:
    return {"status": "ok", "mode": "incremental", "counts": counts, "records_read": 10, "duration_s": 2.0}


def test_it_refuses_a_second_run_while_one_is_queued_or_running(binding) -> None:
    first = start_run(binding, ReconcileRun.SCHEDULE)
    with pytest.raises(RunInProgress) as raised:
        start_run(binding, ReconcileRun.MANUAL)
    assert raised.value.active == first
    assert claim_run(first)
    with pytest.raises(RunInProgress):
        start_run(binding, ReconcileRun.CLI)
    assert ReconcileRun.objects.count() == 1


def test_it_lets_one_worker_only_take_a_queued_run(binding) -> None:
    run = start_run(binding, ReconcileRun.MANUAL)
    assert claim_run(run) is True
    again = ReconcileRun.objects.get(pk=run.pk)
    assert claim_run(again) is False  # the task delivered twice
    assert again.status == ReconcileRun.RUNNING and again.claimed_by and again.job_run_id


def test_it_keeps_the_header_counts_beside_the_findings_not_among_them(binding) -> None:
    run = running(binding)
    staged(run, {"kind": "missing", "key": "4"})

    finished = finish_run(run, ok_result(missing=1, records_without_headers=5, records_malformed_headers=2))

    assert finished.status == ReconcileRun.OK and finished.total_findings == 1
    assert finished.header_counts() == [("records_without_headers", 5), ("records_malformed_headers", 2)]
    assert finished.as_event()["counts"] == {
        "missing": 1,
        "duplicate": 0,
        "orphan": 0,
        "gap": 0,
        "aborted": 0,
        "unprocessed": 0,
        "reprocessed": 0,
        "unverifiable": 0,
        "late": 0,
        "records_without_headers": 5,
        "records_malformed_headers": 2,
    }


def test_it_allows_a_new_run_once_the_previous_one_finished(binding) -> None:
    run = running(binding)
    finish_run(run, ok_result())
    assert start_run(binding, ReconcileRun.SCHEDULE).status == ReconcileRun.QUEUED


def test_it_fails_an_abandoned_run_instead_of_blocking_the_binding_forever(binding) -> None:
    stuck = running(binding)
    # its worker, on another host, took it a day ago and never came back
    a_day_ago = timezone.now() - timedelta(days=1)
    ReconcileRun.objects.filter(pk=stuck.pk).update(
        created_at=a_day_ago, started_at=a_day_ago, claimed_by="another-host:4242"
    )
    staged(stuck, {"kind": "missing", "key": "1"})

    fresh = start_run(binding, ReconcileRun.SCHEDULE)

    stuck.refresh_from_db()
    assert stuck.status == ReconcileRun.FAILED and stuck.error.startswith("abandoned")
    assert not staging_of(stuck)
    assert fresh.status == ReconcileRun.QUEUED


def claimed_by_process(run: ReconcileRun, pid: int, queued_ago: float, started_ago: float = 0) -> None:
    now = timezone.now()
    ReconcileRun.objects.filter(pk=run.pk).update(
        created_at=now - timedelta(seconds=queued_ago),
        started_at=now - timedelta(seconds=started_ago),
        claimed_by=service.claimant_name(pid),
    )


def test_it_keeps_a_run_that_waited_long_in_the_queue_while_its_worker_runs_it(binding) -> None:
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = running(binding)
        # queued longer ago than any run may last, taken by a live worker just now
        claimed_by_process(live, worker.pid, queued_ago=conf.stale_after_seconds() + 60)

        with pytest.raises(RunInProgress) as raised:
            start_run(binding, ReconcileRun.SCHEDULE)

        assert raised.value.active == live
        live.refresh_from_db()
        assert live.status == ReconcileRun.RUNNING and not live.error
        assert ReconcileRun.objects.filter(binding=binding).count() == 1
    finally:
        worker.kill()
        worker.wait()


def test_it_fails_a_run_at_once_when_the_process_that_ran_it_is_gone(binding) -> None:
    worker = subprocess.Popen([sys.executable, "-c", "pass"])
    worker.wait()  # the worker exited (killed, crashed) without finishing its run
    gone = running(binding)
    claimed_by_process(gone, worker.pid, queued_ago=5)
    staged(gone, {"kind": "missing", "key": "1"})

    fresh = start_run(binding, ReconcileRun.SCHEDULE)

    gone.refresh_from_db()
    assert gone.status == ReconcileRun.FAILED and gone.error.startswith("abandoned")
    assert str(worker.pid) in gone.error
    assert not staging_of(gone)
    assert fresh.status == ReconcileRun.QUEUED


def test_it_takes_a_reused_pid_for_a_gone_claimant(binding) -> None:
    newcomer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # the claim was made an hour before the process now holding its pid started
        old = running(binding)
        claimed_by_process(old, newcomer.pid, queued_ago=3700, started_ago=3600)

        fresh = start_run(binding, ReconcileRun.SCHEDULE)

        old.refresh_from_db()
        assert old.status == ReconcileRun.FAILED and old.error.startswith("abandoned")
        assert fresh.status == ReconcileRun.QUEUED
    finally:
        newcomer.kill()
        newcomer.wait()


def test_it_judges_a_run_of_another_host_by_when_it_started(binding) -> None:
    elsewhere = running(binding)
    ReconcileRun.objects.filter(pk=elsewhere.pk).update(
        created_at=timezone.now() - timedelta(seconds=conf.stale_after_seconds() + 60),
        started_at=timezone.now(),
        claimed_by="another-host:4242",
    )
    with pytest.raises(RunInProgress):
        start_run(binding, ReconcileRun.SCHEDULE)
    elsewhere.refresh_from_db()
    assert elsewhere.status == ReconcileRun.RUNNING


def test_it_judges_a_run_of_another_pid_namespace_of_the_same_host_name_by_when_it_started(binding) -> None:
    # a worker in a container with this host's name (or a host named alike): its pid means
    # nothing here, even one no process of this namespace holds
    elsewhere = running(binding)
    ReconcileRun.objects.filter(pk=elsewhere.pk).update(
        created_at=timezone.now() - timedelta(seconds=conf.stale_after_seconds() + 60),
        started_at=timezone.now(),
        claimed_by=f"{socket.gethostname()}#00000000:{2**22 + 1}",  # above any pid_max: no process here
    )
    with pytest.raises(RunInProgress):
        start_run(binding, ReconcileRun.SCHEDULE)
    ReconcileRun.objects.filter(pk=elsewhere.pk).update(claimed_by=f"{socket.gethostname()}:{2**22 + 1}")
    with pytest.raises(RunInProgress):  # a claim in the form before the machine was named
        start_run(binding, ReconcileRun.SCHEDULE)
    elsewhere.refresh_from_db()
    assert elsewhere.status == ReconcileRun.RUNNING


def test_it_fails_a_run_whose_result_cannot_be_stored_instead_of_leaving_it_running(binding, monkeypatch) -> None:
    def too_many_records(*args: Any) -> dict[str, Any]:
        return ok_result() | {"records_read": 2**70}  # past a bigint column: PostgreSQL refuses the row

    monkeypatch.setattr(service.job, "run_spark_submit", too_many_records)
    run = execute_run(start_run(binding, ReconcileRun.CLI))

    stored = ReconcileRun.objects.get(pk=run.pk)
    assert stored.status == ReconcileRun.FAILED and stored.error.startswith("publishing the result failed")


def test_it_publishes_the_staged_findings_of_a_successful_run(binding, django_capture_on_commit_callbacks) -> None:
    run = running(binding)
    staged(
        run,
        {"kind": "missing", "key": "4", "evidence": {"created_ms": 1}, "is_new": True},
        {"kind": "duplicate", "key": "1", "cause": "producer-retry", "partition": 0, "offset": 3},
        {"kind": "orphan", "key": None, "cause": "no-key", "partition": 1, "offset": 7},
    )
    with django_capture_on_commit_callbacks() as published:
        # Unverifiable and late rows are counts, not findings: they are not in the staging table.
        finished = finish_run(run, ok_result(missing=1, duplicate=1, orphan=1, unverifiable=2, late=1))

    assert finished.status == ReconcileRun.OK
    assert finished.counts == {
        "missing": 1,
        "duplicate": 1,
        "orphan": 1,
        "gap": 0,
        "aborted": 0,
        "unprocessed": 0,
        "reprocessed": 0,
        "unverifiable": 2,
        "late": 1,
        "records_without_headers": 0,
        "records_malformed_headers": 0,
    }
    assert finished.total_findings == 3 and finished.as_event()["counts"]["unverifiable"] == 2
    assert finished.late == 1 and finished.as_event()["counts"]["late"] == 1
    assert finished.records_read == 10 and finished.duration_seconds == 2.0 and finished.mode == "incremental"
    rows = set(Finding.objects.filter(run=run).values_list("kind", "key", "cause", "is_new"))
    assert rows == {
        ("missing", "4", None, True),
        ("duplicate", "1", "producer-retry", False),
        ("orphan", None, "no-key", False),
    }
    assert not staging_of(run)
    assert current_run_ids(binding) == [run.pk]
    assert len(published) >= 1  # the live "run" event goes out after commit


def test_it_fails_a_run_whose_job_failed_and_publishes_nothing(binding) -> None:
    run = running(binding)
    staged(run, {"kind": "missing", "key": "4"})  # written before the job failed

    failed = finish_run(run, {"status": "failed", "error": "KafkaReadError: Kafka unreachable", "counts": {}})

    assert failed.status == ReconcileRun.FAILED and failed.error == "KafkaReadError: Kafka unreachable"
    assert failed.counts == {} and failed.finished_at is not None
    assert not Finding.objects.exists() and not staging_of(run)
    assert current_run_ids(binding) == []


def test_it_fails_a_run_whose_staged_findings_do_not_match_its_counts(binding) -> None:
    run = running(binding)
    staged(run, {"kind": "missing", "key": "4"})

    failed = finish_run(run, ok_result(missing=2))

    assert failed.status == ReconcileRun.FAILED
    assert "the job counted 2, the staging table held 1" in failed.error
    assert not Finding.objects.exists() and not staging_of(run)


def test_it_fails_a_run_whose_secret_cannot_be_resolved(make_binding, monkeypatch) -> None:
    monkeypatch.delenv("RECONCILE_TEST_UNSET", raising=False)
    binding = make_binding("nosecret", "t", "public.t", source_url="postgresql://app:${RECONCILE_TEST_UNSET}@h/db")
    run = execute_run(start_run(binding, ReconcileRun.CLI))
    assert run.status == ReconcileRun.FAILED
    assert run.error == "binding 'nosecret': environment variable RECONCILE_TEST_UNSET is not set"


def test_it_fails_a_run_whose_source_url_cannot_carry_its_password_without_showing_it(
    make_binding, monkeypatch, client_as
) -> None:
    """A resolved ${ENV} password with a stray % makes the URL unparsable, and libpq quotes the
    password in its error: the run fails at once, naming the source, with the password masked
    in the run record and on the page."""
    monkeypatch.setenv("RECONCILE_TEST_PCT_PASSWORD", "50%off-and-secret")
    binding = make_binding(
        "pctsecret", "t", "public.t", source_url="postgresql://app:${RECONCILE_TEST_PCT_PASSWORD}@127.0.0.1:1/db"
    )
    run = execute_run(start_run(binding, ReconcileRun.CLI))
    assert run.status == ReconcileRun.FAILED
    assert f"source {binding.source.name}: its URL is not valid" in run.error, run.error
    assert "50%off" not in run.error and "and-secret" not in run.error
    page = client_as("viewer").get("/reconcile/runs/").content.decode()
    assert "its URL is not valid" in page and "50%off" not in page


def test_it_fails_a_run_when_the_job_crashes(binding, monkeypatch) -> None:
    def crash(*args: Any) -> dict[str, Any]:
        raise RuntimeError("boom")

    monkeypatch.setattr(service.job, "run_spark_submit", crash)
    run = execute_run(start_run(binding, ReconcileRun.CLI))
    assert run.status == ReconcileRun.FAILED and run.error == "RuntimeError: boom"


def test_it_opens_and_resolves_problems_per_binding_kind_and_cause(binding) -> None:
    channel = Channel.objects.create(
        name="ops", url="http://127.0.0.1:9/hook", secret="${X}", events={"finding_kinds": ["missing", "duplicate"]}
    )
    run = running(binding)
    staged(run, {"kind": "missing", "key": "4"}, {"kind": "duplicate", "key": "1", "cause": "app-resend"})
    finish_run(run, ok_result(missing=1, duplicate=1))
    open_alerts = set(Alert.objects.filter(channel=channel, state=Alert.OPEN).values_list("fingerprint", flat=True))
    assert open_alerts == {"finding:tickets:missing", "finding:tickets:duplicate:app-resend"}

    second = running(binding)
    staged(second, {"kind": "duplicate", "key": "1", "cause": "app-resend"})
    finish_run(second, ok_result(duplicate=1))
    alerts = dict(Alert.objects.filter(channel=channel).values_list("fingerprint", "state"))
    assert alerts == {"finding:tickets:missing": Alert.RESOLVED, "finding:tickets:duplicate:app-resend": Alert.OPEN}
    assert Alert.objects.get(fingerprint="finding:tickets:duplicate:app-resend").count == 2

    third = running(binding)  # a failed run says nothing about what is still wrong
    finish_run(third, {"status": "failed", "error": "down"})
    assert Alert.objects.get(fingerprint="finding:tickets:duplicate:app-resend").state == Alert.OPEN


def test_it_resolves_the_problem_of_records_the_broker_lost_once_no_run_reports_them(binding) -> None:
    channel = Channel.objects.create(
        name="ops", url="http://127.0.0.1:9/hook", secret="${X}", events={"finding_kinds": ["missing"]}
    )
    run = running(binding)
    staged(run, {"kind": "missing", "key": "4", "cause": "broker-lost"})
    finish_run(run, ok_result(missing=1))
    assert Alert.objects.get(channel=channel).fingerprint == "finding:tickets:missing:broker-lost"

    finish_run(running(binding), ok_result())

    assert Alert.objects.get(channel=channel).state == Alert.RESOLVED


def test_it_does_not_resolve_a_missing_problem_when_the_rows_became_unverifiable(binding) -> None:
    """A row reported missing whose window's records were then deleted unread is counted
    unverifiable, not missing: the run cannot judge it, so its problem is not resolved."""
    channel = Channel.objects.create(
        name="ops", url="http://127.0.0.1:9/hook", secret="${X}", events={"finding_kinds": ["missing"]}
    )
    run = running(binding)
    staged(run, {"kind": "missing", "key": "4"})
    finish_run(run, ok_result(missing=1))
    alert = Alert.objects.get(channel=channel, fingerprint="finding:tickets:missing")

    finish_run(running(binding), ok_result(unverifiable=1))
    alert.refresh_from_db()
    assert alert.state == Alert.OPEN

    finish_run(running(binding), ok_result())  # judged again, and found: resolved
    alert.refresh_from_db()
    assert alert.state == Alert.RESOLVED


def test_it_keeps_the_findings_of_the_latest_runs_only(binding, settings) -> None:
    settings.RECONCILE_KEEP_FINDING_RUNS = 2
    runs = []
    for _ in range(3):
        run = running(binding)
        staged(run, {"kind": "missing", "key": "4"})
        runs.append(finish_run(run, ok_result(missing=1)))
    assert set(Finding.objects.values_list("run_id", flat=True)) == {runs[1].pk, runs[2].pk}
    first = ReconcileRun.objects.get(pk=runs[0].pk)
    assert first.findings_pruned and first.counts["missing"] == 1
    assert prune_findings(binding) == 0


def test_it_raises_and_resolves_the_other_problems_when_one_cannot_be(binding, monkeypatch, caplog) -> None:
    """A problem that fails to be raised (here a database error, which aborts the transaction
    unless rolled back to a savepoint) is logged; the kinds after it are still raised and
    resolved, and the run is still published."""
    channel = Channel.objects.create(
        name="ops",
        url="http://127.0.0.1:9/hook",
        secret="${X}",
        events={"finding_kinds": ["missing", "duplicate", "orphan"]},
    )
    first = running(binding)
    staged(first, {"kind": "missing", "key": "4"})
    finish_run(first, ok_result(missing=1))
    assert Alert.objects.get(channel=channel).fingerprint == "finding:tickets:missing"

    real_raise = alerting.raise_problem

    def raise_failing(kind: str, fingerprint: str, *args: Any, **kwargs: Any) -> Any:
        if fingerprint == "finding:tickets:duplicate:app-resend":
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1/0")
        return real_raise(kind, fingerprint, *args, **kwargs)

    monkeypatch.setattr(alerting, "raise_problem", raise_failing)
    second = running(binding)
    staged(
        second,
        {"kind": "duplicate", "key": "1", "cause": "app-resend"},
        {"kind": "orphan", "key": None, "cause": "no-key", "partition": 1, "offset": 7},
    )
    finished = finish_run(second, ok_result(duplicate=1, orphan=1))

    assert finished.status == ReconcileRun.OK
    assert ReconcileRun.objects.get(pk=second.pk).status == ReconcileRun.OK
    assert current_run_ids(binding) == [second.pk]
    alerts = dict(Alert.objects.filter(channel=channel).values_list("fingerprint", "state"))
    assert alerts == {"finding:tickets:missing": Alert.RESOLVED, "finding:tickets:orphan:no-key": Alert.OPEN}
    assert "could not raise or resolve problem finding:tickets:duplicate:app-resend" in caplog.text


def test_it_publishes_a_run_and_its_alerts_together_or_neither(binding, monkeypatch) -> None:
    """A worker stopped while the run's alerts are raised does not leave the run published
    without them: the run fails, as one stopped before its result was stored."""
    Channel.objects.create(
        name="ops", url="http://127.0.0.1:9/hook", secret="${X}", events={"finding_kinds": ["missing"]}
    )

    def stop(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    def job_found_one_missing(job_input: Any, run_id: str, full: bool) -> dict[str, Any]:
        FindingStaging.objects.create(run_id=run_id, kind="missing", key="4")
        return ok_result(missing=1)

    monkeypatch.setattr(service.job, "run_spark_submit", job_found_one_missing)
    monkeypatch.setattr(alerting, "raise_problem", stop)
    run = start_run(binding, ReconcileRun.CLI)
    with pytest.raises(KeyboardInterrupt):
        execute_run(run)

    stored = ReconcileRun.objects.get(pk=run.pk)
    assert stored.status == ReconcileRun.FAILED and stored.error == "interrupted while its result was published"
    assert current_run_ids(binding) == [] and not Finding.objects.filter(run=run).exists()
    assert not Alert.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_broker_blip_while_one_opening_is_handed_to_celery_leaves_the_other_kinds_raised(
    binding, monkeypatch
) -> None:
    """The opening of the first problem cannot reach the broker (a connection refused, as when
    Redis restarts): the problems of the other kinds are raised all the same, and the run is
    published. Deliveries not handed over stay pending, for requeue_stale_deliveries."""
    Channel.objects.create(
        name="ops", url="http://127.0.0.1:9/hook", secret="${X}", events={"finding_kinds": ["missing", "duplicate"]}
    )
    handed: list[int] = []

    def hand_over(delivery_id: int) -> None:
        handed.append(delivery_id)
        # to a broker that refuses connections, with no retry
        with Connection("redis://127.0.0.1:1/0", connect_timeout=2) as broker:
            deliver_webhook.apply_async((delivery_id,), connection=broker, retry=False)

    monkeypatch.setattr(deliver_webhook, "delay", hand_over)

    def job_found_two_kinds(job_input: Any, run_id: str, full: bool) -> dict[str, Any]:
        FindingStaging.objects.create(run_id=run_id, kind="duplicate", key="1", cause="app-resend")
        FindingStaging.objects.create(run_id=run_id, kind="missing", key="4")
        return ok_result(duplicate=1, missing=1)

    monkeypatch.setattr(service.job, "run_spark_submit", job_found_two_kinds)
    run = execute_run(start_run(binding, ReconcileRun.CLI))

    assert ReconcileRun.objects.get(pk=run.pk).status == ReconcileRun.OK
    assert dict(Alert.objects.values_list("fingerprint", "state")) == {
        "finding:tickets:duplicate:app-resend": Alert.OPEN,
        "finding:tickets:missing": Alert.OPEN,
    }
    assert handed and set(Delivery.objects.values_list("status", flat=True)) == {Delivery.PENDING}


def test_a_report_built_after_the_periods_latest_run_was_pruned_still_has_its_causes(binding, settings) -> None:
    """A daily report is built after the day's last run; by then, at the default settings, ten
    later runs have pruned that run's finding rows. Its causes were kept on the run."""
    from auditor.reports.providers.reconcile import reconcile_section

    settings.RECONCILE_KEEP_FINDING_RUNS = 10  # the default
    run = running(binding)
    staged(
        run,
        {"kind": "missing", "key": "4", "cause": "broker-lost"},
        {"kind": "missing", "key": "5", "cause": "broker-lost"},
        {"kind": "gap", "key": "6"},
    )
    last_in_period = finish_run(run, ok_result(missing=2, gap=1))
    end = timezone.now()
    for _ in range(11):
        finish_run(running(binding), ok_result())
    ReconcileRun.objects.exclude(pk=last_in_period.pk).update(created_at=end + timedelta(hours=1))

    last_in_period.refresh_from_db()
    assert last_in_period.findings_pruned and not Finding.objects.filter(run=last_in_period).exists()
    section = reconcile_section([binding], end - timedelta(hours=1), end)
    entry = section["summary"]["bindings"]["tickets"]
    assert (entry["latest_run"], entry["findings_total"], entry["causes_available"]) == (last_in_period.pk, 3, True)
    assert entry["by_cause"] == [
        {"kind": "gap", "cause": None, "count": 1},
        {"kind": "missing", "cause": "broker-lost", "count": 2},
    ]
    cause_table = section["tables"][1]
    assert cause_table["rows"] == [["tickets", "gap", "—", 1], ["tickets", "missing", "broker-lost", 2]]
    assert [(r["kind"], r["cause"], r["key"], r["detail"]) for r in section["csv_rows"]] == [
        ("gap", "", "", "1 finding(s); their rows were pruned (RECONCILE_KEEP_FINDING_RUNS)"),
        ("missing", "broker-lost", "", "2 finding(s); their rows were pruned (RECONCILE_KEEP_FINDING_RUNS)"),
    ]


def test_a_report_says_the_causes_of_a_pruned_run_that_never_kept_them_are_unavailable(binding) -> None:
    """A run published before causes were kept on runs (cause_counts null), its rows pruned:
    the cause table says why it has no causes, never "no findings"."""
    from auditor.reports.providers.reconcile import CAUSES_UNAVAILABLE, reconcile_section

    run = running(binding)
    staged(run, {"kind": "missing", "key": "4", "cause": "broker-lost"})
    finish_run(run, ok_result(missing=1))
    Finding.objects.filter(run=run).delete()
    ReconcileRun.objects.filter(pk=run.pk).update(findings_pruned=True, cause_counts=None)

    now = timezone.now()
    section = reconcile_section([binding], now - timedelta(hours=1), now)
    entry = section["summary"]["bindings"]["tickets"]
    assert (entry["findings_total"], entry["causes_available"], entry["by_cause"]) == (1, False, [])
    assert section["tables"][1]["rows"] == [["tickets", "all", CAUSES_UNAVAILABLE, 1]]
    assert any("causes of the latest run of tickets are unavailable" in note for note in section["notes"])
