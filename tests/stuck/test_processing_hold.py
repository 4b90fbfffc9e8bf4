"""A record the last commit of a probed consumer session passed unprocessed is not called
`skipped` while that session may still be processing it (verdict_outcomes.still_processing):
an at-most-once consumer frozen between its commit and its processing goes on when it resumes
(the lab's `live-consumer-pauses-at-most-once`, stop 82, scored such a `skipped` as a false
alarm). The unit tests build the evidence inline; the last two run the demo pipeline's probed
at-most-once consumer on the real broker: slow mid-batch, then killed after its commit."""

from __future__ import annotations

import threading
import time

import pytest

from auditor.demo.consumer import ConsumeResult
from auditor.demo.options import DeliveryMode, Faults
from auditor.lint.observed import max_poll_interval_ms
from auditor.probes.codec import ClientRecord
from auditor.stuck.evidence import ClusterView, CommitRecord, LocatedRecord, ms_to_iso
from auditor.stuck.service import diagnose_rule
from auditor.stuck.verdicts import diagnose
from tests.support.stuck import StuckSetup, verdicts_of
from tests.support.verdict_view import NOW_MS, ROW, view
from tests.support.waiting import wait_until
from tests.support.worker_pool import WorkerPool

SESSION = "c" * 32
RECORD = LocatedRecord("TCK-7", 0, 4, NOW_MS - 3500_000)


def commit(offset: int, ts_ms: int, session: str | None = SESSION) -> CommitRecord:
    return CommitRecord(offset, None if session is None else f"audit:v2:{session}", ts_ms, unbroken=True)


def committed_past(*records: CommitRecord, elsewhere: list[CommitRecord] | None = None) -> ClusterView:
    """The group's commits on partition 0: the first below the record (offset 4), then `records`;
    `elsewhere`: its commits on partition 1."""
    cluster = view(committed=records[-1].offset)
    cluster.groups["g"].commits = {0: [commit(3, NOW_MS - 3600_000), *records], **({1: elsewhere} if elsewhere else {})}
    return cluster


def test_a_record_the_last_commit_of_a_silent_session_passed_is_unknown_until_its_poll_interval_has_passed() -> None:
    # committed past it 100 s ago by a probed session
    cluster = committed_past(commit(5, NOW_MS - 100_000))
    d = diagnose(ROW, [RECORD], [], {}, cluster)
    assert d.verdict == "unknown", d.reason
    assert f"by probed consumer session {SESSION}" in d.reason and "may still be processing it" in d.reason
    assert "max.poll.interval.ms, 300 s by default" in d.reason
    until = d.evidence["groups"][0]["processing_until"]
    assert until == ms_to_iso(NOW_MS - 100_000 + 300_000)  # the commit plus 300 s
    # its own max.poll.interval.ms, as the clients topic shows it, bounds the hold
    cluster.poll_intervals_ms = {SESSION: 60_000}
    assert diagnose(ROW, [RECORD], [], {}, cluster).verdict == "skipped"
    cluster.poll_intervals_ms = {SESSION: 600_000}
    d = diagnose(ROW, [RECORD], [], {}, cluster)
    assert d.verdict == "unknown" and "its max.poll.interval.ms, 600 s" in d.reason
    # and so does the deployment's cap
    cluster.processing_cap_ms = 30_000
    assert diagnose(ROW, [RECORD], [], {}, cluster).verdict == "skipped"
    cluster.processing_cap_ms = 0
    assert diagnose(ROW, [RECORD], [], {}, cluster).verdict == "skipped"


def test_a_record_passed_by_a_commit_older_than_the_poll_interval_is_skipped() -> None:
    d = diagnose(ROW, [RECORD], [], {}, committed_past(commit(5, NOW_MS - 300_000)))
    assert d.verdict == "skipped" and "committed before processing" in d.reason
    assert "processing_until" not in d.evidence["groups"][0]


def test_a_later_commit_of_the_session_does_not_end_the_hold() -> None:
    # the session committed again after the commit that passed the record, on this partition or
    # on another one of the topic: a worker pool behind its polling thread auto-commits on while
    # a worker still holds the record (stop 86; until then this ended the hold: `skipped`)
    for cluster in (
        committed_past(commit(5, NOW_MS - 100_000), commit(6, NOW_MS - 90_000)),
        committed_past(commit(5, NOW_MS - 100_000), elsewhere=[commit(40, NOW_MS - 90_000)]),
        committed_past(commit(5, NOW_MS - 100_000), commit(6, NOW_MS - 90_000, session="d" * 32)),
    ):
        d = diagnose(ROW, [RECORD], [], {}, cluster)
        assert d.verdict == "unknown" and SESSION in d.reason, d.reason
        assert d.evidence["groups"][0]["processing_until"] == ms_to_iso(NOW_MS - 100_000 + 300_000)
    # once the bound has passed since the commit that passed it, it is skipped
    late = committed_past(commit(5, NOW_MS - 400_000), commit(6, NOW_MS - 90_000))
    assert diagnose(ROW, [RECORD], [], {}, late).verdict == "skipped"


