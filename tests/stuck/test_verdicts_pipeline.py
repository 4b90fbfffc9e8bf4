"""Each failure of the demo ticket pipeline gets its own verdict, on the specific tickets it
affected (real Kafka, PostgreSQL and Spark); healthy tickets are never reported.

The ticket topic has one partition unless said otherwise, so ``ids[i]`` sits at offset ``i``.
"""

from __future__ import annotations

import pytest

from auditor.demo.options import DeliveryMode, Faults

from .conftest import StuckSetup, diagnose_both, verdicts_of

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def test_it_says_never_produced_for_dropped_sends(stuck: StuckSetup, spark) -> None:
    ids = stuck.pipeline.produce(9, Faults(drop_every=3))
    dropped = [ids[2], ids[5], ids[8]]
    stuck.pipeline.consumer(DeliveryMode.AT_LEAST_ONCE).run(max_records=6, timeout_s=60)

    result = diagnose_both(stuck, spark)

    assert verdicts_of(result) == dict.fromkeys(dropped, "never-produced")


def test_it_says_skipped_when_an_at_most_once_consumer_crashed_after_committing(stuck: StuckSetup, spark) -> None:
    pipeline = stuck.pipeline
    ids = pipeline.produce(20)
    crashed = pipeline.consumer(DeliveryMode.AT_MOST_ONCE, Faults(crash_after=5)).run(max_records=20, timeout_s=60)
    assert crashed.crashed and pipeline.committed_offsets() == {0: 10}
    pipeline.consumer(DeliveryMode.AT_MOST_ONCE).run(max_records=10, timeout_s=60)

    result = diagnose_both(stuck, spark)

    assert verdicts_of(result) == dict.fromkeys(ids[5:10], "skipped")
    item = next(i for i in result.items if i.row.key == ids[7])
    evidence = item.diagnosis.evidence
    assert (evidence["partition"], evidence["offset"]) == (0, 7)
    assert evidence["records"][0]["state"] == "committed"
    assert evidence["records"][0]["session"] is not None and evidence["records"][0]["seq"] == 7
    assert [(g["group"], g["committed"], g["outcome"]) for g in evidence["groups"]] == [(pipeline.group, 20, "skipped")]
    assert evidence["log"]["high_watermark"] == 20 and evidence["log"]["log_start"] == 0
    assert [e["status"] for e in evidence["ledger"]] == ["acked"]
    assert "committed before processing" in item.diagnosis.reason


def test_it_says_produce_failed_when_the_ledger_saw_the_send_fail(stuck: StuckSetup, spark, kafka_admin) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    pipeline = stuck.pipeline
    resource = ConfigResource(
        ResourceType.TOPIC,
        pipeline.topic,
        incremental_configs=[ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET)],
    )
    kafka_admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    with pipeline.producer() as producer:
        # One batch each: the broker rejects a whole batch that is too large.
        small = producer.create_ticket()
        producer.flush(30)
        big = producer.create_ticket({"subject": "attachment inline", "blob": "x" * 5000})
        producer.flush(30)
        last = producer.create_ticket()
        producer.flush(30)
    assert producer.stats.failed_ids == [big.ticket_id]
    pipeline.consumer(DeliveryMode.AT_LEAST_ONCE).run(max_records=2, timeout_s=60)
    assert {t: s for t, s in pipeline.statuses().items() if s == "NEW"} == {big.ticket_id: "NEW"}
    assert small.ticket_id != last.ticket_id

    result = diagnose_both(stuck, spark)

    assert verdicts_of(result) == {big.ticket_id: "produce-failed"}
    (item,) = result.items
    (entry,) = item.diagnosis.evidence["ledger"]
    assert (entry["status"], entry["persisted"]) == ("failed", "not")
    assert "too large" in entry["error"].lower() and "too large" in item.diagnosis.reason.lower()


def test_it_says_waiting_with_the_lag_when_the_consumer_stopped(make_stuck, spark) -> None:
    setup = make_stuck(partitions=1)
    pipeline = setup.pipeline
    ids = pipeline.produce(10)
    pipeline.consumer(DeliveryMode.AT_LEAST_ONCE).run(max_records=4, timeout_s=60)
    assert pipeline.committed_offsets() == {0: 4}

    result = diagnose_both(setup, spark)

    assert verdicts_of(result) == dict.fromkeys(ids[4:], "waiting")
    item = next(i for i in result.items if i.row.key == ids[6])
    (group,) = item.diagnosis.evidence["groups"]
    assert (group["committed"], group["lag_records"], group["records_ahead"], group["members"]) == (4, 6, 2, 0)
    assert group["lag_seconds"] >= 0 and group["waiting_seconds"] >= 0
    assert "no active members" in item.diagnosis.reason and "partition lag 6 record(s)" in item.diagnosis.reason


