"""A probed producer killed (-9) between two ledger flushes: the record it sent last has no
ledger trace (contract v2: its send; contract v1: its delivery report). Once retention deletes that record, the ledger's silence about its
key must not be read as "never produced".

Ground truth comes from the killed producer's delivery report (printed before it was killed),
a full read of the topic and the ledger, and the table; never from the auditor.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import psycopg
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from auditor.lab.cluster import delete_records
from auditor.pipelines.models import Binding, Cluster, SourceDatabase, StuckRule
from auditor.probes import AuditedProducer, AuditedProducerV1, ProducerBatch, ProducerKeys, decode_ledger_records
from auditor.stuck.service import DiagnosisOptions, diagnose_rule
from spark_jobs.kafka_offsets import partition_offsets, topic_partitions
from tests.support.clock import shared_clock_slack
from tests.support.demo import read_topic
from tests.support.killed_producer import audit_value, send_untraced_and_kill, start_ledgered_session
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


# A compacted topic whose cleaner removes a superseded record within seconds (a segment closes
# after 1 s; any dirt is worth a pass).
CLEANED_AT_ONCE = {"cleanup.policy": "compact", "segment.ms": "1000", "min.cleanable.dirty.ratio": "0.01"}


class Killed(NamedTuple):
    """One killed session's topics and table, and what it told before it died."""

    topic: str
    ledger: str
    clients: str
    consumer_ledger: str
    table: str
    session: str
    delivered: dict[str, Any] | None


@pytest.fixture(scope="module")
def killed(kafka_bootstrap: str, make_module_topic: Callable[..., str]) -> Iterator[dict[str, Killed]]:
    """The three tests' sessions, each with its own topics and table: all started at once, so
    that the clock margin each must run before its ledger speaks for ticket 2's row is waited
    once (shortened for the module's tests by shared_clock_slack: one machine's clock)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield from _killed(kafka_bootstrap, make_module_topic, shared_clock_slack(monkeypatch))


def _killed(
    kafka_bootstrap: str, make_module_topic: Callable[..., str], speaks_after_s: float
) -> Iterator[dict[str, Killed]]:
    url = os.environ["SOURCE_DATABASE_URL"]
    scenarios: dict[str, dict[str, Any]] = {
        "v2": {"topic": make_module_topic("killed")},
        "v1": {"topic": make_module_topic("killed-v1"), "v1": True},
        "compacted": {"topic": make_module_topic("killed-compacted", config=CLEANED_AT_ONCE), "record_key": "cust-1"},
    }
    tables = {name: f"killed_{uuid.uuid4().hex[:10]}" for name in scenarios}
    running: dict[str, Any] = {}
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            for table in tables.values():
                conn.execute(
                    f"CREATE TABLE {table} (ticket_id bigint PRIMARY KEY, created_at timestamptz, status text)"
                )
        for scenario in scenarios.values():
            scenario |= {"ledger": make_module_topic("pledger"), "clients": make_module_topic("clients")}
            scenario["consumer_ledger"] = make_module_topic("cledger")
        for name, s in scenarios.items():
            running[name] = start_ledgered_session(
                kafka_bootstrap,
                s["topic"],
                s["ledger"],
                s["clients"],
                record_key=s.get("record_key"),
                v1=s.get("v1", False),
            )
        sessions = {name: send_untraced_and_kill(running.pop(name), tables[name], speaks_after_s) for name in scenarios}
        yield {
            name: Killed(s["topic"], s["ledger"], s["clients"], s["consumer_ledger"], tables[name], *sessions[name])
            for name, s in scenarios.items()
        }
    finally:
        for left in running.values():  # started, never sent: an earlier one failed
            left.child.kill()
            left.child.wait(30)
        with psycopg.connect(url, autocommit=True) as conn:
            for table in tables.values():
                conn.execute(f"DROP TABLE IF EXISTS {table}")


def _rule(bootstrap: str, topic: str, table: str, record_key: str = "key") -> StuckRule:
    suffix = uuid.uuid4().hex[:8]
    binding = Binding.objects.create(
        name=f"killed-{suffix}",
        cluster=Cluster.objects.create(name=f"killed-{suffix}", bootstrap_servers=bootstrap),
        topic=topic,
        source=SourceDatabase.objects.create(name=f"killed-{suffix}", url="${SOURCE_DATABASE_URL}"),
        table=table,
        key_column="ticket_id",
        record_key=record_key,
        created_column="created_at",
        consumer_groups=[f"g-{suffix}"],
    )
    return StuckRule.objects.create(
        name=f"killed-{suffix}",
        binding=binding,
        status_column="status",
        stuck_values=["NEW"],
        age_column="created_at",
        older_than_seconds=0,
    )


def _diagnose_with_both_engines(
    rule: StuckRule, spark: Any, ledger: str, clients: str, consumer_ledger: str
) -> dict[str, tuple[str, str]]:
    """Per stuck key, (verdict, reason) of the Python engine, checked equal to the Spark one's."""
    results = [
        diagnose_rule(
            rule,
            DiagnosisOptions(
                engine=engine,
                spark=spark,
                producer_ledger_topic=ledger,
                consumer_ledger_topic=consumer_ledger,
                clients_topic=clients,
                use_index=False,
            ),
        )
        for engine in ("python", "spark")
    ]
    by_python, by_spark = ({i.row.key: (i.diagnosis.verdict, i.diagnosis.reason) for i in r.items} for r in results)
    assert by_spark == by_python
    return by_python


