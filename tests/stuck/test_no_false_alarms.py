"""When the auditor cannot see something, items are `unknown` with the reason, never a failure verdict."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from auditor.demo.options import DeliveryMode, Faults
from auditor.demo.store import ApplyOutcome
from auditor.lab.cluster import delete_records
from auditor.probes import AuditedConsumer
from auditor.stuck import service
from auditor.stuck.kafka_view import read_cluster_view
from auditor.stuck.service import diagnose_rule
from tests.probes.kafka_helpers import read_topic
from tests.support.demo import DemoPipeline
from tests.support.plain import commit_outside_membership
from tests.support.stuck import StuckSetup, diagnose_both, make_rule, verdicts_of
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


def test_it_says_unknown_with_the_reason_when_the_broker_is_unreachable(stuck: StuckSetup) -> None:
    pipeline = stuck.pipeline
    ids = pipeline.produce(6, Faults(drop_every=3))
    rule = make_rule(pipeline, bootstrap=f"127.0.0.1:{_closed_port()}")
    setup = StuckSetup(pipeline, rule)

    result = diagnose_rule(rule, setup.options("python", timeout_s=2))

    assert verdicts_of(result) == dict.fromkeys(ids, "unknown")
    assert all("Kafka could not be read" in item.diagnosis.reason for item in result.items)
    assert result.degraded
    # no risk could be assessed: said so, never an empty list that reads as "no risk"
    assert [(r["kind"], r["severity"]) for r in result.risks] == [("risks-unknown", "unknown")]
    assert result.risks[0]["message"].startswith(
        f"the consumer groups' risks on {rule.binding.topic} are unknown: Kafka"
    )


def test_it_says_unknown_when_the_producer_ledger_topic_is_missing(stuck: StuckSetup) -> None:
    pipeline = stuck.pipeline
    ids = pipeline.produce(6, Faults(drop_every=3))
    pipeline.consumer(DeliveryMode.AT_LEAST_ONCE).run(max_records=4, timeout_s=60)

    result = diagnose_rule(stuck.rule, stuck.options("python", producer_ledger_topic="no-such-ledger-topic"))

    assert verdicts_of(result) == {ids[2]: "unknown", ids[5]: "unknown"}
    assert all("no-such-ledger-topic does not exist" in i.diagnosis.reason for i in result.items)
    assert "ledger no-such-ledger-topic could not be read: topic no-such-ledger-topic does not exist" in result.notes
    # Not degraded since stop 70: the cluster says the topic does not exist (asked by its name),
    # so no later read will see more; degraded, the rule's alerts would never resolve.
    assert not result.degraded
    assert result.items[0].diagnosis.verdict == "unknown"


def test_it_says_unknown_not_skipped_when_the_consumer_ledger_is_missing(stuck: StuckSetup) -> None:
    pipeline = stuck.pipeline
    ids = pipeline.produce(20)
    pipeline.consumer(DeliveryMode.AT_MOST_ONCE, Faults(crash_after=5)).run(max_records=20, timeout_s=60)

    result = diagnose_rule(stuck.rule, stuck.options("python", consumer_ledger_topic="no-such-ledger-topic"))

    verdicts = verdicts_of(result)
    assert {verdicts[t] for t in ids[5:10]} == {"unknown"}  # committed past them: skipped cannot be proven
    assert {verdicts[t] for t in ids[10:]} == {"waiting"}  # the committed offset alone shows these
    assert "consumer ledger cannot be read" in next(i for i in result.items if i.row.key == ids[5]).diagnosis.reason


def test_it_says_unknown_when_the_record_key_matches_nothing(make_stuck) -> None:
    setup = make_stuck(record_key="header:no-such-header")
    ids = setup.pipeline.produce(4, Faults(drop_every=2))

    result = diagnose_rule(setup.rule, setup.options("python"))

    assert verdicts_of(result) == dict.fromkeys(ids, "unknown")
    assert "found no key in any of the 2 records" in result.items[0].diagnosis.reason


def test_it_never_reports_healthy_tickets(stuck: StuckSetup) -> None:
    pipeline = stuck.pipeline
    pipeline.produce(8)
    pipeline.consumer(DeliveryMode.EXACTLY_ONCE).run(max_records=8, timeout_s=60)
    assert set(pipeline.statuses().values()) == {"DONE"}

    result = diagnose_rule(stuck.rule, stuck.options("python"))

    assert result.items == [] and not result.degraded


@pytest.mark.parametrize("read_last", ["recall", "_look_again"])
def test_rows_processed_while_the_evidence_is_read_are_not_reported(
    stuck: StuckSetup, monkeypatch: pytest.MonkeyPatch, read_last: str
) -> None:
    """The source is asked again once the last evidence is read (the auditor's memory, or a
    second look at the consumer ledger), while the verdicts are judged: rows updated until
    then are healthy."""
    pipeline = stuck.pipeline
    ids = pipeline.produce(8)  # none consumed: every row waits
    done = ids[2:5]
    real = getattr(service, read_last)

    def then_process(*args: Any, **kwargs: Any) -> Any:
        answer = real(*args, **kwargs)
        with pipeline.store() as store:
            for ticket in done:
                store.mark_done(ticket)
        return answer

    monkeypatch.setattr(service, read_last, then_process)
    if read_last == "_look_again":  # as if a verdict needed the second look
        monkeypatch.setattr(service, "_passed_unproven", lambda verdict: True)
    result = diagnose_rule(stuck.rule, stuck.options("python"))

    statuses = pipeline.statuses()  # the truth: the source itself
    assert {t for t in ids if statuses[t] == "NEW"} == set(ids) - set(done)
    assert set(verdicts_of(result)) == set(ids) - set(done)
    assert f"{len(done)} row(s) left the stuck status during the diagnosis" in result.notes


@pytest.mark.parametrize("engine", ["python", "spark"])
def test_records_deleted_while_the_diagnosis_reads_them_are_unknown_never_lost(
    make_stuck: Callable[..., StuckSetup],
    kafka_admin: AdminClient,
    kafka_bootstrap: str,
    monkeypatch: pytest.MonkeyPatch,
    spark: Any,
    engine: str,
) -> None:
    setup = make_stuck(partitions=1)
    topic = setup.pipeline.topic
    ids = setup.pipeline.produce(20)  # all acked at offsets 0-19, none consumed: all wait

    def then_delete(*args: Any, **kwargs: Any) -> Any:
        # retention deletes the first 10 records after the offsets were listed, before the read
        answer = read_cluster_view(*args, **kwargs)
        cut = TopicPartition(topic, 0, 10)
        delete_records(kafka_admin, [cut])
        return answer

    monkeypatch.setattr(service, "read_cluster_view", then_delete)
    options = setup.options(engine, use_index=False, **({"spark": spark} if engine == "spark" else {}))
    result = diagnose_rule(setup.rule, options)

    # the truth: offsets 10-19 are still in the log, 0-9 were deleted unread; nothing was lost
    # by the broker and everything was produced
    reader = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"truth-{uuid.uuid4().hex[:6]}"})
    try:
        assert reader.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (10, 20)
    finally:
        reader.close()
    verdicts = verdicts_of(result)
    assert set(verdicts) == set(ids)
    assert set(verdicts.values()) == {"unknown"}, verdicts
    reason = result.items[0].diagnosis.reason
    assert reason.startswith("Kafka could not be read: "), reason
    assert result.degraded


def _consume_plain(pipeline: DemoPipeline, count: int, lose: tuple[int, ...]) -> None:
    """The application's consumer as it ran before it was probed: a plain Consumer that
    processes `count` records and commits past them; the status update of the records at
    the indexes in `lose` is lost."""
    plain = Consumer(
        {
            "bootstrap.servers": pipeline.bootstrap,
            "group.id": pipeline.group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    got: list[Any] = []
    try:
        plain.subscribe([pipeline.topic])
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            msg = plain.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append(msg)
        assert len(got) == count
        with pipeline.store() as store:
            for i, msg in enumerate(got):
                store.mark_done(json.loads(msg.value())["ticket_id"], lose_update=i in lose)
        plain.commit(message=got[-1], asynchronous=False)
    finally:
        plain.close()


def test_records_the_group_consumed_before_its_consumer_was_probed_are_not_called_skipped(
    make_stuck: Callable[..., StuckSetup], spark: Any
) -> None:
    """The auditor adopted on a running pipeline: its consumer was plain before (no processed
    marks), then wrapped. A row left NEW from before cannot be called skipped. (Once retention
    took such a record, expired is ruled out the same way: test_verdicts.py, whose records can
    be older than the completeness slack.)"""
    setup = make_stuck(partitions=1)
    pipeline = setup.pipeline
    ids = pipeline.produce(10)  # a probed producer (contract v2: acks name no offset)
    _consume_plain(pipeline, 10, lose=(3, 7))
    # Then the consumer is probed (AuditedConsumer) and processes five more tickets.
    pipeline.produce(5)
    pipeline.consumer(DeliveryMode.AT_LEAST_ONCE).run(max_records=5, timeout_s=60)
    # The truth: the plain consumer processed every one of the ten; two rows stayed NEW.
    new = {key for key, status in pipeline.statuses().items() if status == "NEW"}
    assert new == {ids[3], ids[7]}
    assert pipeline.committed_offsets() == {0: 15}

    result = diagnose_both(setup, spark)

    assert verdicts_of(result) == dict.fromkeys(new, "unknown")
    reason = next(i for i in result.items if i.row.key == ids[3]).diagnosis.reason
    assert "before its consumer was probed" in reason, reason


@pytest.mark.parametrize("contract", [1, 2])
def test_a_deleted_record_whose_mark_the_ledger_deleted_too_is_not_called_skipped(
    make_stuck: Callable[..., StuckSetup], kafka_admin: AdminClient, spark: Any, contract: int
) -> None:
    """Retention took both the record and, from the consumer ledger, its processed mark; the
    marks of later records are still there. Whether it was processed cannot be told. (A
    contract v1 ledger names the record's offset; v2's acks name none.)"""
    setup = make_stuck(partitions=1, contract=contract)
    pipeline = setup.pipeline
    ids = pipeline.produce(10)
    # Two consumer instances in turn: the first processes 4 tickets (the 4th's update is lost),
    # the second the other 6; each commits what it processed.
    first = pipeline.consumer(DeliveryMode.AT_LEAST_ONCE, Faults(fail_update_every=4), batch_size=4, commit_every=4)
    handled = first.run(max_records=4, timeout_s=60).handled
    ledger = pipeline.probes.consumer_ledger
    first_marks = {p: high for p, (_, high) in pipeline.watermarks(ledger).items()}
    second = pipeline.consumer(DeliveryMode.AT_LEAST_ONCE, batch_size=6, commit_every=6)
    handled += second.run(max_records=6, timeout_s=60).handled
    # The truth, from the consumers' own account: all ten processed once, ids[3]'s update
    # rolled back (it stayed NEW); the group committed past all ten.
    assert [(h.ticket_id, h.outcome) for h in handled] == [
        (key, ApplyOutcome.LOST if i == 3 else ApplyOutcome.APPLIED) for i, key in enumerate(ids)
    ]
    assert {k for k, s in pipeline.statuses().items() if s == "NEW"} == {ids[3]}
    assert pipeline.committed_offsets() == {0: 10}
    # Retention (delete_records standing in): the first instance's ledger records, then every
    # record of the topic.
    cuts = [TopicPartition(ledger, p, high) for p, high in first_marks.items() if high]
    cuts.append(TopicPartition(pipeline.topic, 0, 10))
    delete_records(kafka_admin, cuts)

    result = diagnose_both(setup, spark)

    assert verdicts_of(result) == {ids[3]: "unknown"}
    reason = result.items[0].diagnosis.reason
    assert "no longer holds marks that old" in reason, reason


def test_a_processed_mark_that_trails_the_groups_auto_commit_is_read_before_calling_the_record_skipped(
    make_stuck: Callable[..., StuckSetup], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An auto-committing, probed consumer processes ten tickets; the status update of one is
    lost. librdkafka's auto-commit reaches the broker first; the probe's marks of the last
    five records reach the consumer ledger only after the diagnosis has read the committed
    offsets and the ledger's end (the flush is made to happen right then). The truth, from
    the consumer itself: it processed every record, so the ticket left NEW was processed and
    its update lost: `processed-not-updated`, never `skipped`."""
    setup = make_stuck(partitions=1)
    pipeline = setup.pipeline
    ids = pipeline.produce(10)
    consumer = AuditedConsumer(
        {
            "bootstrap.servers": pipeline.bootstrap,
            "group.id": pipeline.group,
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 100,
            "auto.offset.reset": "earliest",
        },
        ledger_topic=pipeline.probes.consumer_ledger,
        clients_topic=pipeline.probes.clients,
        ledger_flush_interval_s=3600,  # marks leave only when flushed below
    )
    lost = ids[7]
    try:
        consumer.subscribe([pipeline.topic])
        processed: list[str] = []
        deadline = time.monotonic() + 60
        with pipeline.store() as store:
            while len(processed) < 10 and time.monotonic() < deadline:
                msg = consumer.poll(1.0)
                if msg is None or msg.error() is not None:
                    continue
                ticket = json.loads(msg.value())["ticket_id"]
                store.mark_done(ticket, lose_update=ticket == lost)
                consumer.mark_processed(msg)
                processed.append(ticket)
                if len(processed) == 5:
                    assert consumer.flush_ledger(30) == 0  # the first five marks are in the ledger
        assert processed == ids
        wait_until(lambda: pipeline.committed_offsets() == {0: 10}, timeout=30, what="the auto-commit of offset 10")
        assert {k for k, s in pipeline.statuses().items() if s == "NEW"} == {lost}

        flushed: list[int] = []

        def view_then_flush(*args: Any, **kwargs: Any) -> Any:
            read = read_cluster_view(*args, **kwargs)
            flushed.append(consumer.flush_ledger(30))  # the marks of records 5-9 arrive now
            return read

        monkeypatch.setattr(service, "read_cluster_view", view_then_flush)
        result = diagnose_rule(setup.rule, setup.options("python", use_index=False))
    finally:
        consumer.close()

    assert flushed == [0]
    assert verdicts_of(result) == {lost: "processed-not-updated"}
    (item,) = result.items
    assert item.diagnosis.evidence["groups"][0]["outcome"] == "processed"
    assert any("1 processed mark(s) found on a second look" in note for note in result.notes), result.notes
    assert "second_look" in result.timings


