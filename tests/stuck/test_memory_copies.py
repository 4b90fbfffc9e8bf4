"""Stuck verdicts from the auditor's memory when runs saw more than one record with the key,
or saw it in a topic since deleted and created again.

Records come from a plain producer (no audit headers, no producer ledger); real
reconciliation runs read them and write the state the verdicts recall. Ground truth comes
from the producer's delivery reports, what the consumer observed (the records it polled and
processed, the offsets it committed), a full read of the topic and the table, never from the
auditor.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from auditor.lab.cluster import delete_records
from auditor.pipelines.models import Binding
from auditor.probes.consumer import AuditedConsumer
from auditor.reconcile.memory import recall
from auditor.stuck.evidence import StuckRow
from auditor.stuck.kafka_view import read_cluster_view
from auditor.stuck.verdicts import diagnose as verdict_of
from spark_jobs.kafka_offsets import topic_id
from tests.support.kafka_reads import process_first
from tests.support.plain import PlainPipeline, diagnose, reconcile, rule_for
from tests.support.topics import create_again

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def test_an_item_whose_re_sent_record_was_processed_is_processed_not_updated_though_its_first_record_expired(
    plain: PlainPipeline, kafka_admin: AdminClient, make_topic, spark
) -> None:
    """Ticket 1's record went to partition 0, which the group never got to (it committed offset
    0 there); the application sent it again, to partition 1, where a probed consumer processed
    it and committed past it, and the row's update was lost. A run saw both records, then
    retention (delete_records) took both. The first record alone says `expired`; the item
    reached the consumer and was processed."""
    ledger, clients = make_topic("_audit.consumer-ledger"), make_topic("_audit.clients")
    plain.insert(1)
    plain.produce(0, 1)
    first = plain.delivered[1]
    plain.produce(1, 1)  # the application's re-send
    resent = plain.delivered[1]

    consumer = AuditedConsumer(
        {"bootstrap.servers": plain.bootstrap, "group.id": plain.group, "enable.auto.commit": False},
        ledger_topic=ledger,
        clients_topic=clients,
    )
    try:
        msg = process_first(consumer, plain.topic, 1)  # processed; the row's update is then lost
        processed = [(msg.partition(), msg.offset(), int(msg.key()))]
        consumer.commit(offsets=[TopicPartition(plain.topic, 0, 0)], asynchronous=False)  # never read partition 0
    finally:
        consumer.close()
    rule = rule_for(plain)
    Binding.objects.filter(pk=rule.binding.pk).update(consumer_ledger_topic=ledger)
    rule.refresh_from_db()
    run = reconcile(rule)
    delete_records(
        kafka_admin, [TopicPartition(plain.topic, 0, first[1] + 1), TopicPartition(plain.topic, 1, resent[1] + 1)]
    )

    # Ground truth: both records delivered, and gone now; the consumer processed the re-sent one
    # and committed past it, and never got to the first; the row is still NEW.
    assert first[0] == 0 and resent[0] == 1
    assert processed == [(*resent, 1)]
    check = Consumer({"bootstrap.servers": plain.bootstrap, "group.id": plain.group})
    try:
        committed = check.committed([TopicPartition(plain.topic, p) for p in (0, 1)], timeout=10)
    finally:
        check.close()
    assert [(c.partition, c.offset) for c in committed] == [(0, first[1]), (1, resent[1] + 1)]
    assert plain.topic_now() == {}
    with psycopg.connect(plain.source_url) as conn:
        assert conn.execute(f"SELECT status FROM {plain.table} WHERE ticket_id = 1").fetchone() == ("NEW",)

    verdicts = diagnose(rule, spark, consumer_ledger=ledger)
    assert {k: v for k, (v, _) in verdicts.items()} == {"1": "processed-not-updated"}, verdicts
    assert f"reconciliation run {run.job_run_id}" in verdicts["1"][1], verdicts


def test_an_item_whose_first_record_was_processed_is_not_skipped_because_its_re_sent_record_was_committed_past(
    plain: PlainPipeline, kafka_admin: AdminClient, make_topic, spark
) -> None:
    """Ticket 1's record went to partition 1, where a probed consumer processed it and committed
    past it; the row's update was lost. A run saw it, then retention (delete_records) took it.
    The application sent ticket 1 again, to partition 0, and the group committed past that copy
    without processing it (the application had processed the item already). The copy in the
    topic alone says `skipped`: the item reached its consumer and was processed."""
    ledger, clients = make_topic("_audit.consumer-ledger"), make_topic("_audit.clients")
    plain.insert(1)
    plain.insert(2, status="DONE")
    plain.produce(1, 1)
    first = plain.delivered[1]
    plain.produce(0, 2)
    consumer = AuditedConsumer(
        {"bootstrap.servers": plain.bootstrap, "group.id": plain.group, "enable.auto.commit": False},
        ledger_topic=ledger,
        clients_topic=clients,
    )
    try:
        processed = [
            (m.partition(), m.offset(), int(m.key())) for m in (process_first(consumer, plain.topic, p) for p in (1, 0))
        ]
    finally:
        consumer.close()
    rule = rule_for(plain)
    Binding.objects.filter(pk=rule.binding.pk).update(consumer_ledger_topic=ledger)
    rule.refresh_from_db()
    run = reconcile(rule)
    delete_records(kafka_admin, [TopicPartition(plain.topic, 1, first[1] + 1)])
    plain.produce(0, 1)  # the application's re-send
    resent = plain.delivered[1]
    # the probed application commits past the copy (a plain client's commit would name no probed
    # session: `unknown` since stop 72, a consumer without the probe may have processed it)
    passer = AuditedConsumer(
        {"bootstrap.servers": plain.bootstrap, "group.id": plain.group, "enable.auto.commit": False},
        ledger_topic=ledger,
        clients_topic=clients,
    )
    try:
        passer.commit(offsets=[TopicPartition(plain.topic, 0, resent[1] + 1)], asynchronous=False)
        committed = passer.committed([TopicPartition(plain.topic, p) for p in (0, 1)], timeout=10)
    finally:
        passer.close()

    # Ground truth: the consumer processed ticket 1's first record (and ticket 2's), which is
    # gone now; the re-sent one is in the topic and committed past; the row is still NEW.
    assert first == (1, 0) and resent == (0, 1)
    assert processed == [(1, 0, 1), (0, 0, 2)]
    assert [(c.partition, c.offset) for c in committed] == [(0, 2), (1, 1)]
    assert plain.topic_now() == {(0, 0): 2, (0, 1): 1}
    with psycopg.connect(plain.source_url) as conn:
        assert conn.execute(f"SELECT status FROM {plain.table} WHERE ticket_id = 1").fetchone() == ("NEW",)

    verdicts = diagnose(rule, spark, consumer_ledger=ledger)
    assert {k: v for k, (v, _) in verdicts.items()} == {"1": "processed-not-updated"}, verdicts  # old code: skipped
    reason = verdicts["1"][1]
    assert (
        f"reconciliation run {run.job_run_id}" in reason
        and "a later record with this key is in the topic (skipped" in (reason)
    ), reason


def test_a_record_seen_in_a_topic_since_created_again_is_not_broker_lost_when_its_id_cannot_be_read(
    plain: PlainPipeline, kafka_admin: AdminClient, spark
) -> None:
    """Tickets 1 and 2 were written at offsets 0 and 1 of partition 0 and a run saw them; an
    operator deleted the topic and created it again, and tickets 3 and 1000 took offsets 0 and
    1; a second run found the topic created again (a rebuild that keeps what the first saw). A
    diagnosis that cannot read the topic's id (DescribeTopics failing) cannot see the
    re-creation itself: the broker lost nothing, and the state says the old records were the
    deleted topic's."""
    plain.insert(1, 2, 3)
    plain.insert(1000, status="DONE")
    plain.produce(0, 1, 2)
    seen_at = {t: plain.delivered[t] for t in (1, 2)}
    rule = rule_for(plain)
    reconcile(rule)
    id_before = topic_id(kafka_admin, plain.topic)

    create_again(plain.bootstrap, plain.topic, partitions=2)
    plain.produce(0, 3, 1000, minutes_ago=0)
    rebuild = reconcile(rule)
    assert rebuild.mode == "rebuild" and any("deleted and created again" in w for w in rebuild.warnings), (
        rebuild.mode,
        rebuild.warnings,
    )

    # Ground truth: another topic under the name (its id), whose records hold the offsets the
    # deleted one's did; the broker lost nothing.
    assert topic_id(kafka_admin, plain.topic) not in (id_before, None)
    now = plain.topic_now()
    assert now == {(0, 0): 3, (0, 1): 1000} and set(seen_at.values()) == {(0, 0), (0, 1)}

    # The whole diagnosis reads the id and sees the re-creation.
    by_diagnosis = diagnose(rule, spark)
    assert {k: v for k, (v, _) in by_diagnosis.items()} == {"1": "unknown", "2": "unknown", "3": "waiting"}

    # The verdicts on what the diagnosis reads when DescribeTopics fails: no id, and why (no
    # real fault makes that call fail while the others succeed), with the state the runs wrote.
    no_ledger = f"_audit.none-{uuid.uuid4().hex[:8]}"
    view, _ = read_cluster_view(rule.binding.cluster.client_config(), plain.topic, [plain.group], no_ledger, no_ledger)
    assert view.kafka_error is None and view.partitions[0].low == 0 and view.partitions[0].high == 2
    view.topic_id = None
    view.topic_id_error = f"topic {plain.topic!r} cannot be described: timed out"
    memory = recall(rule.binding, ["1", "2"])
    for ticket in ("1", "2"):
        d = verdict_of(StuckRow(ticket, "NEW", 3600.0), [], [], {}, view, memory)
        assert d.verdict == "unknown" and "deleted and created again" in d.reason, (ticket, d.reason)