def test_a_record_a_killed_v2_producer_sent_after_its_last_ledger_flush_is_unknown_once_deleted_not_never_produced(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    killed: dict[str, Killed],
    spark: Any,
    settings: Any,
    tmp_path: Path,
) -> None:
    """The session runs past the clock margin (ticket 1 ledgered by flush()), ticket 2's row
    is created, the session sends its record, the broker acks it, and the session is killed
    before its next ledger flush. A later probed session sends ticket 3 and closes; retention
    (delete_records) takes ticket 2's record. The ledger is complete since before the row was
    created and names no ticket 2: read at its word, ticket 2 was never produced."""
    settings.RECONCILE_STATE_DIR = str(tmp_path / "state")
    topic, ledger, clients, consumer_ledger, tickets_table, session, delivered = killed["v2"]

    later = AuditedProducer({"bootstrap.servers": kafka_bootstrap}, ledger_topic=ledger, clients_topic=clients)
    later.produce(topic, b"{}", b"3")
    assert later.close(30) == 0

    # Ground truth: the broker wrote ticket 2's record (its delivery report), the ledger
    # names no ticket 2 (the session died before flushing it), retention takes the record.
    assert delivered is not None and delivered["key"] == "2" and delivered["error"] is None, delivered
    ledgered, bad = decode_ledger_records(r.value for r in read_topic(kafka_bootstrap, ledger))
    assert not bad
    named = {k for r in ledgered if isinstance(r, ProducerKeys) for run in r.runs for k in run.keys}
    assert named == {"1", "3"}, named
    delete_records(kafka_admin, [TopicPartition(topic, delivered["partition"], delivered["offset"] + 1)])
    assert [r.key for r in read_topic(kafka_bootstrap, topic)] == ["3"]

    rule = _rule(kafka_bootstrap, topic, tickets_table)
    by_python = _diagnose_with_both_engines(rule, spark, ledger, clients, consumer_ledger)
    verdict, reason = by_python["2"]
    assert verdict == "unknown", by_python
    assert f"producer session {session} ledgered nothing after" in reason, reason


def test_a_record_a_killed_v1_producer_delivered_after_its_last_ledger_flush_is_unknown_once_deleted_not_never_produced(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    killed: dict[str, Killed],
    spark: Any,
    settings: Any,
    tmp_path: Path,
) -> None:
    """The same with a contract-v1 producer (AuditedProducerV1), which ledgers delivery reports
    at its background flush: the session runs past the clock margin (ticket 1 ledgered by
    flush()), ticket 2's row is created, the session sends its record, the broker acks it and
    the report is served, and the session is killed before its next ledger flush. A later v1
    session sends ticket 3 and closes; retention (delete_records) takes ticket 2's record. The
    ledger is complete since before the row was created and names no ticket 2: read at its word,
    ticket 2 was never produced."""
    settings.RECONCILE_STATE_DIR = str(tmp_path / "state")
    topic, ledger, clients, consumer_ledger, tickets_table, session, delivered = killed["v1"]

    later = AuditedProducerV1({"bootstrap.servers": kafka_bootstrap}, ledger_topic=ledger, clients_topic=clients)
    later.produce(topic, b"{}", b"3")
    assert later.close(30) == 0

    # Ground truth: the broker wrote ticket 2's record (its delivery report), the ledger names
    # no ticket 2 (the session died before flushing its report), retention takes the record.
    assert delivered is not None and delivered["key"] == "2" and delivered["error"] is None, delivered
    ledgered, bad = decode_ledger_records(r.value for r in read_topic(kafka_bootstrap, ledger))
    assert not bad
    named = {e.audit_id for r in ledgered if isinstance(r, ProducerBatch) for e in r.entries}
    assert named == {"1", "3"}, named
    delete_records(kafka_admin, [TopicPartition(topic, delivered["partition"], delivered["offset"] + 1)])
    assert [r.key for r in read_topic(kafka_bootstrap, topic)] == ["3"]

    by_python = _diagnose_with_both_engines(
        _rule(kafka_bootstrap, topic, tickets_table), spark, ledger, clients, consumer_ledger
    )
    verdict, reason = by_python["2"]
    # The old code: "no producer-ledger entry for this key since the row was created (the ledger
    # ... is complete since then ...)" (never-produced): it counted v2 sessions only.
    assert verdict == "unknown", by_python
    assert f"producer session {session} ledgered nothing after" in reason, reason