def test_a_commit_naming_no_session_holds_nothing() -> None:
    # no session to wait for: an operator's reset (the group empty, no leader epoch) is judged
    # by the marks alone, as before
    cluster = committed_past(commit(5, NOW_MS - 100_000, session=None))
    cluster.groups["g"].commits = {
        0: [
            commit(3, NOW_MS - 3600_000),
            commit(5, NOW_MS - 3500_000),
            CommitRecord(9, None, NOW_MS - 100_000, empty=True),
        ]
    }
    assert diagnose(ROW, [RECORD], [], {}, cluster).verdict == "skipped"


def _slow_at_most_once(stuck: StuckSetup) -> tuple[threading.Thread, list[ConsumeResult]]:
    """The demo's at-most-once consumer in a thread: it polls the ten records, commits past all
    of them, then processes them one at a time, 2 s each."""
    results: list[ConsumeResult] = []
    consumer = stuck.pipeline.consumer(DeliveryMode.AT_MOST_ONCE, Faults(slow_ms=2000))
    thread = threading.Thread(target=lambda: results.append(consumer.run(max_records=10, timeout_s=90)), daemon=True)
    thread.start()
    return thread, results


@pytest.mark.integration
@pytest.mark.django_db
def test_a_slow_at_most_once_consumer_mid_batch_is_not_called_skipped(make_stuck, monkeypatch) -> None:
    """A probed at-most-once consumer committed past its batch and is still processing it: the
    rows it has not reached yet are NEW, committed past and unmarked, which a diagnosis used to
    call `skipped` (and still does with the hold capped at 0). Nothing is skipped: once the
    consumer is done every row is DONE."""
    stuck = make_stuck(contract=2)
    pipeline = stuck.pipeline
    ids = pipeline.produce(10)
    thread, results = _slow_at_most_once(stuck)
    wait_until(lambda: pipeline.committed_offsets() == {0: 10}, 30, "the batch's commit")
    wait_until(lambda: list(pipeline.statuses().values()).count("DONE") >= 1, 30, "the first record processed")

    capped = diagnose_rule(stuck.rule, stuck.options("python"))  # the suite's cap: 0, no hold
    monkeypatch.delenv("AUDITOR_PROCESSING_BOUND_SECONDS")
    unheld = diagnose_rule(stuck.rule, stuck.options("python"))
    statuses = pipeline.statuses()
    thread.join(90)

    # Truth from the consumer's result and the table: it processed all ten, nothing skipped.
    assert results and len(results[0].handled) == 10 and not results[0].skipped and not results[0].crashed
    assert set(pipeline.statuses().values()) == {"DONE"}
    # while it worked through them: capped at 0, the rows it had not reached were called skipped
    # (the false alarm); with the hold, unknown naming its session and the hold's end
    assert capped.items and set(verdicts_of(capped).values()) == {"skipped"}
    pending = {key for key, status in statuses.items() if status == "NEW"}
    assert pending and pending <= set(ids)
    assert unheld.items and set(verdicts_of(unheld)) <= set(verdicts_of(capped))
    assert set(verdicts_of(unheld).values()) == {"unknown"}
    for item in unheld.items:
        assert "may still be processing it" in item.diagnosis.reason, item.diagnosis.reason
        assert "max.poll.interval.ms" in item.diagnosis.reason
        group = item.diagnosis.evidence["groups"][0]
        assert group["processing_until"] and group["passed_by_commit"]["offset"] == 10
        assert group["passed_by_commit"]["session"] in item.diagnosis.reason
    assert not diagnose_rule(stuck.rule, stuck.options("python")).items


