"""The lint pages: results of the latest scan, the catalog and its exports, the paste form."""

from __future__ import annotations

import csv
import io
import logging
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from auditor.accounts.roles import grant_role
from auditor.lint.engine.catalog import RULES
from auditor.lint.engine.linter import lint
from auditor.lint.models import LintResultRow, LintScan
from auditor.lint.service import ScanResult, latest_scan, record_scan
from auditor.pipelines.models import Binding, Cluster, SourceDatabase

pytestmark = pytest.mark.django_db

SECRET = "hunter2-Sup3rS3cret"
HOSTILE = '<img src=x onerror="alert(1)">'


@pytest.fixture
def user_client(client: Client) -> Client:
    user = get_user_model().objects.create_user(username=f"u-{uuid.uuid4().hex[:6]}", password="pw-long-enough")
    grant_role(user, "operator")  # roles gate every page
    client.force_login(user)
    return client


def make_scan(trigger: str = LintScan.SCHEDULE, topic: str = "tickets", minutes_ago: int = 0) -> LintScan:
    """A scan with one bad topic (T002, T004) and one bad producer (P001 and two warnings)."""
    topic_results = lint(
        {"min.insync.replicas": 1, "unclean.leader.election.enable": "true", "replication.factor": 3},
        client="java",
        kind="topic",
        guarantee="at-least-once",
        subject=topic,
    )
    producer_results = lint({"acks": "1"}, client="librdkafka", kind="producer", guarantee="at-least-once")
    started = timezone.now() - timedelta(minutes=minutes_ago)
    return record_scan(
        [ScanResult(r, f"topic {topic}", "local") for r in topic_results]
        + [ScanResult(r, "producer orders@host1 " + "a" * 32, "local") for r in producer_results],
        trigger=trigger,
        started_at=started,
        summary="1 cluster, 1 brokers, 1 topics, 1 clients",
    )


def rows_of(html: str) -> list[str]:
    return [part.split('"', 1)[0] for part in html.split('<tr data-rule="')[1:]]


