"""scan_all against the real broker(s): bound topics with bad settings, probes' reported clients, lag."""

from __future__ import annotations

import io
import json
import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from django.core.management import CommandError, call_command

from auditor.lint.models import LintResultRow, LintScan
from auditor.lint.observed import consumer_lag
from auditor.lint.service import scan_all
from auditor.pipelines.models import Binding, Cluster, SourceDatabase
from auditor.probes.topics import CLIENTS_TOPIC, ensure_audit_topics
from tests.support.transactions import caught_up_before_an_aborted_tail

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

SECRET = "hunter2-Sup3rS3cret"
MakeTopic = Callable[..., str]
Bind = Callable[..., Binding]


@pytest.fixture
def cluster(kafka_bootstrap: str) -> Cluster:
    return Cluster.objects.create(name=f"lint-{uuid.uuid4().hex[:8]}", bootstrap_servers=kafka_bootstrap)


@pytest.fixture
def bind(cluster: Cluster) -> Callable[..., Binding]:
    source = SourceDatabase.objects.create(name=f"src-{uuid.uuid4().hex[:8]}", url="postgresql://app@127.0.0.1/app")

    def create(topic: str, guarantee: str, groups: list[str] | None = None, record_key: str = "key") -> Binding:
        return Binding.objects.create(
            name=f"b-{uuid.uuid4().hex[:8]}",
            cluster=cluster,
            topic=topic,
            source=source,
            table="public.items",
            key_column="id",
            record_key=record_key,
            guarantee=guarantee,
            consumer_groups=groups or [],
        )

    return create


def publish_client_record(
    bootstrap: str,
    kind: str,
    config: dict[str, object],
    group: str | None = None,
    *,
    library: str = "librdkafka",
    library_version: str = "2.16.0",
) -> str:
    """A probe's `_audit.clients` record (docs/contracts.md), written with a plain Producer."""
    ensure_audit_topics({"bootstrap.servers": bootstrap}, topics=[CLIENTS_TOPIC])
    session = uuid.uuid4().hex
    record = {
        "v": 1,
        "kind": kind,
        "session": session,
        "client_id": f"lint-test-{kind}",
        "group": group,
        "library": library,
        "library_version": library_version,
        "config": config,
        "host": "lint-test-host",
        "ts": int(time.time() * 1000),
    }
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    producer.produce(CLIENTS_TOPIC, key=session.encode(), value=json.dumps(record, separators=(",", ":")).encode())
    assert producer.flush(30) == 0
    return session


def on(scan: LintScan, subject_start: str) -> dict[str, LintResultRow]:
    rows = scan.results.filter(subject__startswith=subject_start)
    return {row.rule: row for row in rows}


def publish_java_consumer(bootstrap: str, library_version: str, **settings: str) -> tuple[str, str]:
    """A Java consumer's `_audit.clients` record, in a group of its own (the scan reports identical
    apps once, whatever their versions): (session, group)."""
    group = f"lint-java-{uuid.uuid4().hex[:8]}"
    config: dict[str, object] = {"group.id": group, "enable.auto.commit": "false", **settings}
    session = publish_client_record(
        bootstrap, "consumer", config, group, library="java", library_version=library_version
    )
    return session, group