@pytest.mark.integration
@pytest.mark.django_db
def test_a_consumer_killed_after_its_commit_is_skipped_once_its_poll_interval_has_passed(
    make_stuck, monkeypatch
) -> None:
    """The crash-at-most-once shape with the hold at 15 s: unknown while the killed session
    might still be processing what its commit passed, skipped once 15 s have passed since it."""
    monkeypatch.setenv("AUDITOR_PROCESSING_BOUND_SECONDS", "15")
    stuck = make_stuck(contract=2)
    pipeline = stuck.pipeline
    ids = pipeline.produce(10)
    crashed = pipeline.consumer(DeliveryMode.AT_MOST_ONCE, Faults(crash_after=5)).run(max_records=10, timeout_s=60)
    committed_by = time.time()  # the commit was made before this
    assert crashed.crashed and pipeline.committed_offsets() == {0: 10}
    # Truth: the table and the group's commit: five rows NEW, committed past, never processed.
    skipped = {key for key, status in pipeline.statuses().items() if status == "NEW"}
    assert skipped == set(ids[5:])

    first = diagnose_rule(stuck.rule, stuck.options("python"))
    assert time.time() < committed_by + 14, "the diagnosis outlasted the hold: nothing left to see"
    assert verdicts_of(first) == dict.fromkeys(skipped, "unknown")
    assert all("AUDITOR_PROCESSING_BOUND_SECONDS, 15 s" in i.diagnosis.reason for i in first.items)
    assert all(crashed.session_id in i.diagnosis.reason for i in first.items)
    time.sleep(max(0.0, committed_by + 16 - time.time()))
    assert verdicts_of(diagnose_rule(stuck.rule, stuck.options("python"))) == dict.fromkeys(skipped, "skipped")


def test_the_poll_interval_is_read_from_what_the_consumers_probe_reported() -> None:
    def client(config: dict[str, object]) -> ClientRecord:
        return ClientRecord("consumer", SESSION, "app", "g", "librdkafka", "2.6.0", config, "host", NOW_MS)

    assert max_poll_interval_ms(client({"max.poll.interval.ms": "45000"})) == 45_000
    assert max_poll_interval_ms(client({"max.poll.interval.ms": 45000})) == 45_000
    # unset, or not a number of ms: librdkafka's default applies (None: not shown)
    unset: list[dict[str, object]] = [
        {},
        {"max.poll.interval.ms": "soon"},
        {"max.poll.interval.ms": 0},
        {"max.poll.interval.ms": None},
    ]
    for config in unset:
        assert max_poll_interval_ms(client(config)) is None, config


@pytest.mark.integration
@pytest.mark.django_db
def test_a_record_in_a_workers_hands_is_not_skipped_though_the_session_committed_since(make_stuck, monkeypatch) -> None:
    """A probed consumer with a worker pool behind its polling thread and librdkafka's
    auto-commit: one worker holds a record while the others finish theirs and the poll loop goes
    on to the next batch, whose commit comes after the one that passed the held record. Until
    stop 86 that later commit ended the hold: the held record's row, NEW, was `skipped`. Now it
    is `unknown` until the session's processing bound has passed since the commit that passed
    it; once the worker is done every row is DONE."""
    monkeypatch.setenv("AUDITOR_PROCESSING_BOUND_SECONDS", "120")
    stuck = make_stuck(contract=2)
    pipeline = stuck.pipeline
    ids = pipeline.produce(6)
    store = pipeline.store()
    lock = threading.Lock()

    def process(msg) -> None:  # type: ignore[no-untyped-def]
        with lock:
            store.mark_done(msg.key().decode())

    def committed() -> int:
        return pipeline.committed_offsets().get(0, -1)

    pool = WorkerPool(
        pipeline.bootstrap,
        pipeline.group,
        pipeline.topic,
        pipeline.probes.consumer_ledger,
        pipeline.probes.clients,
        held=2,
        process=process,
    )
    try:
        assert [m.offset() for m in pool.hand(6)] == list(range(6))
        pool.settle(5, committed, 5)
        ids += pipeline.produce(3)
        assert [m.offset() for m in pool.hand(3)] == [6, 7, 8]
        assert pool.settle(8, committed, 8) == 9  # the session committed after the commit past offset 2
        held = {key for key, status in pipeline.statuses().items() if status == "NEW"}
        in_hands = diagnose_rule(stuck.rule, stuck.options("python"))
        assert 2 not in pool.finished  # the application's account: offset 2 is in a worker's hands
        pool.release.set()
        pool.settle(9, committed, 8)
    finally:
        pool.close()
        store.close()

    assert held == {ids[2]}
    assert verdicts_of(in_hands) == {ids[2]: "unknown"}
    (item,) = in_hands.items
    assert "may still be processing it" in item.diagnosis.reason and pool.consumer.session_id in item.diagnosis.reason
    assert set(pipeline.statuses().values()) == {"DONE"}
    assert not diagnose_rule(stuck.rule, stuck.options("python")).items