@pytest.mark.parametrize("url", ["/lint/", "/lint/catalog/", "/lint/catalog.json", "/lint/catalog.csv", "/lint/paste/"])
def test_it_sends_anonymous_users_to_the_login_page(client: Client, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")
    assert client.post("/lint/scan/").status_code == 302


def test_it_shows_the_latest_scan_of_the_live_system(user_client: Client) -> None:
    make_scan(topic="older", minutes_ago=30)
    latest = make_scan(topic="tickets")
    make_scan(trigger=LintScan.PASTE, topic="pasted")  # a pasted config is not the live system
    assert latest_scan() == latest

    response = user_client.get("/lint/")
    html = response.content.decode()
    assert response.status_code == 200
    assert rows_of(html) == ["P001", "T002", "T004", "P006", "P007"]  # errors first, then per target
    assert "topic tickets" in html and "topic older" not in html
    assert f'id="count-error">{latest.error_count}<' in html
    assert 'id="scan-now" method="post"' in html and "csrfmiddlewaretoken" in html
    assert 'id="lint-page" type="application/json"' in html


def test_it_filters_by_severity_and_target_kind(user_client: Client) -> None:
    make_scan()
    assert rows_of(user_client.get("/lint/", {"severity": "warning"}).content.decode()) == ["P006", "P007"]
    assert rows_of(user_client.get("/lint/", {"kind": "topic"}).content.decode()) == ["T002", "T004"]
    both = user_client.get("/lint/", {"severity": "error", "kind": "producer"}).content.decode()
    assert rows_of(both) == ["P001"]
    assert len(rows_of(user_client.get("/lint/", {"severity": "nonsense"}).content.decode())) == 5


def test_it_shows_a_chosen_scan_and_serves_results_as_json(user_client: Client) -> None:
    older = make_scan(topic="older", minutes_ago=30)
    make_scan(topic="tickets")
    html = user_client.get("/lint/", {"scan": older.pk}).content.decode()
    assert "topic older" in html and "show the latest" in html
    assert user_client.get("/lint/", {"scan": 999_999_999}).status_code == 404

    body = user_client.get("/lint/api/results/", {"scan": older.pk, "kind": "topic"}).json()
    assert body["scan"]["id"] == older.pk
    assert body["scan"]["counts"] == {"error": 3, "warning": 2, "info": 0}
    assert [(r["rule"], r["subject"], r["cluster"]) for r in body["results"]] == [
        ("T002", "topic older", "local"),
        ("T004", "topic older", "local"),
    ]
    assert body["results"][1]["value"] == "true"
    assert body["results"][1]["explains"] == [["gap", "broker-lost"], ["missing", None]]


# --- links to the findings a result explains ------------------------------------------------


@pytest.fixture
def bound_cluster(db: None) -> dict[str, Binding]:
    """Cluster "local" (make_scan's) with two bindings, and another cluster's binding."""
    local = Cluster.objects.create(name="local", bootstrap_servers="127.0.0.1:9")
    other = Cluster.objects.create(name="elsewhere", bootstrap_servers="127.0.0.1:9")
    source = SourceDatabase.objects.create(name="src", url="postgresql://app@127.0.0.1/app")
    common = {"source": source, "table": "public.t", "key_column": "id"}
    return {
        "tickets": Binding.objects.create(
            name="tickets-b", cluster=local, topic="tickets", consumer_groups=["ticket-processor"], **common
        ),
        "orders": Binding.objects.create(
            name="orders-b", cluster=local, topic="orders", consumer_groups=["billing"], **common
        ),
        "other": Binding.objects.create(name="other-b", cluster=other, topic="tickets", **common),
    }


def links_in_row(html: str, rule: str, subject: str) -> list[tuple[str, str]]:
    """(href, text) of the links in a result row's "Explains findings" cell."""
    row = html.split(f'<tr data-rule="{rule}" ', 1)[1].split("</tr>", 1)[0]
    assert f'data-subject="{subject}"' in row
    cell = row.split('<td class="explains">', 1)[1].split("</td>", 1)[0]
    return [(part.split('"', 1)[0], part.split(">", 1)[1].split("</a>", 1)[0]) for part in cell.split('<a href="')[1:]]


def test_it_links_a_topic_result_to_the_findings_of_that_topics_binding(
    user_client: Client, bound_cluster: dict[str, Binding]
) -> None:
    make_scan(topic="tickets")
    html = user_client.get("/lint/").content.decode()
    # T004 (unclean leader election) explains broker-side loss: gaps of cause broker-lost, and missing items
    assert links_in_row(html, "T004", "topic tickets") == [
        ("/reconcile/findings/?binding=tickets-b&amp;kind=gap&amp;cause=broker-lost", "gap (broker-lost)"),
        ("/reconcile/findings/?binding=tickets-b&amp;kind=missing", "missing"),
    ]

    body = user_client.get("/lint/api/results/", {"kind": "topic"}).json()  # the live refresh's data
    t004 = next(r for r in body["results"] if r["rule"] == "T004")
    assert t004["finding_links"] == [
        {
            "label": "gap (broker-lost)",
            "url": "/reconcile/findings/?binding=tickets-b&kind=gap&cause=broker-lost",
            "binding": "tickets-b",
        },
        {"label": "missing", "url": "/reconcile/findings/?binding=tickets-b&kind=missing", "binding": "tickets-b"},
    ]


def test_it_links_a_producer_result_to_every_binding_of_its_cluster(
    user_client: Client, bound_cluster: dict[str, Binding]
) -> None:
    make_scan(topic="tickets")
    html = user_client.get("/lint/").content.decode()
    producer = "producer orders@host1 " + "a" * 32
    # a producer does not say which topic it writes: both bindings of cluster "local", not the other cluster's
    assert [text for _, text in links_in_row(html, "P001", producer)] == [
        "gap (broker-lost) in orders-b",
        "missing in orders-b",
        "gap (send-unconfirmed) in orders-b",
        "gap (broker-lost) in tickets-b",
        "missing in tickets-b",
        "gap (send-unconfirmed) in tickets-b",
    ]


def test_it_links_a_consumer_result_to_the_bindings_of_its_group(
    user_client: Client, bound_cluster: dict[str, Binding]
) -> None:
    results = lint({"enable.auto.commit": "true"}, client="java", kind="consumer", guarantee="at-least-once")
    subject = "consumer billing-app@host2 " + "b" * 32 + " (group billing)"
    record_scan(
        [ScanResult(r, subject, "local") for r in results], trigger=LintScan.SCHEDULE, started_at=timezone.now()
    )
    body = user_client.get("/lint/api/results/").json()
    links = [link for r in body["results"] for link in r["finding_links"]]
    assert links and {link["binding"] for link in links} == {"orders-b"}
    # auto commit on (C001) skips records: the unprocessed findings of the binding that declares the group
    c001 = next(r for r in body["results"] if r["rule"] == "C001")
    assert c001["finding_links"] == [
        {"label": "unprocessed", "url": "/reconcile/findings/?binding=orders-b&kind=unprocessed", "binding": "orders-b"}
    ]


def test_it_links_a_pasted_result_to_the_findings_of_its_kind_only(
    user_client: Client, bound_cluster: dict[str, Binding]
) -> None:
    html = user_client.post(
        "/lint/paste/",
        {
            "config": "acks=1\n",
            "format": "properties",
            "client": "java",
            "kind": "producer",
            "guarantee": "at-least-once",
        },
    ).content.decode()
    assert links_in_row(html, "P001", "producer (pasted config)") == [
        ("/reconcile/findings/?kind=gap&amp;cause=broker-lost", "gap (broker-lost)"),
        ("/reconcile/findings/?kind=missing", "missing"),
        # the acks rule also explains acks=0's unconfirmed sends
        ("/reconcile/findings/?kind=gap&amp;cause=send-unconfirmed", "gap (send-unconfirmed)"),
    ]


def test_it_says_when_there_is_no_scan_yet(user_client: Client) -> None:
    LintScan.objects.all().delete()
    html = user_client.get("/lint/").content.decode()
    assert "No scan yet" in html
    assert user_client.get("/lint/api/results/").json() == {"scan": None, "results": []}


def test_it_escapes_what_the_configs_contain(user_client: Client) -> None:
    make_scan(topic=HOSTILE)
    response = user_client.get("/lint/")
    assert HOSTILE.encode() not in response.content
    assert b"&lt;img src=x onerror=" in response.content


def test_it_queues_a_scan_on_post_with_a_csrf_token(monkeypatch: pytest.MonkeyPatch) -> None:
    from auditor.lint import tasks

    queued: list[tuple[object, ...]] = []
    monkeypatch.setattr(tasks.scan_all_task, "delay", lambda *args: queued.append(args))
    monkeypatch.setattr(tasks, "scan_running", lambda: False)
    user = get_user_model().objects.create_user(username=f"u-{uuid.uuid4().hex[:6]}", password="pw-long-enough")
    grant_role(user, "operator")  # roles gate every page
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user)
    assert strict.post("/lint/scan/").status_code == 403
    assert queued == []

    token = strict.get("/lint/").cookies["csrftoken"].value
    response = strict.post("/lint/scan/", HTTP_X_CSRFTOKEN=token, HTTP_ACCEPT="application/json")
    assert (response.status_code, response.json()["status"]) == (202, "queued")
    assert queued == [("manual", user.pk)]
    assert strict.get("/lint/scan/").status_code == 405

    response = strict.post("/lint/scan/", {"csrfmiddlewaretoken": token})  # without JavaScript
    assert response.status_code == 302 and response["Location"] == "/lint/"


