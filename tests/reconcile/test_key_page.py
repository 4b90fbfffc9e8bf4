"""A key's page: its records read from Kafka beside its source row, its findings; hostile data escaped."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from django.utils import timezone

from auditor.pipelines.models import StuckRule
from auditor.reconcile.models import Finding, ReconcileRun

pytestmark = [pytest.mark.django_db, pytest.mark.integration]

HOSTILE_KEY = '<script>alert("key")</script>'
HOSTILE_HEADER = b"<svg onload=alert(2)>"
HOSTILE_VALUE = "<img src=x onerror=alert(3)>"


@pytest.fixture
def keyed(make_topic, make_binding, kafka_bootstrap: str, source_database_url: str) -> Iterator[dict[str, Any]]:
    topic = make_topic("rkey", partitions=2)
    table = f"keypage_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id text PRIMARY KEY, created_at timestamptz NOT NULL, title text)")
        conn.execute(
            f"INSERT INTO {table} VALUES ('T-1', now() - interval '2 minutes', '<b>first</b>'), "
            f"(%s, now() - interval '2 minutes', 'hostile row')",
            (HOSTILE_KEY,),
        )
    positions: dict[str, tuple[int, int]] = {}
    producer = Producer({"bootstrap.servers": kafka_bootstrap})

    def send(label: str, ticket: str, partition: int, **extra: str) -> None:
        def delivered(err: Any, msg: Any) -> None:
            assert err is None, err
            positions[label] = (msg.partition(), msg.offset())

        headers = [("audit-pid", b"session-1"), ("audit-seq", str(len(positions)).encode()), ("x-note", HOSTILE_HEADER)]
        value = json.dumps({"ticket_id": ticket, **extra}).encode()
        producer.produce(topic, value=value, partition=partition, headers=headers, on_delivery=delivered)
        assert producer.flush(30) == 0

    send("first", "T-1", 0)
    send("other", "T-2", 0)
    send("again", "T-1", 1)
    send("hostile", HOSTILE_KEY, 1, note=HOSTILE_VALUE)
    binding = make_binding(
        f"kp-{uuid.uuid4().hex[:6]}", topic, f"public.{table}", record_key="json:$.ticket_id", grace_seconds=30
    )
    yield {"binding": binding, "positions": positions, "table": table}
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")


def record_rows(html: str) -> list[str]:
    return [part.split('"', 1)[0] for part in html.split('<tr data-position="')[1:]]


def duplicate_of_t1(binding: Any, at: list[tuple[int, int]]) -> None:
    """A run's duplicate finding of T-1 naming the positions `at`."""
    run = ReconcileRun.objects.create(
        binding=binding, trigger="cli", status=ReconcileRun.OK, finished_at=timezone.now(), counts={"duplicate": 1}
    )
    offsets = [{"partition": p, "offset": o} for p, o in sorted(at)]
    Finding.objects.create(
        run=run,
        binding=binding,
        kind="duplicate",
        key="T-1",
        cause="app-resend",
        partition=offsets[0]["partition"],
        offset=offsets[0]["offset"],
        offsets=offsets,
        session="session-1",
        seq=0,
        evidence={"count": 2},
    )


def test_it_shows_every_record_of_a_key_beside_its_source_row(client_as, keyed) -> None:
    binding, positions = keyed["binding"], keyed["positions"]
    duplicate_of_t1(binding, [positions["first"], positions["again"]])

    response = client_as("viewer").get(f"/reconcile/keys/{binding.name}/T-1/")

    html = response.content.decode()
    assert response.status_code == 200
    assert record_rows(html) == [f"{p}@{o}" for p, o in sorted([positions["first"], positions["again"]])]
    assert "audit-pid: session-1" in html
    assert "&quot;ticket_id&quot;: &quot;T-1&quot;" in html  # the value preview
    assert '<tr><th>title</th><td class="mono">&lt;b&gt;first&lt;/b&gt;</td></tr>' in html  # the source row
    assert 'data-kind="duplicate"' in html and "(current)" in html
    assert "not shown: finding them means scanning the ledger topics" in html
    assert "Scanned each partition" in html