def test_a_record_a_killed_v2_producer_sent_untraced_and_the_cleaner_removed_is_unknown_not_never_produced(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    killed: dict[str, Killed],
    spark: Any,
    settings: Any,
    tmp_path: Path,
) -> None:
    """A compacted topic whose records all have one record key (a customer's), each carrying its
    ticket in its value (the binding's record_key a JSON path). The v2 session runs past the
    clock margin (ticket 1 ledgered by flush()), ticket 2's row is created, the session sends
    its record, the broker acks it, and the session is killed before its next ledger flush. A
    later probed session sends ticket 3 with the same record key, and the log cleaner removes
    ticket 2's record. Nothing was deleted by retention: the topic holds everything produced
    since the row was created, and the ledger, read at its word, says ticket 2 was never
    produced."""
    settings.RECONCILE_STATE_DIR = str(tmp_path / "state")
    topic, ledger, clients, consumer_ledger, tickets_table, session, delivered = killed["compacted"]

    later = AuditedProducer(
        {"bootstrap.servers": kafka_bootstrap}, ledger_topic=ledger, clients_topic=clients, key_fn=audit_value
    )
    try:
        later.produce(topic, json.dumps({"ticket_id": "3"}).encode(), b"cust-1")
        assert later.flush(30) == 0

        def cleaned() -> bool:
            # one more record rolls the segment past segment.ms and dirties the log again
            time.sleep(1.1)
            later.produce(topic, json.dumps({"ticket_id": "filler"}).encode(), b"filler")
            assert later.flush(30) == 0
            return all(json.loads(r.value or b"{}").get("ticket_id") != "2" for r in read_topic(kafka_bootstrap, topic))

        wait_until(cleaned, 120, f"the log cleaner to remove ticket 2's record from {topic}")
    finally:
        assert later.close(30) == 0

    # Ground truth: the broker wrote ticket 2's record (its delivery report), the ledger names
    # no ticket 2 (the session died before flushing it), and the topic no longer holds it though
    # it starts at offset 0 (nothing deleted by retention): the cleaner removed it.
    assert delivered is not None and delivered["key"] == "2" and delivered["error"] is None, delivered
    ledgered, bad = decode_ledger_records(r.value for r in read_topic(kafka_bootstrap, ledger))
    assert not bad
    named = {k for r in ledgered if isinstance(r, ProducerKeys) for run in r.runs for k in run.keys}
    assert "2" not in named and {"1", "3"} <= named, named
    remaining = read_topic(kafka_bootstrap, topic)
    assert {json.loads(r.value or b"{}").get("ticket_id") for r in remaining} >= {"3"}
    assert "2" not in {json.loads(r.value or b"{}").get("ticket_id") for r in remaining}
    assert [o.low for o in partition_offsets(kafka_admin, topic, topic_partitions(kafka_admin, topic)).values()] == [0]
    with psycopg.connect(os.environ["SOURCE_DATABASE_URL"]) as conn:
        assert conn.execute(f"SELECT status FROM {tickets_table} WHERE ticket_id = 2").fetchone() == ("NEW",)

    rule = _rule(kafka_bootstrap, topic, tickets_table, record_key="json:$.ticket_id")
    by_python = _diagnose_with_both_engines(rule, spark, ledger, clients, consumer_ledger)
    verdict, reason = by_python["2"]
    # The old code: "no record with this key in ..., which still holds everything produced since
    # before the row was created, and no producer-ledger entry" (never-produced).
    assert verdict == "unknown", by_python
    assert f"producer session {session} ledgered nothing after" in reason, reason
    assert "compacted away" in reason, reason