@pytest.mark.parametrize("contract", [1, 2])
def test_records_a_plain_consumer_of_a_partly_probed_group_processed_and_committed_are_not_called_skipped(
    make_stuck: Callable[..., StuckSetup], spark: Any, contract: int
) -> None:
    """A group only partly probed (the rolling deploy of the probe; test from stop 71's branch
    `s71-partly`): the demo's probed consumer holds both partitions and processes the first
    tickets; a plain confluent-kafka consumer of the same group joins, the rebalance hands it one
    partition, and it processes that partition's next tickets and commits past each, each row's
    update lost (they stay NEW), leaving no processed mark. The probed consumer goes on with the
    other partition. Then both leave and a new probed instance processes the last tickets on both
    partitions. The group committed past the plain consumer's tickets with probed marks before
    and after them on their partition: main's rule called them `skipped`. The plain consumer's
    commits name no probed session (the probe names its own, stop 72): `unknown`. Ground truth:
    the plain consumer's own list of what it processed, a full read of the topic and the rows."""
    setup = make_stuck(partitions=2, contract=contract)
    pipeline = setup.pipeline
    first = pipeline.produce(10)
    stop = threading.Event()
    probed = pipeline.consumer(DeliveryMode.AT_LEAST_ONCE, commit_every=1)
    probed_result: list[Any] = []
    thread = threading.Thread(target=lambda: probed_result.append(probed.run(stop=stop, timeout_s=180)))
    thread.start()
    plain = Consumer(
        {
            "bootstrap.servers": pipeline.bootstrap,
            "group.id": pipeline.group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    assigned: list[int] = []
    handled: list[tuple[str, int, int]] = []  # (ticket, partition, offset) the plain consumer processed
    try:
        wait_until(
            lambda: all(pipeline.statuses()[t] == "DONE" for t in first)
            and sum(pipeline.committed_offsets().values()) == 10,
            60,
            "the probed consumer to process and commit the first tickets",
        )
        plain.subscribe([pipeline.topic], on_assign=lambda _, parts: assigned.extend(p.partition for p in parts))
        deadline = time.monotonic() + 60
        while not assigned and time.monotonic() < deadline:
            msg = plain.poll(0.5)
            assert msg is None or msg.error() is not None  # everything before the join was committed
        assert len(assigned) == 1, assigned
        second = pipeline.produce(20)
        end = pipeline.watermarks(pipeline.topic)[assigned[0]][1]
        with pipeline.store() as store:
            while (not handled or handled[-1][2] < end - 1) and time.monotonic() < deadline + 60:
                msg = plain.poll(0.5)
                if msg is None or msg.error() is not None:
                    continue
                ticket = json.loads(msg.value() or b"")["ticket_id"]
                assert store.mark_done(ticket, lose_update=True) is ApplyOutcome.LOST
                plain.commit(message=msg, asynchronous=False)
                handled.append((ticket, msg.partition() or 0, msg.offset() or 0))
        wait_until(
            lambda: all(pipeline.statuses()[t] == "DONE" for t in second if t not in {h[0] for h in handled}),
            60,
            "the probed consumer to process the other partition's tickets",
        )
    finally:
        plain.close()
        stop.set()
        thread.join(60)
    assert probed_result and not probed_result[0].crashed
    third = pipeline.produce(10)
    pipeline.consumer(DeliveryMode.AT_LEAST_ONCE).run(max_records=10, timeout_s=60)

    # The truth, from the clients and a full read of the topic.
    position = {
        json.loads(m.value() or b"")["ticket_id"]: (m.partition(), m.offset())
        for m in read_topic(pipeline.topic, bootstrap=pipeline.bootstrap)
    }
    handed = assigned[0]
    plain_tickets = {t for t, _, _ in handled}
    assert plain_tickets and plain_tickets <= set(second)
    assert {position[t] for t in plain_tickets} == {(p, o) for _, p, o in handled}
    assert {position[t][0] for t in plain_tickets} == {handed}
    # probed marks on that partition before and after them
    assert any(position[t][0] == handed for t in first) and any(position[t][0] == handed for t in third)
    _judged_unknown_as_a_plain_consumers(setup, spark, plain_tickets)


def test_records_a_consumer_outside_the_membership_processed_and_committed_are_not_called_skipped(
    make_stuck: Callable[..., StuckSetup], spark: Any
) -> None:
    """The demo's probed consumer processes the first tickets and leaves the group. A plain
    confluent-kafka consumer with the group's id but no membership (assign(), as a catch-up
    script or a framework assigning its own partitions) processes the next ones, each row's
    update lost (they stay NEW), and commits its position past each: a commit the group takes
    only while it has no member, like an operator's reset, but carrying the leader epoch of the
    record read. A new probed instance then processes the last tickets. Stop 74's code took the
    plain consumer's commits for an operator's reset and called its tickets `skipped`. Ground
    truth: the plain consumer's own list of what it processed, a full read of the topic and the
    rows."""
    setup = make_stuck(partitions=2, contract=2)
    pipeline = setup.pipeline
    first = pipeline.produce(10)
    assert len(pipeline.consumer(DeliveryMode.AT_LEAST_ONCE).run(max_records=10, timeout_s=60).handled) == 10
    assert all(pipeline.statuses()[t] == "DONE" for t in first)
    second = pipeline.produce(10)
    outside = Consumer(
        {"bootstrap.servers": pipeline.bootstrap, "group.id": pipeline.group, "enable.auto.commit": False}
    )
    handled: list[tuple[str, int, int]] = []  # (ticket, partition, offset) the plain consumer processed
    try:  # assigned, it starts at the group's committed offsets
        outside.assign([TopicPartition(pipeline.topic, p) for p in range(2)])
        deadline = time.monotonic() + 60
        with pipeline.store() as store:
            while len(handled) < 10 and time.monotonic() < deadline:
                msg = outside.poll(0.5)
                if msg is None or msg.error() is not None:
                    continue
                ticket = json.loads(msg.value() or b"")["ticket_id"]
                assert store.mark_done(ticket, lose_update=True) is ApplyOutcome.LOST
                commit_outside_membership(outside, msg)
                handled.append((ticket, msg.partition() or 0, msg.offset() or 0))
    finally:
        outside.close()
    third = pipeline.produce(10)
    assert len(pipeline.consumer(DeliveryMode.AT_LEAST_ONCE).run(max_records=10, timeout_s=60).handled) == 10

    # The truth, from the clients and a full read of the topic.
    position = {
        json.loads(m.value() or b"")["ticket_id"]: (m.partition(), m.offset())
        for m in read_topic(pipeline.topic, bootstrap=pipeline.bootstrap)
    }
    plain_tickets = {t for t, _, _ in handled}
    assert plain_tickets == set(second)
    assert {position[t] for t in plain_tickets} == {(p, o) for _, p, o in handled}
    # probed marks before and after them on each partition they lie in
    for partition in {p for _, p, _ in handled}:
        assert any(position[t][0] == partition for t in first) and any(position[t][0] == partition for t in third)
    _judged_unknown_as_a_plain_consumers(setup, spark, plain_tickets)


def _judged_unknown_as_a_plain_consumers(setup: StuckSetup, spark: Any, plain_tickets: set[str]) -> None:
    """The plain consumer's tickets, and only they, are NEW, the group committed up to the log
    end, and both engines call them `unknown`: a consumer of the group without the probe
    committed past them."""
    pipeline = setup.pipeline
    assert {t for t, s in pipeline.statuses().items() if s == "NEW"} == plain_tickets
    ends = pipeline.watermarks(pipeline.topic)
    assert pipeline.committed_offsets() == {p: high for p, (_, high) in ends.items()}

    result = diagnose_both(setup, spark)

    assert verdicts_of(result) == dict.fromkeys(plain_tickets, "unknown")
    for item in result.items:
        reason = item.diagnosis.reason
        assert "names no probed consumer session" in reason, reason
        assert "a consumer of the group without the probe committed it" in reason, reason