def test_it_says_waiting_on_every_partition_of_a_group_that_never_committed(make_stuck, spark) -> None:
    setup = make_stuck(partitions=3)
    ids = setup.pipeline.produce(12)

    result = diagnose_both(setup, spark)

    assert verdicts_of(result) == dict.fromkeys(ids, "waiting")
    partitions = {i.diagnosis.evidence["partition"] for i in result.items}
    assert len(partitions) > 1
    assert all(i.diagnosis.evidence["groups"][0]["committed"] is None for i in result.items)


def test_it_says_processed_not_updated_when_the_update_failed_after_processing(stuck: StuckSetup, spark) -> None:
    pipeline = stuck.pipeline
    ids = pipeline.produce(10)
    pipeline.consumer(DeliveryMode.AT_LEAST_ONCE, Faults(fail_update_every=4)).run(max_records=10, timeout_s=60)

    result = diagnose_both(stuck, spark)

    assert verdicts_of(result) == {ids[3]: "processed-not-updated", ids[7]: "processed-not-updated"}
    item = next(i for i in result.items if i.row.key == ids[3])
    (group,) = item.diagnosis.evidence["groups"]
    assert group["processed"]["consumer_session"] and group["committed"] == 10


def test_it_says_aborted_for_a_ticket_only_in_an_aborted_transaction(stuck: StuckSetup, spark) -> None:
    from auditor.demo.producer import ticket_value
    from auditor.probes import AuditedProducer

    pipeline = stuck.pipeline
    with pipeline.store() as store:
        tickets = [store.insert_ticket({"subject": f"t{i}"}) for i in range(3)]
    producer = AuditedProducer(
        {"bootstrap.servers": pipeline.bootstrap, "transactional.id": f"stuck-tx-{pipeline.group}"},
        ledger_topic=pipeline.probes.producer_ledger,
        clients_topic=pipeline.probes.clients,
        ledger_flush_interval_s=0.2,
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for ticket in tickets[:2]:
        producer.produce(pipeline.topic, ticket_value(ticket), ticket.ticket_id.encode())
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(pipeline.topic, ticket_value(tickets[2]), tickets[2].ticket_id.encode())
    producer.flush(30)  # in the log (acked), then the transaction aborts
    producer.abort_transaction(30)
    producer.close(30)
    pipeline.consumer(DeliveryMode.AT_LEAST_ONCE).run(max_records=2, idle_timeout_s=3, timeout_s=60)

    result = diagnose_both(stuck, spark)

    assert verdicts_of(result) == {tickets[2].ticket_id: "aborted"}
    (item,) = result.items
    assert [r["state"] for r in item.diagnosis.evidence["records"]] == ["aborted"]


def test_it_says_expired_when_records_were_deleted_before_the_group_reached_them(
    stuck: StuckSetup, spark, kafka_admin
) -> None:
    from confluent_kafka import TopicPartition

    pipeline = stuck.pipeline
    ids = pipeline.produce(10)
    pipeline.consumer(DeliveryMode.AT_LEAST_ONCE).run(max_records=2, timeout_s=60)
    assert pipeline.committed_offsets() == {0: 2}
    deleted = kafka_admin.delete_records([TopicPartition(pipeline.topic, 0, 6)])
    for future in deleted.values():
        future.result(timeout=30)
    # The group resumes at the new log start (its committed offset is out of range).
    pipeline.consumer(DeliveryMode.AT_LEAST_ONCE).run(max_records=4, timeout_s=60)
    assert pipeline.committed_offsets() == {0: 10}

    result = diagnose_both(stuck, spark)

    assert verdicts_of(result) == dict.fromkeys(ids[2:6], "expired")
    item = next(i for i in result.items if i.row.key == ids[3])
    evidence = item.diagnosis.evidence
    assert evidence["records"] == [] and (evidence["partition"], evidence["offset"]) == (0, 3)
    assert evidence["log"]["log_start"] == 6
    assert [e["status"] for e in evidence["ledger"]] == ["acked"]


def test_it_runs_the_spark_job_in_its_own_process_as_the_worker_does(stuck: StuckSetup) -> None:
    from auditor.stuck.service import diagnose_rule

    pipeline = stuck.pipeline
    ids = pipeline.produce(6, Faults(drop_every=3))
    pipeline.consumer(DeliveryMode.AT_LEAST_ONCE).run(max_records=2, timeout_s=60)

    result = diagnose_rule(stuck.rule, stuck.options("spark"))  # no SparkSession given: a subprocess

    assert result.engine == "spark"
    assert verdicts_of(result) == {
        ids[2]: "never-produced",
        ids[3]: "waiting",
        ids[4]: "waiting",
        ids[5]: "never-produced",
    }