def test_it_lints_a_reported_java_client_at_its_own_version(kafka_bootstrap: str, cluster: Cluster) -> None:
    # under group.protocol=consumer the Java consumer refuses session.timeout.ms from 4.0 (C102),
    # 3.7 to 3.9 ignore it; under classic it refuses group.remote.assignor from 3.9.0 (C103)
    kip848 = {"group.protocol": "consumer", "session.timeout.ms": "45000"}
    classic_remote = {"group.protocol": "classic", "group.remote.assignor": "uniform"}
    sessions = {
        (version, name): publish_java_consumer(kafka_bootstrap, version, **settings)[0]
        for version in ("3.9.2", "7.6.0-ccs", "4.0.0")
        for name, settings in (("kip848", kip848), ("classic", classic_remote))
    }

    scan = scan_all(LintScan.MANUAL, clusters=[cluster])
    assert scan.status == "ok", scan.error

    def refusals(version: str, name: str) -> list[str]:
        found = on(scan, f"consumer lint-test-consumer@lint-test-host {sessions[(version, name)]}")
        return sorted(rule for rule in found if rule in ("C102", "C103"))

    # 3.9.2: the KIP-848 consumer starts (no 4.0 verdict), the classic one is refused
    assert (refusals("3.9.2", "kip848"), refusals("3.9.2", "classic")) == ([], ["C103"])
    # Confluent Platform 7.6 ships Kafka 3.6: both start
    assert (refusals("7.6.0-ccs", "kip848"), refusals("7.6.0-ccs", "classic")) == ([], [])
    assert (refusals("4.0.0", "kip848"), refusals("4.0.0", "classic")) == (["C102"], ["C103"])
    assert not [note for note in scan.notes if any(session in note for session in sessions.values())]


@pytest.mark.parametrize("version", ["3.7.0.redhat-00007", "3.9.0-SNAPSHOT"])
def test_it_lints_a_vendor_build_of_a_java_client_at_the_kafka_release_it_names(
    kafka_bootstrap: str, cluster: Cluster, version: str
) -> None:
    # 3.7 to 3.9 accept session.timeout.ms under group.protocol=consumer and ignore it; 4.0
    # refuses it (C102): read as 4.0, the vendor build got a refusal its client does not make
    session, group = publish_java_consumer(
        kafka_bootstrap, version, **{"group.protocol": "consumer", "session.timeout.ms": "45000"}
    )

    scan = scan_all(LintScan.MANUAL, clusters=[cluster])
    assert scan.status == "ok", scan.error
    subject = f"consumer lint-test-consumer@lint-test-host {session} (group {group})"
    assert "C102" not in on(scan, subject)
    assert not [note for note in scan.notes if session in note]


@pytest.mark.parametrize("version", ["", "4.x-custom", "9.1.0-ccs"])
def test_it_lints_a_java_client_whose_version_it_cannot_read_at_the_default_and_says_so(
    kafka_bootstrap: str, cluster: Cluster, version: str
) -> None:
    session, group = publish_java_consumer(
        kafka_bootstrap, version, **{"group.protocol": "consumer", "session.timeout.ms": "45000"}
    )

    scan = scan_all(LintScan.MANUAL, clusters=[cluster])
    assert scan.status == "ok", scan.error
    subject = f"consumer lint-test-consumer@lint-test-host {session} (group {group})"
    assert "C102" in on(scan, subject)  # 4.0's verdict
    notes = [note for note in scan.notes if session in note]
    assert len(notes) == 1, scan.notes
    assert notes[0].startswith(f"cluster {cluster.name}: {subject}: linted as java 4.0 (default): ")
    assert "client version: " in notes[0]


def test_it_flags_min_isr_one_on_replication_factor_three(
    kafka_brokers: int, make_topic: MakeTopic, cluster: Cluster, bind: Bind
) -> None:
    if kafka_brokers < 3:
        pytest.skip("replication factor 3 needs the 3-broker test stack (KAFKA_BROKERS=3)")
    topic = make_topic(
        "lint-rf3",
        replication_factor=3,
        config={"min.insync.replicas": "1", "unclean.leader.election.enable": "true"},
    )
    bind(topic, "at-least-once")
    scan = scan_all(LintScan.MANUAL, clusters=[cluster])
    assert scan.status == "ok", scan.error
    found = on(scan, f"topic {topic}")
    assert sorted(found) == ["T002", "T004"]
    assert (found["T002"].shown_value, found["T002"].source, found["T002"].severity) == ("1", "explicit", "error")
    assert (found["T004"].shown_value, found["T004"].source) == ("true", "explicit")
    assert {row.cluster for row in found.values()} == {cluster.name}
    assert ("gap", "broker-lost") in found["T004"].explains()


