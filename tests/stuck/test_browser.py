"""Headless Chromium: "Diagnose now" runs a diagnosis on the Celery worker and the page updates
live (cards, items, recent runs) without a reload; a hostile key stays text."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from psycopg import sql
from pytest_django import DjangoDbBlocker

from tests.support.browser import closing_connection, logged_in_page
from tests.support.waiting import wait_until

if TYPE_CHECKING:
    from playwright.sync_api import Browser

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.django_db]

HOSTILE = '<img src=x onerror="window.__xss=1">'


@pytest.fixture(scope="module")
def committed_rule(
    django_db_setup: None, django_db_blocker: DjangoDbBlocker, kafka_admin: Any, kafka_bootstrap: str
) -> Iterator[tuple[str, list[str]]]:
    """A demo pipeline with three produced tickets nobody consumed and a hostile row never
    produced, and its rule, committed for the worker and Daphne to see."""
    import os

    from confluent_kafka.admin import NewTopic
    from django.core.cache import cache

    from auditor.demo.options import ProbeTopics
    from auditor.demo.producer import TicketProducer
    from auditor.demo.store import TicketStore
    from auditor.pipelines.models import Binding, Cluster, SourceDatabase, StuckRule

    suffix = uuid.uuid4().hex[:8]
    topics = [f"stuck-browser-{suffix}", f"stuck-browser-pl-{suffix}", f"stuck-browser-cl-{suffix}"]
    for future in kafka_admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(timeout=30)
    wait_until(lambda: set(topics) <= set(kafka_admin.list_topics(timeout=5).topics), 20, "the topics")
    table = f"tickets_browser_{suffix}"
    store = TicketStore(os.environ["SOURCE_DATABASE_URL"], table, f"processed_browser_{suffix}")
    store.ensure_schema()
    producer = TicketProducer(
        kafka_config={"bootstrap.servers": kafka_bootstrap},
        store=TicketStore(os.environ["SOURCE_DATABASE_URL"], table, f"processed_browser_{suffix}"),
        topic=topics[0],
        probe_topics=ProbeTopics(topics[1], topics[2], topics[2], 0.2),
    )
    ids = [t.ticket_id for t in producer.create_tickets(3)]
    producer.close(30)
    store.conn.execute(
        sql.SQL("INSERT INTO {} (ticket_id, status) VALUES (%s, 'NEW')").format(sql.Identifier(table)), [HOSTILE]
    )
    with django_db_blocker.unblock(), closing_connection():
        cluster = Cluster.objects.create(name=f"stuck-browser-{suffix}", bootstrap_servers=kafka_bootstrap)
        source = SourceDatabase.objects.create(name=f"stuck-browser-{suffix}", url="${SOURCE_DATABASE_URL}")
        binding = Binding.objects.create(
            name=f"stuck-browser-{suffix}",
            cluster=cluster,
            topic=topics[0],
            source=source,
            table=table,
            key_column="ticket_id",
            created_column="created_at",
            consumer_groups=[f"stuck-browser-{suffix}"],
        )
        rule = StuckRule.objects.create(
            name=f"stuck-browser-{suffix}",
            binding=binding,
            status_column="status",
            stuck_values=["NEW"],
            age_column="created_at",
            older_than_seconds=0,
            schedule_seconds=0,  # only on demand in this test
        )
        cache.delete(f"stuck:diagnosis-running:{rule.pk}")
    yield rule.name, ids
    with django_db_blocker.unblock(), closing_connection():
        rule.delete()
        binding.delete()
        cluster.delete()
        source.delete()
    store.drop_tables()
    store.close()
    for future in kafka_admin.delete_topics(topics).values():
        future.result(timeout=30)


def test_it_diagnoses_on_demand_and_updates_the_page_live(
    browser: Browser,
    asgi_server: str,
    admin_credentials: tuple[str, str],
    celery_worker_process: object,
    committed_rule: tuple[str, list[str]],
) -> None:
    rule, ids = committed_rule
    page = logged_in_page(browser, f"{asgi_server}/stuck/?rule={rule}", admin_credentials, live="stuck")
    assert page.text_content("#count-total") == "0"
    page.evaluate("window.__notReloaded = true")

    page.click("#diagnose-now button")
    page.wait_for_function("document.body.dataset.stuckRun !== undefined", timeout=90000)
    page.wait_for_function("document.getElementById('count-total').textContent === '4'", timeout=20000)

    assert page.text_content("#count-waiting") == "3"
    rows = page.eval_on_selector_all(
        "#stuck-items tbody tr", "trs => trs.map(tr => [tr.dataset.key, tr.dataset.verdict])"
    )
    assert {key: verdict for key, verdict in rows if key in ids} == dict.fromkeys(ids, "waiting")
    assert HOSTILE in [key for key, _ in rows]  # shown as text ...
    assert page.query_selector("#stuck-items img") is None  # ... never as markup
    assert page.evaluate("window.__xss") is None
    assert "4 became stuck" in page.text_content("#stuck-changes")
    assert page.evaluate("window.__notReloaded") is True  # updated in place
    assert page.query_selector("#stuck-chart .main-svg") is not None  # Plotly drew the chart
    page.close()
