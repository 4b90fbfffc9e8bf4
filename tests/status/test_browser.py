"""Headless Chromium: the overview turns a pipeline broken when a real reconciliation finds
missing items, says why, and turns it kept, live, when an operator acknowledges them.

Ground truth comes from the test's own writes: rows 1-4 in the source table, records for
1 and 2 only in the topic, so 3 and 4 are the missing ones. The reconciliation is the real
Spark job (in process, the suite's session), writing its findings to the committed test
database that the live server reads.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from django.conf import settings
from pytest_django import DjangoDbBlocker

from tests.support.browser import closing_connection

if TYPE_CHECKING:
    from playwright.sync_api import Browser

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.django_db]


@pytest.fixture(scope="module")
def pipeline(
    django_db_setup: None, django_db_blocker: DjangoDbBlocker, kafka_bootstrap: str, kafka_admin: Any
) -> Iterator[dict[str, Any]]:
    """A committed binding over a real table (rows 1-4) and topic (records of 1 and 2)."""
    import os

    from auditor.accounts.models import Acknowledgement
    from auditor.pipelines.models import Binding, Cluster, SourceDatabase

    name = f"ov-{uuid.uuid4().hex[:8]}"
    table = name.replace("-", "_")
    source_url = os.environ["SOURCE_DATABASE_URL"]
    with psycopg.connect(source_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, created_at timestamptz NOT NULL)")
        conn.execute(f"INSERT INTO {table} SELECT i, now() - interval '1 hour' FROM generate_series(1, 4) AS i")
    kafka_admin.create_topics([NewTopic(name, 1, -1)])[name].result(30)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    created_ms = int((time.time() - 3600) * 1000)
    for key in ("1", "2"):
        producer.produce(name, key=key.encode(), value=b"{}", timestamp=created_ms)
    assert producer.flush(30) == 0
    with django_db_blocker.unblock(), closing_connection():
        # The test acknowledges through the live server (committed): those go afterwards.
        acks_before = set(Acknowledgement.objects.values_list("id", flat=True))
        cluster = Cluster.objects.create(name=name, bootstrap_servers=kafka_bootstrap)
        source = SourceDatabase.objects.create(name=name, url="${SOURCE_DATABASE_URL}")
        binding = Binding.objects.create(
            name=name,
            cluster=cluster,
            topic=name,
            source=source,
            table=f"public.{table}",
            key_column="id",
            created_column="created_at",
            record_key="key",
            grace_seconds=30,
            schedule_seconds=300,
        )
    yield {"name": name, "binding": binding, "missing": {"3", "4"}}
    with django_db_blocker.unblock(), closing_connection():
        Acknowledgement.objects.exclude(id__in=acks_before).delete()
        Binding.objects.filter(name=name).delete()
        cluster.delete()
        source.delete()
    with psycopg.connect(source_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    kafka_admin.delete_topics([name])


def login(page: Any, base: str, credentials: tuple[str, str], path: str) -> None:
    page.goto(f"{base}{path}")
    page.fill("input[name=username]", credentials[0])
    page.fill("input[name=password]", credentials[1])
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}{path}")


def test_the_overview_shows_a_broken_pipeline_and_turns_kept_when_acknowledged(
    browser: Browser,
    asgi_server: str,
    admin_credentials: tuple[str, str],
    spark: Any,
    pipeline: dict[str, Any],
    django_db_blocker: DjangoDbBlocker,
    tmp_path: Path,
) -> None:
    from auditor.reconcile.conf import IN_PROCESS
    from auditor.reconcile.models import Finding, ReconcileRun
    from auditor.reconcile.service import execute_run, start_run

    name = pipeline["name"]
    row = f'#pipelines tr[data-binding="{name}"]'
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    overview = context.new_page()
    login(overview, asgi_server, admin_credentials, "/")
    overview.wait_for_selector("#live-state.ok", timeout=20000)
    overview.wait_for_function("document.body.dataset.live_reconcile === '1'", timeout=10000)
    assert overview.get_attribute(row, "data-verdict") == "unknown"
    assert "no reconciliation has run yet" in overview.text_content(f"{row} .reasons")
    overview.evaluate("window.__notReloaded = true")

    saved = settings.RECONCILE_STATE_DIR if hasattr(settings, "RECONCILE_STATE_DIR") else None
    settings.RECONCILE_STATE_DIR = str(tmp_path / "state")
    outcome: dict[str, Any] = {}

    def reconcile() -> None:
        # Off Playwright's thread (its event loop would refuse the live publish), like a worker.
        with django_db_blocker.unblock(), closing_connection():
            run = execute_run(start_run(pipeline["binding"], ReconcileRun.CLI), IN_PROCESS)
            outcome["run"] = run
            outcome["missing"] = set(Finding.objects.filter(run=run, kind="missing").values_list("key", flat=True))

    try:
        worker = threading.Thread(target=reconcile)
        worker.start()
        worker.join(600)
        run = outcome["run"]
        assert run.status == "ok", run.error
        found = outcome["missing"]
    finally:
        if saved is None:
            del settings.RECONCILE_STATE_DIR
        else:
            settings.RECONCILE_STATE_DIR = saved
    assert found == pipeline["missing"]  # the job agrees with what the test wrote

    overview.wait_for_selector(f'{row}[data-verdict="broken"]', timeout=30000)
    reasons = overview.text_content(f"{row} .reasons")
    assert "2 missing since" in reasons
    assert overview.evaluate("window.__notReloaded") is True  # turned broken live, not by a reload
    overview.screenshot(path=str(SCREENSHOTS / "overview-broken-1280.png"), full_page=True)

    findings = context.new_page()  # the same session
    findings.goto(f"{asgi_server}/reconcile/findings/?binding={name}&kind=missing")
    assert findings.locator("#findings tbody tr[data-finding]").count() == 2
    findings.check("#select-page")
    assert findings.text_content("#selected-count") == "2"
    findings.fill("#bulk-ack input[name=reason]", "replayed from the outbox")
    findings.click("#bulk-ack button[type=submit]")
    findings.wait_for_selector("ul.messages li")
    assert "Acknowledged 2 findings." in findings.text_content("ul.messages")
    assert findings.locator('#findings tbody tr[data-ack="ack"]').count() == 2

    overview.wait_for_selector(f'{row}[data-verdict="kept"]', timeout=30000)
    assert "2 findings acknowledged" in overview.text_content(f"{row} .reasons")
    assert overview.evaluate("window.__notReloaded") is True
    overview.set_viewport_size({"width": 1400, "height": 900})
    overview.screenshot(path=str(SCREENSHOTS / "overview-kept-1400.png"), full_page=True)
    width = overview.evaluate("document.documentElement.scrollWidth")
    assert width <= 1400
    context.close()


SCREENSHOTS = Path(settings.BASE_DIR) / "var" / "screenshots"
SCREENSHOTS.mkdir(parents=True, exist_ok=True)
