"""Headless Chromium: "Run now" queues a run on the worker and the runs page follows it live.

The binding's source URL names an environment variable nobody set, so the worker's run
fails at once (no Spark): the page must show queued → running → failed with the error,
without a reload. The spark-submit path itself is covered by test_run_cli.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from pytest_django import DjangoDbBlocker

from tests.support.browser import closing_connection

if TYPE_CHECKING:
    from playwright.sync_api import Browser

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.django_db]

UNSET = "RECONCILE_BROWSER_TEST_NEVER_SET"


@pytest.fixture(scope="module")
def committed_binding(django_db_setup: None, django_db_blocker: DjangoDbBlocker, kafka_bootstrap: str) -> Iterator[str]:
    """A binding committed for the worker to see, whose source secret cannot be resolved."""
    from auditor.pipelines.models import Binding, Cluster, SourceDatabase

    name = f"rb-{uuid.uuid4().hex[:8]}"
    with django_db_blocker.unblock(), closing_connection():
        cluster = Cluster.objects.create(name=name, bootstrap_servers=kafka_bootstrap)
        source = SourceDatabase.objects.create(name=name, url=f"postgresql://app:${{{UNSET}}}@127.0.0.1/app")
        Binding.objects.create(
            name=name, cluster=cluster, topic=name, source=source, table="public.items", key_column="id"
        )
    yield name
    with django_db_blocker.unblock(), closing_connection():
        Binding.objects.filter(name=name).delete()  # its runs go with it
        cluster.delete()
        source.delete()


def test_it_follows_a_run_started_from_the_page_live(
    browser: Browser,
    asgi_server: str,
    admin_credentials: tuple[str, str],
    celery_worker_process: object,
    committed_binding: str,
) -> None:
    name = committed_binding
    page = browser.new_page()
    page.goto(f"{asgi_server}/reconcile/runs/?binding={name}")
    assert "/login/" in page.url
    page.fill("input[name=username]", admin_credentials[0])
    page.fill("input[name=password]", admin_credentials[1])
    page.click("button[type=submit]")
    page.wait_for_url(f"{asgi_server}/reconcile/runs/?binding={name}")
    page.wait_for_selector("#live-state.ok", timeout=20000)
    page.wait_for_function("document.body.dataset.live_reconcile === '1'", timeout=10000)
    assert page.locator("#runs tbody tr[data-run]").count() == 0
    page.evaluate("window.__notReloaded = true")

    page.click(f'#bindings tr[data-binding="{name}"] button')

    page.wait_for_function("() => (document.body.dataset.reconcileRun || '').endsWith(':failed')", timeout=60000)
    row = page.locator("#runs tbody tr[data-run]")
    assert row.count() == 1
    cells = row.first.locator("td").all_text_contents()
    assert cells[1:4] == [name, "failed", "manual"]
    assert cells[-1] == f"binding '{name}': environment variable {UNSET} is not set"
    assert "queued" in page.text_content("#run-state")
    assert page.evaluate("window.__notReloaded") is True  # updated in place, not by a reload
    page.close()