def test_it_lints_bound_topics_brokers_and_reported_clients(
    kafka_bootstrap: str, kafka_brokers: int, make_topic: MakeTopic, cluster: Cluster, bind: Bind
) -> None:
    group = f"lint-group-{uuid.uuid4().hex[:8]}"
    replicas = min(3, kafka_brokers)
    unsafe = make_topic("lint-unclean", replication_factor=replicas, config={"unclean.leader.election.enable": "true"})
    safe = make_topic(
        "lint-eos", replication_factor=replicas, config={"min.insync.replicas": "2"} if replicas == 3 else {}
    )
    bind(unsafe, "at-least-once", [group])
    bind(safe, "exactly-once")
    bind(f"lint-missing-{uuid.uuid4().hex[:6]}", "at-most-once")
    consumer_session = publish_client_record(kafka_bootstrap, "consumer", {"group.id": group}, group)
    producer_session = publish_client_record(
        kafka_bootstrap,
        "producer",
        {"acks": "1", "sasl.password": SECRET, "sasl.jaas.config": f'PlainLoginModule required password="{SECRET}";'},
    )

    scan = scan_all(LintScan.MANUAL, clusters=[cluster])
    assert scan.status == "ok", scan.error
    assert any(note.startswith(f"cluster {cluster.name}: topic lint-missing-") for note in scan.notes)

    unsafe_rules = sorted(on(scan, f"topic {unsafe}"))
    # 3 brokers run with min.insync.replicas=2, which the topic inherits
    assert unsafe_rules == (["T004"] if replicas == 3 else ["T001", "T002", "T004"])
    assert sorted(on(scan, f"topic {safe}")) == ([] if replicas == 3 else ["T001", "T002"])
    assert {row.guarantee for row in scan.results.filter(subject=f"topic {safe}")} <= {"exactly-once"}

    # a consumer of a bound group takes that binding's guarantee: at-least-once, auto-commit skips records
    consumer = on(scan, "consumer lint-test-consumer@lint-test-host " + consumer_session)
    assert sorted(consumer) == ["C001", "C003"]
    assert consumer["C001"].guarantee == "at-least-once"
    assert consumer["C001"].subject.endswith(f"(group {group})")
    # a producer's topics are unknown: the cluster's strictest guarantee (exactly-once) applies
    producer = on(scan, "producer lint-test-producer@lint-test-host " + producer_session)
    assert sorted(producer) == ["P001", "P006", "P007", "P008"]
    assert {row.guarantee for row in producer.values()} == {"exactly-once"}

    brokers = scan.results.filter(target_kind="broker")
    assert all(row.subject.startswith("broker") for row in brokers)
    assert {row.guarantee for row in brokers} <= {"exactly-once"}
    assert scan.error_count == scan.results.filter(severity="error").count()

    stored = "\n".join(str(v) for v in [*LintScan.objects.values(), *LintResultRow.objects.values()])
    assert SECRET not in stored


def _waiting_group(kafka_bootstrap: str, topic: str, records: int, age_ms: int) -> str:
    """Writes `records` records `age_ms` old and a group that committed offset 0: all wait."""
    group = f"lint-lag-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    then = int(time.time() * 1000) - age_ms
    for i in range(records):
        producer.produce(topic, value=f"r{i}".encode(), partition=0, timestamp=then + i)
    assert producer.flush(30) == 0
    committer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        committer.close()
    return group


def _lag_topic(make_topic: MakeTopic, kafka_brokers: int, retention_ms: int) -> str:
    replicas = min(3, kafka_brokers)
    isr = {"min.insync.replicas": "2"} if replicas == 3 else {}
    return make_topic(
        "lint-lag", partitions=1, replication_factor=replicas, config={"retention.ms": str(retention_ms), **isr}
    )


