"""A source database whose clock runs ahead of Kafka's (stop 70's review): its rows' created
times read later than the records produced from them, so a row whose record retention deleted
looked created after the oldest record left, and was called never-produced.

The database's clock is made to run ahead for the auditor's session only: a schema searched
before pg_catalog holds now() and clock_timestamp() 20 minutes ahead, which the rows are
stamped by and the auditor reads (real PostgreSQL and Kafka, the Python engine). Ground truth
comes from the producer's delivery reports, a full read of the topic and the table.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from urllib.parse import quote

import psycopg
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from auditor.lab.cluster import delete_records
from auditor.stuck.service import DiagnosisOptions, diagnose_rule
from auditor.stuck.source import read_source_clock
from tests.support.plain import PlainPipeline, rule_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

AHEAD = timedelta(minutes=20)


@pytest.fixture
def ahead_url(plain: PlainPipeline, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The source database's URL for a session whose clock runs AHEAD of the real one."""
    schema = f"skew_{uuid.uuid4().hex[:8]}"
    seconds = int(AHEAD.total_seconds())
    with psycopg.connect(plain.source_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        for name, volatility in (("now", "STABLE"), ("clock_timestamp", "VOLATILE")):
            conn.execute(
                f"CREATE FUNCTION {schema}.{name}() RETURNS timestamptz LANGUAGE sql {volatility} "
                f"AS $$ SELECT pg_catalog.{name}() + make_interval(secs => {seconds}) $$"
            )
    separator = "&" if "?" in plain.source_url else "?"
    url = f"{plain.source_url}{separator}options={quote(f'-csearch_path={schema},pg_catalog,public')}"
    monkeypatch.setenv("SKEWED_SOURCE_URL", url)
    yield url
    with psycopg.connect(plain.source_url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def test_a_row_stamped_by_a_clock_ahead_of_kafkas_whose_record_was_deleted_is_not_never_produced(
    plain: PlainPipeline, ahead_url: str, kafka_admin: AdminClient, make_topic: Callable[..., str]
) -> None:
    with psycopg.connect(ahead_url, autocommit=True) as conn:  # the application's inserts, stamped by its clock
        for ticket in (1, 2):
            conn.execute(
                f"INSERT INTO {plain.table} (ticket_id, created_at, status) VALUES (%s, now(), 'NEW')", [ticket]
            )
    plain.produce(0, 1, 2, minutes_ago=0)  # produced at once, stamped by the producer's (true) clock
    delete_records(kafka_admin, [TopicPartition(plain.topic, 0, plain.delivered[1][1] + 1)])  # retention's stand-in

    # Ground truth: both delivered (the reports), 1 gone and 2 left (a full read), and the rows
    # stamped 20 minutes after the records were (the table, against the reports' stamps).
    assert set(plain.delivered) == {1, 2} and set(plain.topic_now().values()) == {2}
    with psycopg.connect(ahead_url, autocommit=True) as conn:
        row = conn.execute(f"SELECT min(created_at) - pg_catalog.now() FROM {plain.table}").fetchone()
    assert row is not None and row[0] > AHEAD - timedelta(minutes=1)
    assert read_source_clock(ahead_url).ahead_ms > (AHEAD - timedelta(seconds=5)).total_seconds() * 1000

    rule = rule_for(plain)
    rule.binding.source.url = "${SKEWED_SOURCE_URL}"
    rule.binding.source.save()
    rule.older_than_seconds = 0  # the rows are a moment old by the database's own clock
    rule.save()
    # The producer ledger is readable and names nothing of the topic (its producer is not probed,
    # other pipelines' are): without one, nothing is ever never-produced on the topic's word.
    ledger = make_topic("ledger")
    no_ledger = f"_audit.none-{uuid.uuid4().hex[:8]}"
    options = DiagnosisOptions(engine="python", producer_ledger_topic=ledger, consumer_ledger_topic=no_ledger)
    result = diagnose_rule(rule, options)

    verdicts = {i.row.key: i.diagnosis for i in result.items}
    assert {k: d.verdict for k, d in verdicts.items()} == {"1": "unknown", "2": "waiting"}, {
        k: d.reason for k, d in verdicts.items()
    }  # the old rule: 1 never-produced
    assert "no longer holds records that old" in verdicts["1"].reason, verdicts["1"].reason
    assert verdicts["1"].evidence["source_clock_ahead_ms"] > 1190_000
    assert any("the source database's clock is 1200" in n and "ahead of the auditor's" in n for n in result.notes), (
        result.notes
    )
