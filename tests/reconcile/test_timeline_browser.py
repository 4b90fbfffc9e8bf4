"""Headless Chromium: the key page's delivery timeline of a `skipped` item marks the commit step.

The record is really produced (its delivery report gives the partition and offset the test
expects) and the key page really reads it back from the topic. The stuck item is stored
through the diagnosis service (record_diagnosis) with the evidence a diagnosis gives a
skipped item: acked at that position, in the topic, its group committed past it, no
processed mark. The verdict engine itself is tested in tests/stuck.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from django.conf import settings
from pytest_django import DjangoDbBlocker

from tests.support.browser import closing_connection

if TYPE_CHECKING:
    from playwright.sync_api import Browser

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.django_db]
SESSION = "ab" * 16
SCREENSHOTS = Path(settings.BASE_DIR) / "var" / "screenshots"


@pytest.fixture(scope="module")
def skipped_item(
    django_db_setup: None, django_db_blocker: DjangoDbBlocker, kafka_bootstrap: str, kafka_admin: Any
) -> Iterator[dict[str, Any]]:
    from auditor.pipelines.models import Binding, Cluster, SourceDatabase, StuckRule
    from auditor.stuck.evidence import Diagnosis, StuckRow
    from auditor.stuck.service import DiagnosisResult, ItemVerdict, record_diagnosis, start_run

    name = f"tl-{uuid.uuid4().hex[:8]}"
    kafka_admin.create_topics([NewTopic(name, 1, -1)])[name].result(30)
    delivered: list[Any] = []
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    headers = [("audit-id", b"T-1"), ("audit-pid", SESSION.encode()), ("audit-seq", b"7")]
    producer.produce(
        name, key=b"T-1", value=b'{"ticket": "T-1"}', headers=headers, on_delivery=lambda e, m: delivered.append((e, m))
    )
    assert producer.flush(30) == 0
    [(error, message)] = delivered
    assert error is None
    partition, offset = message.partition(), message.offset()
    evidence = {
        "topic": name,
        "records": [{"partition": partition, "offset": offset, "timestamp": None, "state": "committed"}],
        "records_found": 1,
        "ledger": [
            {
                "session": SESSION,
                "seq": 7,
                "status": "acked",
                "partition": partition,
                "offset": offset,
                "error": None,
                "persisted": "persisted",
                "at": None,
            }
        ],
        "groups": [{"group": "ticket-processor", "committed": offset + 1, "members": 1, "outcome": "skipped"}],
        "partition": partition,
        "offset": offset,
    }
    with django_db_blocker.unblock(), closing_connection():
        cluster = Cluster.objects.create(name=name, bootstrap_servers=kafka_bootstrap)
        source = SourceDatabase.objects.create(name=name, url="${SOURCE_DATABASE_URL}")
        binding = Binding.objects.create(
            name=name,
            cluster=cluster,
            topic=name,
            source=source,
            table="public.missing_table",
            key_column="id",
            consumer_groups=["ticket-processor"],
        )
        rule = StuckRule.objects.create(
            name=name, binding=binding, status_column="status", stuck_values=["NEW"], age_column="created_at"
        )
        reason = (
            f"group ticket-processor committed past it ({name}/{partition}: committed {offset + 1} > offset {offset})"
        )
        record_diagnosis(
            start_run(rule, "cli"),
            DiagnosisResult(
                rule.name,
                items=[ItemVerdict(StuckRow("T-1", "NEW", 900.0), Diagnosis("skipped", reason, evidence))],
                engine="python",
            ),
        )
    yield {"binding": name, "partition": partition, "offset": offset}
    with django_db_blocker.unblock(), closing_connection():
        Binding.objects.filter(name=name).delete()
        cluster.delete()
        source.delete()
    kafka_admin.delete_topics([name])


def test_the_timeline_of_a_skipped_item_marks_the_commit_step(
    browser: Browser, asgi_server: str, admin_credentials: tuple[str, str], skipped_item: dict[str, Any]
) -> None:
    name, partition, offset = skipped_item["binding"], skipped_item["partition"], skipped_item["offset"]
    path = f"/reconcile/keys/{name}/T-1/"
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{asgi_server}{path}")
    page.fill("input[name=username]", admin_credentials[0])
    page.fill("input[name=password]", admin_credentials[1])
    page.click("button[type=submit]")
    page.wait_for_url(f"{asgi_server}{path}", timeout=60000)

    steps = page.locator("#timeline-steps li")
    assert steps.evaluate_all("els => els.map(e => e.dataset.step)") == [
        "created",
        "sent",
        "acked",
        "in-topic",
        "committed",
        "processed",
        "updated",
    ]
    broke = page.locator("#timeline-steps li.broke")
    assert broke.count() == 1 and broke.get_attribute("data-step") == "committed"
    assert "broke here" in broke.text_content()
    assert f"group ticket-processor committed {offset + 1} > offset {offset}" in broke.text_content()
    rule_link = broke.locator("a", has_text="C001")
    assert rule_link.get_attribute("href") == "/lint/catalog/#C001"
    # The topic step comes from the page's own read of the topic, at the delivery report's position.
    in_topic = page.locator('#timeline-steps li[data-step="in-topic"]')
    assert in_topic.get_attribute("data-state") == "ok"
    assert f"read at {name}/{partition}@{offset}" in in_topic.text_content()
    assert page.get_attribute('#timeline-steps li[data-step="acked"]', "data-state") == "ok"
    assert page.get_attribute("#timeline-permalink", "href") == f"{asgi_server}{path}#timeline"
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "timeline-skipped-1280.png"), full_page=True)

    page.click("#timeline-copy")
    page.wait_for_function("document.getElementById('timeline-copy').textContent === 'Copied'")
    text = page.evaluate("document.getElementById('timeline-text').value")
    assert "5. [BROKEN] group committed past it" in text and "<- broke here" in text
    assert f"Permalink: {asgi_server}{path}" in text

    plain = page.request.get(f"{asgi_server}{path}?format=text")
    assert plain.headers["content-type"].startswith("text/plain")
    assert plain.text() == text
    page.set_viewport_size({"width": 1400, "height": 900})
    page.screenshot(path=str(SCREENSHOTS / "timeline-skipped-1400.png"), full_page=True)
    page.close()
