"""A topic deleted and created again before the auditor first saw its id (stop 70's review):
no stored id to differ from, and every partition of the new topic starts at offset 0, which
used to read as "complete since forever". Records produced before the new topic's first record
may have gone with the deleted one (real Kafka and PostgreSQL, the Python engine).

Ground truth comes from the producers' delivery reports, full reads of the topic before and
after, its ids and the table; never from the auditor.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from auditor.stuck.service import DiagnosisOptions, diagnose_rule
from spark_jobs.kafka_offsets import admin_client, topic_id
from tests.probes.kafka_helpers import read_topic
from tests.support.plain import PlainPipeline, rule_for
from tests.support.stuck import StuckSetup
from tests.support.topics import create_again

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def test_a_row_whose_record_went_with_a_topic_deleted_before_the_auditor_saw_it_is_not_never_produced(
    plain: PlainPipeline, make_topic: Callable[..., str]
) -> None:
    plain.insert(1, 2, 3)  # an hour ago
    plain.produce(0, 1)  # 50 minutes ago, into the first topic
    id_before = topic_id(admin_client(plain.bootstrap), plain.topic)
    create_again(plain.bootstrap, plain.topic, partitions=2)  # nobody audited the first topic
    plain.produce(0, 3, minutes_ago=1)  # the new topic's first record
    plain.insert(4, minutes_ago=0)  # created after it, never sent

    # Ground truth: 1 was delivered (its report), to a topic since replaced (another id); a full
    # read of the new one holds 3 alone; 2 and 4 were never sent.
    assert set(plain.delivered) == {1, 3}
    assert topic_id(admin_client(plain.bootstrap), plain.topic) not in (id_before, None)
    assert set(plain.topic_now().values()) == {3}

    # The producer ledger is readable and names nothing of the topic (its producer is not probed,
    # other pipelines' are): without one, nothing is ever never-produced on the topic's word.
    ledger = make_topic("ledger")
    no_ledger = f"_audit.none-{uuid.uuid4().hex[:8]}"
    options = DiagnosisOptions(engine="python", producer_ledger_topic=ledger, consumer_ledger_topic=no_ledger)
    rule = rule_for(plain)
    rule.older_than_seconds = 0  # 4 was created a moment ago
    rule.save()
    result = diagnose_rule(rule, options)

    verdicts = {i.row.key: i.diagnosis for i in result.items}
    assert {k: d.verdict for k, d in verdicts.items()} == {
        "1": "unknown",  # the old rule: never-produced
        "2": "unknown",  # never sent, but nothing can tell it from 1
        "3": "waiting",
        "4": "never-produced",  # created after the new topic's first record: it holds its record if sent
    }, {k: d.reason for k, d in verdicts.items()}
    for key in ("1", "2"):
        reason = verdicts[key].reason
        assert f"{plain.topic} is known to exist only since" in reason and "first record" in reason, reason


def test_a_v1_ack_of_a_topic_deleted_before_the_auditor_saw_it_is_not_broker_lost(
    make_stuck: Callable[..., StuckSetup],
) -> None:
    stuck = make_stuck(contract=1)
    pipeline = stuck.pipeline
    old = pipeline.produce(3)  # acked at offsets 0-2 of the first topic (contract v1: per key, with offsets)
    before = {(m.partition(), m.offset()): m.key().decode() for m in read_topic(pipeline.topic)}
    assert before == {(0, i): key for i, key in enumerate(old)}
    create_again(pipeline.bootstrap, pipeline.topic, partitions=1)
    new = pipeline.produce(3)  # the same offsets, in the new topic

    # Ground truth: a full read of the new topic holds the new tickets at the old ones' offsets.
    assert {(m.partition(), m.offset()): m.key().decode() for m in read_topic(pipeline.topic)} == {
        (0, i): key for i, key in enumerate(new)
    }

    result = diagnose_rule(stuck.rule, stuck.options("python"))

    verdicts = {i.row.key: i.diagnosis for i in result.items}
    assert {k: d.verdict for k, d in verdicts.items()} == dict.fromkeys(old, "unknown") | dict.fromkeys(
        new, "waiting"
    ), {k: d.reason for k, d in verdicts.items()}  # the old rule: the old tickets broker-lost
    for key in old:
        reason = verdicts[key].reason
        assert f"{pipeline.topic} is known to exist only since" in reason and "acked at" in reason, reason