def test_a_remembered_position_that_holds_another_key_now_is_not_shown_as_this_keys(client_as, keyed) -> None:
    binding, positions = keyed["binding"], keyed["positions"]
    # a run saw T-1 at the position T-2's record holds now: as after an unclean leader
    # election truncated the log there and other records were written in its place
    partition, offset = positions["other"]
    duplicate_of_t1(binding, [(partition, offset)])

    html = client_as("viewer").get(f"/reconcile/keys/{binding.name}/T-1/").content.decode()
    text = client_as("viewer").get(f"/reconcile/keys/{binding.name}/T-1/?format=text").content.decode()

    # T-1's own records (found by the scan) and not T-2's
    assert record_rows(html) == [f"{p}@{o}" for p, o in sorted([positions["first"], positions["again"]])]
    note = f"{binding.topic}/{partition}@{offset}: holds a record of another key (T-2) now, not this key&#x27;s"
    assert note in html
    assert f"read at {binding.topic}/{partition}@{offset}" not in text  # the timeline's "in the topic"
    assert f"read at {binding.topic}/{positions['first'][0]}@{positions['first'][1]}" in text


def test_it_escapes_a_hostile_key_its_headers_and_value(client_as, keyed) -> None:
    binding, positions = keyed["binding"], keyed["positions"]

    response = client_as("viewer").get(f"/reconcile/keys/{binding.name}/{quote(HOSTILE_KEY, safe='')}/")

    html = response.content.decode()
    assert response.status_code == 200
    assert record_rows(html) == ["{}@{}".format(*positions["hostile"])]  # found by the scan around its row
    for raw in (HOSTILE_KEY, HOSTILE_HEADER.decode(), HOSTILE_VALUE):
        assert raw not in html
    assert "&lt;script&gt;alert(&quot;key&quot;)&lt;/script&gt;" in html
    assert "x-note: &lt;svg onload=alert(2)&gt;" in html
    assert "&lt;img src=x onerror=alert(3)&gt;" in html
    assert "hostile row" in html


def test_it_says_when_there_is_no_source_row_and_no_record(client_as, keyed) -> None:
    binding = keyed["binding"]
    html = client_as("viewer").get(f"/reconcile/keys/{binding.name}/T-404/").content.decode()
    assert 'id="source-none"' in html and "No record of this key found." in html
    assert record_rows(html) == []


def test_it_puts_where_the_groups_stand_now_into_the_timeline(client_as, keyed, kafka_bootstrap: str) -> None:
    binding, positions = keyed["binding"], keyed["positions"]
    group = f"kp-group-{uuid.uuid4().hex[:6]}"
    (p_first, o_first), (p_again, o_again) = positions["first"], positions["again"]
    # The group went past T-1's first copy (partition 0) and stopped right at its second one.
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.commit(
        offsets=[TopicPartition(binding.topic, p_first, o_first + 1), TopicPartition(binding.topic, p_again, o_again)],
        asynchronous=False,
    )
    consumer.close()
    binding.consumer_groups = [group]
    binding.save(update_fields=["consumer_groups"])

    html = client_as("viewer").get(f"/reconcile/keys/{binding.name}/T-1/").content.decode()

    assert f"group {group} committed {o_first + 1}, past {p_first}@{o_first}" in html
    assert f"group {group} committed {o_again}, not yet past {p_again}@{o_again}" in html
    assert "committed offsets now" in html


def test_it_reads_the_packed_audit_header_of_contract_version_2(client_as, keyed, kafka_bootstrap: str) -> None:
    from auditor.probes import AuditedProducer

    binding = keyed["binding"]
    producer = AuditedProducer(
        {"bootstrap.servers": kafka_bootstrap}, ledger_topic=binding.topic, clients_topic=binding.topic
    )
    producer.produce(binding.topic, json.dumps({"ticket_id": "T-1"}).encode(), b"T-1", partition=0)
    assert producer.flush(30) == 0
    producer.close(30)

    html = client_as("viewer").get(f"/reconcile/keys/{binding.name}/T-1/").content.decode()

    assert len(record_rows(html)) == 3
    assert f"audit: v2 session={producer.session_id} seq=0 ts=" in html


