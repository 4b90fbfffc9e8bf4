"""Stuck verdicts from the auditor's memory, for a pipeline without probes.

A plain producer (no audit headers, no ledger) writes some of the rows' records; a real
reconciliation run reads the topic; then the topic loses what the run saw (delete_records,
standing in for retention; a re-created topic, standing in for a truncating unclean
election). The topic alone can no longer tell what happened: the verdicts must come from
what the run saw and reported, each naming the run.

Ground truth comes from the producer's delivery reports, a full read of the topic after the
fault and the table, never from the auditor.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from auditor.alerts.models import Alert, Channel, Delivery
from auditor.lab.cluster import Cluster as LabCluster
from auditor.lab.cluster import all_led, delete_records, wait_until
from auditor.pipelines.models import Binding, StuckRule
from auditor.reconcile.models import Finding
from auditor.stuck.service import DiagnosisOptions, diagnose_rule, record_diagnosis, start_run
from spark_jobs.kafka_offsets import partition_offsets, topic_id
from tests.support.plain import PlainPipeline, diagnose, reconcile, rule_for
from tests.support.topics import create_again

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


@pytest.mark.parametrize("plain", ["path", "file-uri"], indirect=True)
def test_it_names_expired_and_never_produced_items_from_what_a_run_saw(
    plain: PlainPipeline, kafka_admin: AdminClient, spark
) -> None:
    plain.insert(*range(1, 7))
    plain.produce(0, 1, 2, 3)
    plain.produce(1, 4)  # tickets 5 and 6 are never produced
    rule = rule_for(plain)
    run = reconcile(rule)

    # Retention, before the group (which never committed) read partition 0.
    end = max(o for p, o in plain.delivered.values() if p == 0) + 1
    delete_records(kafka_admin, [TopicPartition(plain.topic, 0, end)])

    # Ground truth: what was delivered and what the topic still holds.
    now = plain.topic_now()
    delivered_then_deleted = {t for t, at in plain.delivered.items() if at not in now}
    never_sent = set(range(1, 7)) - set(plain.delivered)
    in_topic = set(now.values())
    assert delivered_then_deleted == {1, 2, 3} and never_sent == {5, 6} and in_topic == {4}

    verdicts = diagnose(rule, spark)
    assert {k: v for k, (v, _) in verdicts.items()} == (
        dict.fromkeys(map(str, delivered_then_deleted), "expired")
        | dict.fromkeys(map(str, never_sent), "never-produced")
        | dict.fromkeys(map(str, in_topic), "waiting")
    )
    for ticket in delivered_then_deleted | never_sent:
        assert run.job_run_id in verdicts[str(ticket)][1], verdicts[str(ticket)]


def test_an_item_memory_called_expired_keeps_its_alert_open_while_the_memory_is_unreadable(
    plain: PlainPipeline, kafka_admin: AdminClient, make_topic, settings
) -> None:
    """The memory unreadable turns `expired` into `unknown`: the run is degraded, and the
    alert the earlier diagnosis raised stays open (nothing recovered; the auditor could not see)."""
    Channel.objects.create(
        name="oncall", url="https://hooks.example.invalid/x", secret="${X}", events={"stuck_verdicts": ["expired"]}
    )
    plain.insert(1, 2)
    plain.produce(0, 1, 2)
    rule = rule_for(plain)
    reconcile(rule)
    end = max(o for p, o in plain.delivered.values() if p == 0) + 1
    delete_records(kafka_admin, [TopicPartition(plain.topic, 0, end)])
    # Ground truth: both were delivered, and the topic holds neither now.
    assert set(plain.delivered) == {1, 2} and not plain.topic_now()
    # a producer ledger the diagnosis can read, empty (nothing here is probed): only the memory
    # is unreadable in the second diagnosis
    ledger = make_topic("_audit.empty")
    options = DiagnosisOptions(engine="python", producer_ledger_topic=ledger, consumer_ledger_topic=ledger)

    first = diagnose_rule(rule, options)
    assert {i.row.key: i.diagnosis.verdict for i in first.items} == {"1": "expired", "2": "expired"}
    record_diagnosis(start_run(rule, "cli"), first)
    alert = Alert.objects.get(fingerprint=f"stuck:{rule.name}:expired")
    assert alert.state == "open"

    state_json = Path(settings.RECONCILE_STATE_DIR) / rule.binding.name / "state.json"
    state_json.write_text("{ not json")  # the state a reconciliation run left, unreadable now
    second = diagnose_rule(rule, options)
    assert {i.row.key: i.diagnosis.verdict for i in second.items} == {"1": "unknown", "2": "unknown"}
    assert any("the reconciliation state could not be read" in n for n in second.notes), second.notes
    assert second.degraded
    record_diagnosis(start_run(rule, "cli"), second)
    alert.refresh_from_db()
    assert alert.state == "open"
    assert not Delivery.objects.filter(alert=alert, event=Delivery.RESOLVED).exists()


@pytest.mark.alone
def test_it_names_records_a_run_saw_and_the_broker_no_longer_has_broker_lost(
    plain: PlainPipeline, kafka_admin: AdminClient, spark
) -> None:
    """A broker that lost its disk: the partition's only replica starts again empty, under
    the same topic id, and another record takes offset 0. The run saw tickets 1 and 2 there."""
    cluster = LabCluster(plain.bootstrap)
    broker = max(cluster.broker_ids())
    topic = f"mem-disk-{uuid.uuid4().hex[:8]}"
    cluster.create_topic_on(topic, broker, partitions=2)
    plain.topic = topic
    try:
        plain.insert(1, 2, 3)
        plain.produce(0, 1, 2)
        rule = rule_for(plain)
        run = reconcile(rule)
        seen_at = dict(plain.delivered)
        id_before = topic_id(kafka_admin, topic)

        cluster.lose_disk(broker, topic, 0)
        plain.produce(0, 3)

        # Ground truth: the same topic (its id), and a full read of it.
        assert topic_id(kafka_admin, topic) == id_before is not None
        now = plain.topic_now()
        lost = {t for t, at in seen_at.items() if now.get(at) != t}
        assert lost == {1, 2} and set(now.values()) == {3}

        verdicts = diagnose(rule, spark)
        assert {k: v for k, (v, _) in verdicts.items()} == dict.fromkeys(map(str, lost), "broker-lost") | {
            "3": "waiting"
        }
        for ticket in lost:
            assert run.job_run_id in verdicts[str(ticket)][1], verdicts[str(ticket)]
    finally:
        kafka_admin.delete_topics([topic])


def test_records_a_run_saw_the_group_commit_past_are_neither_waiting_nor_expired_once_its_offsets_are_deleted(
    plain: PlainPipeline, kafka_admin: AdminClient, spark
) -> None:
    """A plain consumer read tickets 1-3, committed past them and left, but their rows stay NEW; a
    run reads the pipeline; an operator deletes the group's offsets (kafka-consumer-groups
    --delete-offsets) and retention deletes tickets 1 and 2. The cluster alone shows a group
    that never read anything: tickets 1-2 expired unread, 3 waiting. The run saw it commit past
    them: processed or skipped, which a plain consumer cannot tell (unknown), naming the run."""
    plain.insert(*range(1, 7))
    plain.produce(0, *range(1, 7))
    consumer = Consumer(
        {
            "bootstrap.servers": plain.bootstrap,
            "group.id": plain.group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([plain.topic])
    try:
        received: list[int] = []
        deadline = time.monotonic() + 60
        while 3 not in received:
            assert time.monotonic() < deadline, f"the consumer received only {received}"
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                received.append(int(msg.key()))
                if int(msg.key()) == 3:
                    consumer.commit(message=msg, asynchronous=False)  # past tickets 1-3, none processed
    finally:
        consumer.close()  # leaves the group: no member reads the partition now
    past = plain.delivered[3][1] + 1
    rule = rule_for(plain)
    run = reconcile(rule)

    LabCluster(plain.bootstrap).delete_offsets(plain.group, plain.topic, [0])
    delete_records(kafka_admin, [TopicPartition(plain.topic, 0, plain.delivered[3][1])])

    # Ground truth: the commit made above, the group's offsets now, a full read of the topic.
    check = Consumer({"bootstrap.servers": plain.bootstrap, "group.id": plain.group})
    try:
        assert check.committed([TopicPartition(plain.topic, 0)], timeout=10)[0].offset < 0  # none any more
    finally:
        check.close()
    now = plain.topic_now()
    in_topic = set(now.values())
    deleted = set(plain.delivered) - in_topic
    passed = {t for t, (_, offset) in plain.delivered.items() if offset < past}
    assert deleted == {1, 2} and passed == {1, 2, 3} and in_topic == {3, 4, 5, 6}

    verdicts = diagnose(rule, spark)
    assert {k: v for k, (v, _) in verdicts.items()} == (
        dict.fromkeys(map(str, passed), "unknown") | dict.fromkeys(map(str, in_topic - passed), "waiting")
    )
    for ticket in passed:
        reason = verdicts[str(ticket)][1]
        assert f"reconciliation run {run.job_run_id}" in reason and "no committed offset there now" in reason, reason


def test_records_of_a_topic_deleted_and_created_again_are_not_called_broker_lost(
    plain: PlainPipeline, kafka_admin: AdminClient, spark
) -> None:
    """An operator deletes the topic and creates it again; another record takes offset 0. The
    broker lost nothing: tickets 1 and 2 went with the deleted topic (consumed or not, nobody
    can tell now), and the reconciliation that saw them does not report them missing either."""
    plain.insert(1, 2, 3)
    plain.produce(0, 1, 2)
    rule = rule_for(plain)
    reconcile(rule)
    seen_at = dict(plain.delivered)
    id_before = topic_id(kafka_admin, plain.topic)

    create_again(plain.bootstrap, plain.topic, partitions=2)
    plain.produce(0, 3)

    # Ground truth: another topic under the same name (its id), and a full read of it.
    assert topic_id(kafka_admin, plain.topic) not in (id_before, None)
    now = plain.topic_now()
    gone = {t for t, at in seen_at.items() if now.get(at) != t}
    assert gone == {1, 2} and set(now.values()) == {3}

    verdicts = diagnose(rule, spark)
    assert {k: v for k, (v, _) in verdicts.items()} == dict.fromkeys(map(str, gone), "unknown") | {"3": "waiting"}
    for ticket in gone:
        assert "deleted and created again" in verdicts[str(ticket)][1], verdicts[str(ticket)]

    again = reconcile(rule)
    missing = set(Finding.objects.filter(run=again, kind="missing").values_list("key", flat=True))
    assert missing == set(), missing
    assert any("deleted and created again" in w for w in again.warnings), again.warnings


@pytest.mark.alone
def test_a_leader_change_after_the_row_was_created_leaves_never_produced_unknown(
    plain: PlainPipeline, kafka_admin: AdminClient, spark
) -> None:
    """A leader change loses records a leader acked alone (acks=1) without a trace, so a row
    created before one is never called never-produced on a run's word alone (the lab's
    acks1-clean-failover scenario loses such records for real). Here nothing is lost: the
    leader of partition 0 is stopped (a controlled shutdown moves its leadership), started
    again and made leader again, so both leader changes are real and the records are intact.

    Timeline, by record and row timestamps (as the diagnosis sees it): rows 1-4 an hour ago,
    records 1 and 2, the leader changes, each partition's first record of its current leader
    (the fillers, 30 minutes ago), rows 5 and 6 (20 minutes ago). Tickets 3-6 were never sent."""
    cluster = LabCluster(plain.bootstrap)
    topic = plain.topic
    plain.insert(1, 2, 3, 4, minutes_ago=60)
    plain.produce(0, 1)
    plain.produce(1, 2)

    def leader(partition: int) -> int:
        return cluster.partition(topic, partition).leader

    epochs_before = partition_offsets(kafka_admin, topic, [0, 1])
    first_leader = leader(0)
    cluster.broker("stop", first_leader)
    try:
        cluster.wait_for_leader(topic, 0, other_than=first_leader, timeout=60)
    finally:
        cluster.broker("start", first_leader)
    for partition in (0, 1):
        cluster.wait_for_isr(topic, 3, partition, timeout=90)
    # back to the preferred leaders, so the brokers' own rebalancing changes nothing later
    for partition in (0, 1):
        cluster.elect(topic, partition, unclean=False)  # "not needed" where it already is
    wait_until(lambda: leader(0) == first_leader, 30, "the first leader of partition 0 to lead it again")
    epochs = partition_offsets(kafka_admin, topic, [0, 1])
    assert (epochs_before[0].leader_epoch, epochs[0].leader_epoch >= 2) == (0, True), (epochs_before, epochs)

    plain.insert(1000, 1001, minutes_ago=40, status="DONE")
    plain.produce(0, 1000, minutes_ago=30)
    plain.produce(1, 1001, minutes_ago=30)
    plain.insert(5, 6, minutes_ago=20)
    rule = rule_for(plain)
    run = reconcile(rule)

    # Ground truth: what the producers delivered, and a full read of the topic.
    now = plain.topic_now()
    assert set(now.values()) == {1, 2, 1000, 1001} and set(plain.delivered) == {1, 2, 1000, 1001}
    verdicts = diagnose(rule, spark)
    assert {k: v for k, (v, _) in verdicts.items()} == (
        {"1": "waiting", "2": "waiting"}
        | dict.fromkeys(["3", "4"], "unknown")  # created before the leader changed
        | dict.fromkeys(["5", "6"], "never-produced")  # created after each partition's current leader wrote
    ), verdicts  # with the reasons, should it fail
    for ticket in ("3", "4"):
        reason = verdicts[ticket][1]
        assert run.job_run_id in reason and f"{topic}/0 has changed leader (leader epoch" in reason, reason
    for ticket in ("5", "6"):
        assert run.job_run_id in verdicts[ticket][1], verdicts[ticket]


@pytest.mark.alone
def test_a_mark_of_a_record_the_broker_lost_is_not_taken_for_the_record_now_at_its_offset(
    plain: PlainPipeline, kafka_admin: AdminClient, make_topic, spark
) -> None:
    """A probed consumer processed tickets 1-3 (its ledger marks offsets 0-2), then the broker
    holding the partition's only replica lost its disk. Tickets 4-6 take offsets 0-2 again:
    4 and 5 are processed (their rows stay NEW: the update failed), 6 is committed past and
    never processed. The mark at offset 2 is ticket 3's, not 6's."""
    cluster = LabCluster(plain.bootstrap)
    broker = max(cluster.broker_ids())
    topic = f"mem-disk-marks-{uuid.uuid4().hex[:8]}"
    cluster.create_topic_on(topic, broker, partitions=2)
    plain.topic = topic
    ledger = make_topic("_audit.consumer-ledger")
    writer = Producer({"bootstrap.servers": plain.bootstrap, "linger.ms": 0})

    def marks(*offsets: int, at_ms: int) -> None:
        entries = [[topic, 0, offset, None, at_ms] for offset in offsets]
        message = {"v": 1, "type": "processed", "sid": "consumer-1", "group": plain.group, "entries": entries}
        writer.produce(ledger, key=b"consumer-1", value=json.dumps(message).encode())
        assert writer.flush(30) == 0

    def commit(offset: int) -> None:
        consumer = Consumer(
            {"bootstrap.servers": plain.bootstrap, "group.id": plain.group, "enable.auto.commit": False}
        )
        try:
            consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
        finally:
            consumer.close()

    try:
        plain.insert(1, 2, 3, minutes_ago=60, status="DONE")
        plain.produce(0, 1, 2, 3, minutes_ago=40)
        marks(0, 1, 2, at_ms=int(time.time() * 1000) - 39 * 60_000)
        commit(3)
        rule = rule_for(plain)
        Binding.objects.filter(pk=rule.binding.pk).update(consumer_ledger_topic=ledger, grace_seconds=1)
        rule.refresh_from_db()
        first = reconcile(rule)
        assert set(Finding.objects.filter(run=first).values_list("kind", flat=True)) == set()

        cluster.lose_disk(broker, topic, 0)
        plain.insert(4, 5, 6, minutes_ago=30)
        # The new records' story runs a few minutes ahead of the clock, so that it outlasts the
        # grace (1 s) and the diagnosis's slack for producer clocks (60 s) without a test that
        # waits: 4 and 5 written now and processed two minutes later, 6 written a minute after.
        plain.produce(0, 4, 5, minutes_ago=0)
        marks(0, 1, at_ms=int(time.time() * 1000) + 2 * 60_000)
        plain.produce(0, 6, minutes_ago=-3)
        commit(3)

        # Ground truth: the partition now holds 4-6 at offsets 0-2 (a full read), the marks this
        # test wrote for the consumer, and the group's commit.
        assert {at: t for at, t in plain.topic_now().items() if at[0] == 0} == {(0, 0): 4, (0, 1): 5, (0, 2): 6}
        second = reconcile(rule)  # a rebuild: it finds where the broker rewrote partition 0
        assert second.mode == "rebuild", second.mode
        unprocessed = set(Finding.objects.filter(run=second, kind="unprocessed").values_list("key", flat=True))
        assert unprocessed == {"6"}, unprocessed

        verdicts = diagnose(rule, spark, consumer_ledger=ledger)
        assert {k: v for k, (v, _) in verdicts.items()} == {
            "4": "processed-not-updated",
            "5": "processed-not-updated",
            "6": "skipped",
        }, verdicts
    finally:
        kafka_admin.delete_topics([topic])


def first_run_of_two_done_tickets(plain: PlainPipeline) -> StuckRule:
    """Tickets 1 and 2, done, their records in partitions 0 and 1, and a run that read them;
    the binding's grace and the rule's age 1 s."""
    plain.insert(1, 2, minutes_ago=60, status="DONE")
    plain.produce(0, 1, minutes_ago=59)
    plain.produce(1, 2, minutes_ago=59)
    rule = rule_for(plain)
    Binding.objects.filter(pk=rule.binding.pk).update(grace_seconds=1)
    StuckRule.objects.filter(pk=rule.pk).update(older_than_seconds=1)
    rule.refresh_from_db()
    reconcile(rule)
    return rule


def replay_then_retention(
    plain: PlainPipeline, kafka_admin: AdminClient, partition: int, replay_minutes_ago: int
) -> None:
    """Live records of tickets 3 and 4 written to `partition`, then a replayed event (1001)
    stamped `replay_minutes_ago` before; retention (delete_records) takes 3 and 4 unread;
    tickets 5 and 6 are created after that and never sent."""
    plain.insert(3, 4, minutes_ago=0)
    plain.produce(partition, 3, 4, minutes_ago=0)
    plain.produce(partition, 1001, minutes_ago=replay_minutes_ago)
    delete_records(kafka_admin, [TopicPartition(plain.topic, partition, plain.delivered[1001][1])])
    time.sleep(2.5)  # past the grace (1 s), by the database's clock too
    plain.insert(5, 6, minutes_ago=0)
    time.sleep(1.5)


@pytest.mark.parametrize("replay_minutes_ago", [0, 60], ids=["stamped-when-written", "stamped-an-hour-before"])
def test_records_stamped_before_they_were_written_bound_no_deletion(
    plain: PlainPipeline, kafka_admin: AdminClient, spark, replay_minutes_ago: int
) -> None:
    """After a run, live records of tickets 3 and 4 are written, then a replayed event (1001),
    then retention (delete_records) takes 3 and 4 unread; tickets 5 and 6 are created after
    that and never sent. The oldest record left is the replayed one. Stamped when it was
    written, it bounds the deletion: 5 and 6 are missing and never-produced, 3 and 4 cannot be
    told (unknown). Stamped an hour before (a replay with the events' own times), it bounds
    nothing: read at its word, 3 and 4 (written after it and deleted) would be missing and
    never-produced too."""
    rule = first_run_of_two_done_tickets(plain)
    replay_then_retention(plain, kafka_admin, 0, replay_minutes_ago)

    # Ground truth: the delivery reports and a full read of the topic.
    now = plain.topic_now()
    deleted = {t for t, at in plain.delivered.items() if at not in now}
    never_sent = {3, 4, 5, 6} - set(plain.delivered)
    assert deleted == {1, 3, 4} and never_sent == {5, 6}, (deleted, plain.delivered, now)

    if replay_minutes_ago:
        # Before any run read the replayed record, the diagnosis finds it past the high watermark
        # the first run read, and stamped long before that read.
        before = {k: v for k, (v, _) in diagnose(rule, spark).items()}
        assert before == dict.fromkeys(["3", "4", "5", "6"], "unknown"), before
    run = reconcile(rule)
    missing = set(Finding.objects.filter(run=run, kind="missing").values_list("key", flat=True))
    verdicts = diagnose(rule, spark)
    got = {k: v for k, (v, _) in verdicts.items()}
    if replay_minutes_ago == 0:
        assert missing == {"5", "6"}, missing
        assert got == {"3": "unknown", "4": "unknown", "5": "never-produced", "6": "never-produced"}, verdicts
        return
    assert missing == set(), missing
    assert got == dict.fromkeys(["3", "4", "5", "6"], "unknown"), verdicts
    stamp = plain.delivered[1001]
    assert any(f"{plain.topic}/{stamp[0]}@{stamp[1]} carries the timestamp" in w for w in run.warnings), run.warnings


@pytest.mark.parametrize("replay_minutes_ago", [0, 60], ids=["stamped-when-written", "stamped-an-hour-before"])
def test_a_record_stamped_before_it_was_written_in_a_partition_added_after_the_run_bounds_no_deletion(
    plain: PlainPipeline, kafka_admin: AdminClient, spark, replay_minutes_ago: int
) -> None:
    """The test above in partition 2, added after the first run read the topic: every record
    there was written after that read, so its oldest, stamped an hour before the read, proves
    backdating as a record past a read high watermark does. Read at its word, it would bound
    the deletion of 3 and 4 (written after it): missing and never-produced. Stamped when
    written, it bounds the deletion: 5 and 6, never sent, are missing and never-produced."""
    rule = first_run_of_two_done_tickets(plain)  # it reads partitions 0 and 1, the topic's only ones

    kafka_admin.create_partitions([NewPartitions(plain.topic, 3)])[plain.topic].result(timeout=30)
    wait_until(lambda: all_led(kafka_admin, plain.topic, 3), 30, "a leader for partition 2")
    replay_then_retention(plain, kafka_admin, 2, replay_minutes_ago)

    # Ground truth: the delivery reports and a full read of the topic.
    now = plain.topic_now()
    deleted = {t for t, at in plain.delivered.items() if at not in now}
    never_sent = {3, 4, 5, 6} - set(plain.delivered)
    assert deleted == {3, 4} and never_sent == {5, 6}, (deleted, plain.delivered, now)
    assert plain.delivered[1001][0] == 2 and min(o for p, o in now if p == 2) == plain.delivered[1001][1]
    # Records sent and deleted unread: nothing the auditor reads says whether they were written.
    expected = dict.fromkeys(map(str, deleted), "unknown")

    if replay_minutes_ago:
        # Before any run read the replayed record, the diagnosis finds it in the added partition,
        # stamped long before the first run's read: it proves nothing about when 3-6's records went.
        before = diagnose(rule, spark)
        assert {k: v for k, (v, _) in before.items()} == expected | dict.fromkeys(map(str, never_sent), "unknown")
    run = reconcile(rule)
    missing = set(Finding.objects.filter(run=run, kind="missing").values_list("key", flat=True))
    after = {k: v for k, (v, _) in diagnose(rule, spark).items()}
    if replay_minutes_ago == 0:
        assert missing == set(map(str, never_sent)), missing
        assert after == expected | dict.fromkeys(map(str, never_sent), "never-produced"), after
        return
    assert missing == set(), missing
    assert after == expected | dict.fromkeys(map(str, never_sent), "unknown"), after
    stamp = plain.delivered[1001]
    assert any(f"{plain.topic}/2@{stamp[1]} carries the timestamp" in w for w in run.warnings), run.warnings


def test_a_row_updated_since_its_record_was_deleted_is_not_called_never_produced(
    plain: PlainPipeline, kafka_admin: AdminClient, make_topic
) -> None:
    """The rule's age column is updated_at, the binding's created column created_at. Ticket 1
    was created three hours ago, its record produced then and deleted since (delete_records,
    standing in for retention); its row was touched 20 minutes ago. The topic holds everything
    since well after the row's update, not since the row was created: the record may have been
    (and was) produced and deleted."""
    with psycopg.connect(plain.source_url, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE {plain.table} ADD COLUMN updated_at timestamptz")
        conn.execute(
            f"INSERT INTO {plain.table} (ticket_id, created_at, updated_at, status) "
            "VALUES (1, now() - interval '3 hours', now() - interval '20 minutes', 'NEW')"
        )
    plain.produce(0, 1, minutes_ago=180)
    plain.produce(0, 2, minutes_ago=60)
    delete_records(kafka_admin, [TopicPartition(plain.topic, 0, plain.delivered[2][1])])
    # Ground truth: ticket 1 was delivered and the topic no longer holds it.
    assert plain.delivered[1] == (0, 0) and set(plain.topic_now().values()) == {2}
    rule = rule_for(plain)
    StuckRule.objects.filter(pk=rule.pk).update(age_column="updated_at")
    rule.refresh_from_db()
    empty_ledger = make_topic("_audit.producer-ledger")

    result = diagnose_rule(
        rule,
        DiagnosisOptions(engine="python", producer_ledger_topic=empty_ledger, consumer_ledger_topic=empty_ledger),
    )

    verdicts = {i.row.key: (i.diagnosis.verdict, i.diagnosis.reason) for i in result.items}
    assert set(verdicts) == {"1"} and verdicts["1"][0] == "unknown", verdicts
