"""Headless Chromium: "Run now" queues a run on the worker and the runs page follows it live.

The binding's source URL names an environment variable nobody set, so the worker's run
fails at once (no Spark): the page must show queued → running → failed with the error,
without a reload. The spark-submit path itself is covered by test_run_cli.py.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from pytest_django import DjangoDbBlocker

from tests.support.browser import closing_connection, logged_in_page

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

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


def _runs_page_live(browser: Browser, asgi_server: str, credentials: tuple[str, str], binding: str) -> Page:
    """The runs page of `binding`, logged in through the login page it redirects to, its live
    connection up, marked so that a reload would show (window.__notReloaded)."""
    page = logged_in_page(browser, f"{asgi_server}/reconcile/runs/?binding={binding}", credentials, live="reconcile")
    page.evaluate("window.__notReloaded = true")
    return page


def test_it_follows_a_run_started_from_the_page_live(
    browser: Browser,
    asgi_server: str,
    admin_credentials: tuple[str, str],
    celery_worker_process: object,
    committed_binding: str,
) -> None:
    name = committed_binding
    page = _runs_page_live(browser, asgi_server, admin_credentials, name)
    assert page.locator("#runs tbody tr[data-run]").count() == 0

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


def test_a_run_pushed_live_shows_its_late_rows_beside_its_findings(
    browser: Browser,
    asgi_server: str,
    admin_credentials: tuple[str, str],
    committed_binding: str,
    django_db_blocker: DjangoDbBlocker,
) -> None:
    """A finished run's event, sent on the live channel as the service sends it, draws its row
    in place: a run with no finding and 2 rows a leader change holds shows "2 late", not "none"."""
    from auditor.lib.live import publish_now
    from auditor.pipelines.models import Binding
    from auditor.reconcile.models import ReconcileRun
    from auditor.reconcile.service import LIVE_GROUP

    name = committed_binding
    page = _runs_page_live(browser, asgi_server, admin_credentials, name)
    with django_db_blocker.unblock(), closing_connection():
        run = ReconcileRun.objects.create(
            binding=Binding.objects.get(name=name),
            status=ReconcileRun.OK,
            trigger="schedule",
            counts={"late": 2},
        )
        event = run.as_event()
    # Playwright runs an event loop in this thread, so push from another one (as the worker would).
    pusher = threading.Thread(target=publish_now, args=(LIVE_GROUP, "run", event))
    pusher.start()
    pusher.join(10)
    row = page.locator(f'#runs tbody tr[data-run="{run.pk}"]')
    row.wait_for(timeout=20000)
    assert row.locator('[data-kind="late"]').text_content() == "2 late"
    assert "none" not in row.locator("td.kinds").text_content()
    assert page.evaluate("window.__notReloaded") is True  # drawn in place, not by a reload
    page.close()


@pytest.fixture(scope="module")
def binding_with_a_run_at_ten_utc(django_db_setup: None, django_db_blocker: DjangoDbBlocker) -> Iterator[str]:
    """A binding committed with one successful run that finished at 10:00 UTC."""
    from datetime import UTC, datetime

    from auditor.pipelines.models import Binding, Cluster, SourceDatabase
    from auditor.reconcile.models import ReconcileRun

    name = f"rt-{uuid.uuid4().hex[:8]}"
    with django_db_blocker.unblock(), closing_connection():
        cluster = Cluster.objects.create(name=name, bootstrap_servers="127.0.0.1:9092")
        source = SourceDatabase.objects.create(name=name, url="${SOURCE_DATABASE_URL}")
        binding = Binding.objects.create(
            name=name, cluster=cluster, topic=name, source=source, table="public.items", key_column="id"
        )
        ReconcileRun.objects.create(
            binding=binding,
            status=ReconcileRun.OK,
            trigger="schedule",
            finished_at=datetime(2026, 12, 5, 10, 0, tzinfo=UTC),
            counts={"missing": 3},
        )
    yield name
    with django_db_blocker.unblock(), closing_connection():
        Binding.objects.filter(name=name).delete()
        cluster.delete()
        source.delete()


def test_it_plots_a_run_at_its_utc_time_for_a_viewer_in_another_time_zone(
    browser: Browser, asgi_server: str, admin_credentials: tuple[str, str], binding_with_a_run_at_ten_utc: str
) -> None:
    name = binding_with_a_run_at_ten_utc
    context = browser.new_context(timezone_id="Europe/Berlin")  # UTC+1 in December
    page = context.new_page()
    page.goto(f"{asgi_server}/reconcile/runs/?binding={name}")
    page.fill("input[name=username]", admin_credentials[0])
    page.fill("input[name=password]", admin_credentials[1])
    page.click("button[type=submit]")
    page.wait_for_url(f"{asgi_server}/reconcile/runs/?binding={name}")
    page.wait_for_function("() => (document.getElementById('findings-chart').data || []).length > 0")
    assert page.evaluate("new Date(2026, 11, 5, 11).toISOString()") == "2026-12-05T10:00:00.000Z"  # Berlin indeed

    plotted = page.evaluate(
        """() => {
          const gd = document.getElementById("findings-chart");
          const ax = gd._fullLayout.xaxis;
          // where on the axis Plotly put the run and the range around it, read as UTC wall time
          const at = (v) => new Date(ax.d2c(v)).toISOString();
          const missing = gd.data.find((t) => t.name === "missing");
          return {x: at(missing.x[0]), y: missing.y[0], range: ax.range.map(at), title: ax.title.text};
        }"""
    )
    assert plotted == {
        "x": "2026-12-05T10:00:00.000Z",  # the runs table's "2026-12-05 10:00:00", not 11:00
        "y": 3,
        "range": ["2026-12-05T09:30:00.000Z", "2026-12-05T10:30:00.000Z"],
        "title": "UTC",
    }
    page.locator("#findings-chart").screenshot(path="/tmp/numb-findings-chart.png")
    context.close()