def test_a_record_key_that_is_not_utf8_is_found_as_the_job_names_it(
    client_as, make_topic, make_binding, kafka_bootstrap: str, keyed
) -> None:
    """A record keyed by bytes that are not UTF-8: the job (and the diagnosis) name its key in
    the probes' backslash escapes. Before stop 70 the key page decoded it with U+FFFD, found the
    remembered position holding "another key" (its own record), called the log truncated there,
    and showed no record."""
    from auditor.probes.headers import decode_audit_id

    topic = make_topic("rkeybin", partitions=1)
    raw = b"\xff\xfeT-9"
    key = decode_audit_id(raw)
    assert key == "\\xff\\xfeT-9"
    positions: list[tuple[int, int]] = []

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        positions.append((msg.partition(), msg.offset()))

    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, key=raw, value=b"{}", partition=0, on_delivery=delivered)
    assert producer.flush(30) == 0
    binding = make_binding(f"kpb-{uuid.uuid4().hex[:6]}", topic, f"public.{keyed['table']}", record_key="key")
    run = ReconcileRun.objects.create(
        binding=binding, trigger="cli", status=ReconcileRun.OK, finished_at=timezone.now(), counts={"orphan": 1}
    )
    ((partition, offset),) = positions
    Finding.objects.create(
        run=run, binding=binding, kind="orphan", key=key, partition=partition, offset=offset, evidence={}
    )

    html = client_as("viewer").get(f"/reconcile/keys/{binding.name}/{quote(key, safe='')}/").content.decode()

    assert record_rows(html) == [f"{partition}@{offset}"]
    assert "holds a record of another key" not in html


def test_it_shows_a_source_rows_secret_named_columns_masked(
    client_as, make_topic, make_binding, source_database_url: str
) -> None:
    """The key page reaches every viewer: a column named like a secret (is_secret_key) is shown
    as ****, every other column as it is."""
    topic = make_topic("rkeysecret", partitions=1)
    table = f"keysecret_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE {table} (id text PRIMARY KEY, created_at timestamptz NOT NULL, title text, "
            "password text, api_token text, secret text)"
        )
        conn.execute(
            f"INSERT INTO {table} VALUES ('U-1', now(), 'plain title', 'pbkdf2-hunter2-hash', 'tok-4711-abc', NULL)"
        )
    try:
        binding = make_binding(f"ks-{uuid.uuid4().hex[:6]}", topic, f"public.{table}")
        html = client_as("viewer").get(f"/reconcile/keys/{binding.name}/U-1/").content.decode()
        text = client_as("viewer").get(f"/reconcile/keys/{binding.name}/U-1/?format=text").content.decode()
    finally:
        with psycopg.connect(source_database_url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
    for page in (html, text):
        assert "pbkdf2-hunter2-hash" not in page and "tok-4711-abc" not in page
    assert '<tr><th>password</th><td class="mono">****</td></tr>' in html
    assert '<tr><th>api_token</th><td class="mono">****</td></tr>' in html
    assert '<tr><th>secret</th><td class="mono">NULL</td></tr>' in html  # nothing to hide
    assert '<tr><th>title</th><td class="mono">plain title</td></tr>' in html
    assert '<tr><th>id</th><td class="mono">U-1</td></tr>' in html


def test_a_stuck_rules_status_column_named_like_a_secret_is_shown_and_judged_as_it_is(
    client_as, make_topic, make_binding, source_database_url: str
) -> None:
    """The rule's own status column (token_status reads as a secret by name) is what the page
    judges the row by: shown, and pending at a stuck value as a column named status would be;
    other secret-named columns stay masked."""
    topic = make_topic("rkeystatus", partitions=1)
    table = f"keystatus_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE {table} (id text PRIMARY KEY, created_at timestamptz NOT NULL, "
            "token_status text, password text)"
        )
        conn.execute(f"INSERT INTO {table} VALUES ('U-1', now(), 'QUEUED', 'pbkdf2-hunter2-hash')")
    try:
        binding = make_binding(f"kst-{uuid.uuid4().hex[:6]}", topic, f"public.{table}")
        StuckRule.objects.create(
            name=f"kst-{uuid.uuid4().hex[:6]}",
            binding=binding,
            status_column="token_status",
            stuck_values=["QUEUED"],
            age_column="created_at",
        )
        html = client_as("viewer").get(f"/reconcile/keys/{binding.name}/U-1/").content.decode()
        text = client_as("viewer").get(f"/reconcile/keys/{binding.name}/U-1/?format=text").content.decode()
    finally:
        with psycopg.connect(source_database_url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
    assert '<tr><th>token_status</th><td class="mono">QUEUED</td></tr>' in html
    assert '<tr><th>password</th><td class="mono">****</td></tr>' in html
    for page in (html, text):
        assert "pbkdf2-hunter2-hash" not in page
        assert "token_status is still QUEUED" in page
        assert "not a stuck value" not in page
