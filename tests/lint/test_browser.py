"""Headless Chromium: "Scan now" runs a scan on the worker and the results table updates live."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from confluent_kafka.admin import AdminClient
from pytest_django import DjangoDbBlocker

from tests.support.browser import closing_connection, logged_in_page
from tests.support.waiting import wait_until

if TYPE_CHECKING:
    from playwright.sync_api import Browser

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.django_db]


@pytest.fixture(scope="module")
def committed_binding(
    django_db_setup: None, django_db_blocker: DjangoDbBlocker, kafka_admin: AdminClient, kafka_bootstrap: str
) -> Iterator[str]:
    """A cluster and a binding on a topic with unclean leader election, committed for the worker to see."""
    from confluent_kafka.admin import NewTopic
    from django.core.cache import cache

    from auditor.lint.models import LintScan
    from auditor.lint.tasks import SCAN_LOCK_KEY
    from auditor.pipelines.models import Binding, Cluster, SourceDatabase

    suffix = uuid.uuid4().hex[:8]
    topic = f"lint-browser-{suffix}"
    config = {"unclean.leader.election.enable": "true"}
    kafka_admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(timeout=30)
    wait_until(lambda: topic in kafka_admin.list_topics(timeout=5).topics, 20, f"topic {topic}")
    cache.delete(SCAN_LOCK_KEY)  # no stale lock from an interrupted earlier run
    with django_db_blocker.unblock(), closing_connection():
        first_scan = (LintScan.objects.order_by("-id").values_list("id", flat=True).first() or 0) + 1
        cluster = Cluster.objects.create(name=f"lint-browser-{suffix}", bootstrap_servers=kafka_bootstrap)
        source = SourceDatabase.objects.create(name=f"lint-browser-{suffix}", url="postgresql://app@127.0.0.1/app")
        Binding.objects.create(
            name=f"lint-browser-{suffix}",
            cluster=cluster,
            topic=topic,
            source=source,
            table="public.items",
            key_column="id",
            guarantee="at-least-once",
        )
    yield topic
    with django_db_blocker.unblock(), closing_connection():
        LintScan.objects.filter(id__gte=first_scan).delete()
        Binding.objects.filter(cluster=cluster).delete()
        cluster.delete()
        source.delete()
    kafka_admin.delete_topics([topic])[topic].result(timeout=30)


def test_it_scans_on_demand_and_updates_the_results_live(
    browser: Browser,
    asgi_server: str,
    admin_credentials: tuple[str, str],
    celery_worker_process: object,
    committed_binding: str,
) -> None:
    topic = committed_binding  # the cluster has the same name
    page = logged_in_page(browser, f"{asgi_server}/lint/", admin_credentials, live="lint")
    before = page.evaluate("document.body.dataset.lintScan || null")
    page.evaluate("window.__notReloaded = true")

    page.click("#scan-now button")
    page.wait_for_function(
        "(s) => document.body.dataset.lintScan && document.body.dataset.lintScan !== s", arg=before, timeout=60000
    )
    selector = f'#lint-results tbody tr[data-subject="topic {topic}"]'
    page.wait_for_selector(selector, timeout=10000)
    rules = page.eval_on_selector_all(selector, "trs => trs.map(tr => tr.dataset.rule)")
    assert "T004" in rules and "T001" in rules  # replication factor 1, unclean election on
    cells = page.eval_on_selector_all(f'{selector}[data-rule="T004"] td', "tds => tds.map(td => td.textContent)")
    assert cells[:6] == [
        "error",
        "topic",
        f"topic {topic} [{topic}]",
        "T004",
        "unclean.leader.election.enable",
        "true",
    ]
    # the rows built by the live refresh link to the findings the setting explains (the binding has the topic's name)
    links = page.eval_on_selector_all(
        f'{selector}[data-rule="T004"] td.explains a', "as => as.map(a => [a.getAttribute('href'), a.textContent])"
    )
    assert links == [
        [f"/reconcile/findings/?binding={topic}&kind=gap&cause=broker-lost", "gap (broker-lost)"],
        [f"/reconcile/findings/?binding={topic}&kind=missing", "missing"],
    ]
    assert page.evaluate("window.__notReloaded") is True  # updated in place, not by a reload
    assert page.text_content("#scan-trigger") == "manual"
    assert int(page.text_content("#count-error")) >= 2
    page.close()