def test_it_measures_consumer_lag_in_time_for_the_retention_rule(
    kafka_bootstrap: str, kafka_brokers: int, make_topic: MakeTopic, cluster: Cluster, bind: Bind
) -> None:
    # records 2 h old under a 3 h retention: they stay, and the group is past half of it
    topic = _lag_topic(make_topic, kafka_brokers, 3 * 3600 * 1000)
    group = _waiting_group(kafka_bootstrap, topic, 3, 2 * 3600 * 1000)
    bind(topic, "at-least-once", [group])

    scan = scan_all(LintScan.MANUAL, clusters=[cluster])
    assert scan.status == "ok", scan.error
    t005 = on(scan, f"topic {topic}")["T005"]
    assert (t005.severity, t005.shown_value, t005.source) == ("warning", "10800000", "explicit")
    assert t005.message.startswith("the consumers are 2 h behind, more than half of retention.ms=10800000")


def test_it_reports_records_retention_deleted_before_the_group_committed_them(
    kafka_bootstrap: str, kafka_brokers: int, make_topic: MakeTopic, cluster: Cluster, bind: Bind
) -> None:
    # records 2 h old under a 1 h retention: the brokers (log.retention.check.interval.ms=5000)
    # delete them, and what is left of the group's lag is its committed offset below the log start
    topic = _lag_topic(make_topic, kafka_brokers, 3600 * 1000)
    group = _waiting_group(kafka_bootstrap, topic, 3, 2 * 3600 * 1000)
    bind(topic, "at-least-once", [group])
    watcher = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"{group}-watch"})
    try:
        deadline = time.monotonic() + 90
        while watcher.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) != (3, 3):
            assert time.monotonic() < deadline, "retention did not delete the records in 90 s"
            time.sleep(1)
    finally:
        watcher.close()

    scan = scan_all(LintScan.MANUAL, clusters=[cluster])
    assert scan.status == "ok", scan.error
    t005 = on(scan, f"topic {topic}")["T005"]
    assert (t005.severity, t005.shown_value, t005.source) == ("error", "3600000", "explicit")
    assert t005.message == (
        f"group {group} committed offset 0 on partition 0 but the log now starts at 3: 3 records were deleted "
        "before the group committed them; retention.ms=3600000 keeps records 1 h"
    )


def test_it_says_the_lag_is_unknown_when_the_first_unread_records_are_not_read_in_time(
    kafka_bootstrap: str, kafka_brokers: int, make_topic: MakeTopic, kafka_admin: AdminClient
) -> None:
    topic = _lag_topic(make_topic, kafka_brokers, 3 * 3600 * 1000)
    group = _waiting_group(kafka_bootstrap, topic, 3, 2 * 3600 * 1000)
    connection = {"bootstrap.servers": kafka_bootstrap}
    metadata = kafka_admin.list_topics(timeout=10)

    measured = consumer_lag(connection, metadata, {topic: [group]})
    assert 2 * 3600 - 60 < measured.seconds[topic] < 2 * 3600 + 60
    assert measured.unknown == {}

    # no time left to read the record at the committed offset: unknown, not 0
    unread = consumer_lag(connection, metadata, {topic: [group]}, read_timeout=0)
    assert topic not in unread.seconds
    assert unread.unknown == {topic: "the first unread record of partition(s) 0 was not read in time"}


def test_an_aborted_transaction_after_a_caught_up_group_is_no_lag(
    kafka_bootstrap: str, kafka_brokers: int, make_topic: MakeTopic, kafka_admin: AdminClient
) -> None:
    topic = _lag_topic(make_topic, kafka_brokers, 3 * 3600 * 1000)
    # the aborted records are 2 h old: read as the group's first unread record, that is its lag
    caught_up, behind = caught_up_before_an_aborted_tail(kafka_bootstrap, topic, 2 * 3600 * 1000)
    connection = {"bootstrap.servers": kafka_bootstrap}
    metadata = kafka_admin.list_topics(timeout=10)

    assert consumer_lag(connection, metadata, {topic: [caught_up]}).seconds == {topic: 0.0}
    # the group at 0 has the 3 fresh committed records to read: seconds, not hours
    assert consumer_lag(connection, metadata, {topic: [behind]}).seconds[topic] < 300