def test_it_does_not_queue_a_second_scan_while_one_runs(user_client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    from auditor.lint import tasks

    monkeypatch.setattr(tasks, "scan_running", lambda: True)
    monkeypatch.setattr(tasks.scan_all_task, "delay", lambda *args: pytest.fail("queued a second scan"))
    response = user_client.post("/lint/scan/", HTTP_ACCEPT="application/json")
    assert response.json()["status"] == "running"


def test_it_pushes_a_finished_scan_after_the_commit(django_capture_on_commit_callbacks: Callable[..., Any]) -> None:
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("lint", channel)
    try:
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            scan = make_scan()
        assert len(callbacks) == 1
        while True:
            message = async_to_sync(layer.receive)(channel)
            if message["payload"].get("id") == scan.pk:
                break
    finally:
        async_to_sync(layer.group_discard)("lint", channel)
    assert (message["group"], message["event"]) == ("lint", "scan")
    assert message["payload"]["counts"] == {"error": 3, "warning": 2, "info": 0}
    assert message["payload"]["trigger"] == "schedule"

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        make_scan(trigger=LintScan.PASTE)
    assert callbacks == []  # a pasted config is nobody else's business


# --- catalog --------------------------------------------------------------------------------


def test_it_renders_the_catalog_with_every_rule(user_client: Client) -> None:
    html = user_client.get("/lint/catalog/").content.decode()
    assert [part.split('"', 1)[0] for part in html.split('<tr id="')[1:]] == [rule.id for rule in RULES]
    assert 'href="/lint/catalog.json"' in html and 'href="/lint/catalog.csv"' in html
    assert "reprocessed" in html.split('<tr id="C004"', 1)[1].split("</tr>", 1)[0]

    topics = user_client.get("/lint/catalog/", {"target": "topic", "guarantee": "exactly-once"}).content.decode()
    assert [part.split('"', 1)[0] for part in topics.split('<tr id="')[1:]] == [
        "T001",
        "T002",
        "T003",
        "T004",
        "T005",
        "T006",
        "T007",
    ]


def test_it_exports_the_catalog(user_client: Client) -> None:
    rules = user_client.get("/lint/catalog.json").json()["rules"]
    assert [r["id"] for r in rules] == [rule.id for rule in RULES]
    by_id = {r["id"]: r for r in rules}
    assert by_id["C004"]["explains"] == [["reprocessed", None]]
    assert ["duplicate", "producer-retry"] in by_id["P006"]["explains"]

    response = user_client.get("/lint/catalog.csv")
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="lint-catalog.csv"'
    rows = {row["id"]: row for row in csv.DictReader(io.StringIO(response.content.decode()))}
    assert rows["P001"]["explains"] == "gap:broker-lost missing gap:send-unconfirmed"
    assert len(rows) == len(RULES)


# --- paste ----------------------------------------------------------------------------------

PASTED_PROPERTIES = (
    "acks=0\n"
    f"sasl.password={SECRET}\n"
    f'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required password="{SECRET}";\n'
)


def all_stored_text() -> str:
    """Every column of every scan and result row, as text."""
    scans = [str(values) for values in LintScan.objects.values()]
    rows = [str(values) for values in LintResultRow.objects.values()]
    return "\n".join(scans + rows)


def test_it_lints_a_pasted_config_and_never_shows_logs_or_stores_its_secret(
    user_client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    response = user_client.post(
        "/lint/paste/",
        {"config": PASTED_PROPERTIES, "format": "", "client": "java", "kind": "producer", "guarantee": "at-least-once"},
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert rows_of(html) == ["P001"]
    assert "with acks=0 the producer counts a record as sent" in html
    assert SECRET not in html
    assert "sasl.password=" not in html  # the pasted text is not echoed into the form

    scan = LintScan.objects.get(trigger=LintScan.PASTE)
    assert (scan.guarantee, scan.summary, scan.error_count) == (
        "at-least-once",
        "pasted properties config (java client, java 4.0 (default))",
        1,
    )
    assert list(scan.results.values_list("rule", "subject")) == [("P001", "producer (pasted config)")]
    assert SECRET not in all_stored_text()
    assert SECRET not in caplog.text
    # the permanent link shows the same results
    assert rows_of(user_client.get(f"/lint/?scan={scan.pk}").content.decode()) == ["P001"]


def test_it_masks_secrets_that_rules_report(user_client: Client) -> None:
    # the transactional.id embeds the password: its value is shown masked
    pasted = (
        '{"transactional.id": "orders-'
        + SECRET
        + '-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0", "sasl.password": "'
        + SECRET
        + '"}'
    )
    response = user_client.post(
        "/lint/paste/",
        {"config": pasted, "format": "json", "client": "librdkafka", "kind": "producer", "guarantee": "exactly-once"},
    )
    html = response.content.decode()
    assert "P009" in rows_of(html)
    assert "orders-****" in html
    assert SECRET not in html
    assert SECRET not in all_stored_text()


def test_it_reports_a_malformed_paste_without_quoting_it(user_client: Client, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    before = LintScan.objects.count()
    response = user_client.post(
        "/lint/paste/",
        {
            "config": f"acks=all\nsasl.password {SECRET}\n",
            "format": "properties",
            "client": "java",
            "kind": "producer",
            "guarantee": "at-least-once",
        },
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "pasted config: line 2: expected &#x27;key=value&#x27;" in html
    assert SECRET not in html and SECRET not in caplog.text
    assert LintScan.objects.count() == before  # nothing stored


def test_it_lints_every_section_of_a_pasted_spring_yaml(user_client: Client) -> None:
    pasted = "spring:\n  kafka:\n    producer:\n      acks: 1\n    consumer:\n      enable-auto-commit: true\n"
    response = user_client.post(
        "/lint/paste/",
        {"config": pasted, "format": "", "client": "librdkafka", "kind": "", "guarantee": "at-least-once"},
    )
    assert rows_of(response.content.decode()) == ["P001", "C001", "C003", "P006", "P007"]
    assert LintScan.objects.get(trigger="paste").summary == (
        "pasted spring-yaml config (Spring Boot's java client, java 4.0 (default))"
    )


KIP848_CONSUMER = "group.id=orders\nenable.auto.commit=false\nauto.offset.reset=earliest\ngroup.protocol=consumer\n"


def paste_java_consumer(user_client: Client, config: str, client_version: str, client: str = "java") -> str:
    response = user_client.post(
        "/lint/paste/",
        {
            "config": config,
            "format": "properties",
            "client": client,
            "kind": "consumer",
            "guarantee": "at-least-once",
            "client_version": client_version,
        },
    )
    assert response.status_code == 200
    return response.content.decode()


def test_it_lints_a_pasted_java_config_at_the_client_version_given(user_client: Client) -> None:
    config = KIP848_CONSUMER + "session.timeout.ms=45000\n"
    # 4.0 refuses session.timeout.ms under group.protocol=consumer; 3.7 to 3.9 accept and ignore it
    html = paste_java_consumer(user_client, config, "")
    assert rows_of(html) == ["C102"]
    assert "pasted properties config (java client, java 4.0 (default)), guarantee at-least-once" in html
    html = paste_java_consumer(user_client, config, " 3.9.2 ")
    assert rows_of(html) == []
    assert "pasted properties config (java client, java 3.9.2), guarantee at-least-once" in html
    assert 'value="3.9.2"' in html  # the form keeps the version for the next paste
    # the Java consumer refuses group.remote.assignor under the classic protocol from 3.9.0
    assignor = "group.id=orders\nenable.auto.commit=false\nauto.offset.reset=earliest\ngroup.remote.assignor=uniform\n"
    assert rows_of(paste_java_consumer(user_client, assignor, "3.9.0")) == ["C103"]
    assert rows_of(paste_java_consumer(user_client, assignor, "3.8.1")) == []
    summaries = list(LintScan.objects.filter(trigger=LintScan.PASTE).order_by("id").values_list("summary", flat=True))
    assert summaries == [
        "pasted properties config (java client, java 4.0 (default))",
        "pasted properties config (java client, java 3.9.2)",
        "pasted properties config (java client, java 3.9.0)",
        "pasted properties config (java client, java 3.8.1)",
    ]


def test_it_refuses_a_pasted_client_version_it_cannot_use(user_client: Client) -> None:
    html = paste_java_consumer(user_client, KIP848_CONSUMER, "3.9.x")
    assert (
        "client_version: expected the Java client&#x27;s Apache Kafka version such as 3.9.2 or 4.0, "
        "got &#x27;3.9.x&#x27;" in html
    )
    html = paste_java_consumer(user_client, KIP848_CONSUMER, "3.9.2", client="librdkafka")
    assert (
        "client version: 3.9.2 is a Java client&#x27;s version, and this properties config is linted as "
        "librdkafka&#x27;s" in html
    )
    assert not LintScan.objects.filter(trigger=LintScan.PASTE).exists()


def test_it_reports_a_pasted_spring_consumer_whose_container_refuses_to_start(user_client: Client) -> None:
    pasted = (
        "spring:\n  kafka:\n    consumer:\n      enable-auto-commit: true\n      auto-offset-reset: earliest\n"
        "    listener:\n      ack-mode: manual_immediate\n"
    )
    response = user_client.post(
        "/lint/paste/",
        {"config": pasted, "format": "", "client": "librdkafka", "kind": "", "guarantee": "at-least-once"},
    )
    html = response.content.decode()
    # not the auto-commit's C001: the container never starts
    assert rows_of(html) == ["C104"]
    assert "Consumer cannot be configured for auto commit for ackMode MANUAL_IMMEDIATE" in html


def test_it_says_which_documents_of_a_pasted_spring_file_it_left_out(user_client: Client) -> None:
    pasted = "spring.kafka.producer.acks: all\n---\nspring.config.activate.on-profile: local\nspring.kafka.producer.acks: 0\n"
    response = user_client.post(
        "/lint/paste/",
        {"config": pasted, "format": "", "client": "java", "kind": "", "guarantee": "at-least-once"},
    )
    html = response.content.decode()
    # the local profile's acks=0 applies only with that profile: no P001
    assert rows_of(html) == []
    note = "document 2 (line 3) not linted: it applies only with profile &#x27;local&#x27; (active: none, so default)"
    assert note in html
    assert LintScan.objects.get().notes == [
        "pasted config: document 2 (line 3) not linted: it applies only with profile 'local' (active: none, so default)"
    ]
