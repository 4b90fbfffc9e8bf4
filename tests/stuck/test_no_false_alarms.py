"""When the auditor cannot see something, items are `unknown` with the reason, never a failure verdict."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from auditor.demo.options import DeliveryMode, Faults
from auditor.stuck import service
from auditor.stuck.kafka_view import read_cluster_view
from auditor.stuck.service import diagnose_rule
from tests.support.stuck import StuckSetup, make_rule, verdicts_of

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
    assert result.degraded


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
        kafka_admin.delete_records([cut])[cut].result(30)
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