def test_it_says_the_lag_is_unknown_when_no_group_has_committed(
    kafka_bootstrap: str, kafka_brokers: int, make_topic: MakeTopic, kafka_admin: AdminClient
) -> None:
    topic = _lag_topic(make_topic, kafka_brokers, 3 * 3600 * 1000)
    _waiting_group(kafka_bootstrap, topic, 3, 2 * 3600 * 1000)  # records 2 h old, and a group that is not bound
    metadata = kafka_admin.list_topics(timeout=10)

    lag = consumer_lag({"bootstrap.servers": kafka_bootstrap}, metadata, {topic: ["never-ran", "typo"]})

    assert topic not in lag.seconds
    assert lag.unknown == {topic: "none of its groups (never-ran, typo) has committed an offset on it"}


def test_it_reports_an_unreachable_cluster_as_a_failed_scan() -> None:
    dead = Cluster.objects.create(
        name=f"dead-{uuid.uuid4().hex[:6]}",
        bootstrap_servers="127.0.0.1:1",
        config={"sasl.password": SECRET, "security.protocol": "PLAINTEXT"},
    )
    scan = scan_all(LintScan.SCHEDULE, clusters=[dead], timeout=2)
    assert scan.status == "failed"
    assert scan.error.startswith(f"cluster {dead.name}: cannot reach it: ")
    assert scan.results.count() == 0
    assert SECRET not in scan.error


def test_it_notes_when_no_cluster_is_configured() -> None:
    scan = scan_all(LintScan.SCHEDULE, clusters=[])
    assert (scan.status, scan.summary) == ("ok", "0 clusters, 0 brokers, 0 topics, 0 clients")
    assert scan.notes == ["no cluster is configured (audit apply FILE adds them)"]


def test_it_scans_the_configured_clusters_from_the_cli(make_topic: MakeTopic, cluster: Cluster, bind: Bind) -> None:
    topic = make_topic("lint-cli", replication_factor=1, config={"unclean.leader.election.enable": "true"})
    bind(topic, "at-least-once")
    out = io.StringIO()
    with pytest.raises(CommandError) as raised:  # T004 is an error: exit 1 (2 if another stored cluster is down)
        call_command("audit", "lint", "--json", stdout=out)
    assert raised.value.returncode in (1, 2)
    body = json.loads(out.getvalue())
    assert body["scan"]["trigger"] == "cli"
    mine = [r for r in body["results"] if r["subject"] == f"topic {topic}"]
    assert {r["rule"] for r in mine} >= {"T004"}
    assert {"rule", "severity", "target", "config", "value", "expected", "message"} <= set(mine[0])


def test_it_flags_a_compacted_topic_whose_bindings_tell_items_apart_by_other_than_the_record_key(
    kafka_brokers: int, make_topic: MakeTopic, cluster: Cluster, bind: Bind
) -> None:
    replicas = min(3, kafka_brokers)
    isr = {"min.insync.replicas": "2"} if replicas == 3 else {}
    by_value = make_topic("lint-compact", replication_factor=replicas, config={"cleanup.policy": "compact", **isr})
    by_key = make_topic("lint-compact", replication_factor=replicas, config={"cleanup.policy": "compact", **isr})
    bind(by_value, "at-least-once", record_key="json:$.ticket_id")
    bind(by_key, "at-least-once")

    scan = scan_all(LintScan.MANUAL, clusters=[cluster])
    assert scan.status == "ok", scan.error
    t006 = on(scan, f"topic {by_value}")["T006"]
    assert (t006.severity, t006.shown_value, t006.source) == ("error", "compact", "explicit")
    assert "told apart by json:$.ticket_id, not by the record key" in t006.message
    # keyed by the item itself, the cleaner only removes copies a later record superseded
    assert "T006" not in on(scan, f"topic {by_key}")
