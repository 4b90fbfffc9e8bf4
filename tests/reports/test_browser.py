"""Headless Chromium: a report built from real data opens with its Plotly charts drawn.

The data is real where it is quick to make: a demo pipeline's tickets (three produced
and never consumed, one hostile row never produced) diagnosed by the stuck-item
diagnosis, a lint scan of the live broker, and a canary run against it. Reconciliation
runs are inserted (a Spark run would take most of the test budget on two cores). The
operator's "Build now" builds the report in the server; the page must draw every chart
from the static plotly.js, and the downloaded file must draw them offline.
"""

from __future__ import annotations

import io
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from psycopg import sql
from pytest_django import DjangoDbBlocker

from tests.support.browser import closing_connection, logged_in_page
from tests.support.waiting import wait_until

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.django_db]

HOSTILE = '<img src=x onerror="window.__xss=1">'
CHARTS = ("chart-reconcile-1", "chart-stuck-1", "chart-canary-1")


@dataclass
class RealData:
    binding: str
    canary_topic: str
    stuck_total: int


@pytest.fixture(scope="module")
def real_data(
    django_db_setup: None, django_db_blocker: DjangoDbBlocker, kafka_admin: Any, kafka_bootstrap: str
) -> Iterator[RealData]:
    from confluent_kafka.admin import NewTopic
    from django.core.management import call_command
    from django.utils import timezone

    from auditor.canary.models import CanaryPoint
    from auditor.demo.options import ProbeTopics
    from auditor.demo.producer import TicketProducer
    from auditor.demo.store import TicketStore
    from auditor.lint.models import LintScan
    from auditor.pipelines.models import Binding, Cluster, SourceDatabase, StuckRule
    from auditor.reconcile.models import Finding, ReconcileRun
    from auditor.reports.models import Report
    from auditor.stuck.service import DiagnosisOptions, run_diagnosis

    suffix = uuid.uuid4().hex[:8]
    name = f"report-browser-{suffix}"
    topics = [name, f"{name}-pl", f"{name}-cl"]
    canary_topic = f"{name}-canary"
    futures = kafka_admin.create_topics(
        [NewTopic(topics[0], 1, 1, config={"unclean.leader.election.enable": "true"})]
        + [NewTopic(t, 1, 1) for t in topics[1:]]
    )
    for future in futures.values():
        future.result(timeout=30)
    wait_until(lambda: set(topics) <= set(kafka_admin.list_topics(timeout=5).topics), 20, "the topics")
    table = f"tickets_report_{suffix}"
    source_url = os.environ["SOURCE_DATABASE_URL"]
    store = TicketStore(source_url, table, f"processed_report_{suffix}")
    store.ensure_schema()
    producer = TicketProducer(
        kafka_config={"bootstrap.servers": kafka_bootstrap},
        store=TicketStore(source_url, table, f"processed_report_{suffix}"),
        topic=topics[0],
        probe_topics=ProbeTopics(topics[1], topics[2], topics[2], 0.2),
    )
    producer.create_tickets(3)
    producer.close(30)
    store.conn.execute(
        sql.SQL("INSERT INTO {} (ticket_id, status) VALUES (%s, 'NEW')").format(sql.Identifier(table)), [HOSTILE]
    )
    with django_db_blocker.unblock(), closing_connection():
        first_report = (Report.objects.order_by("-id").values_list("id", flat=True).first() or 0) + 1
        first_scan = (LintScan.objects.order_by("-id").values_list("id", flat=True).first() or 0) + 1
        cluster = Cluster.objects.create(name=name, bootstrap_servers=kafka_bootstrap)
        source = SourceDatabase.objects.create(name=name, url="${SOURCE_DATABASE_URL}")
        binding = Binding.objects.create(
            name=name,
            cluster=cluster,
            topic=topics[0],
            source=source,
            table=table,
            key_column="ticket_id",
            created_column="created_at",
            consumer_groups=[name],
            schedule_seconds=0,
        )
        rule = StuckRule.objects.create(
            name=name,
            binding=binding,
            status_column="status",
            stuck_values=["NEW"],
            age_column="created_at",
            older_than_seconds=0,
            schedule_seconds=0,
        )
        options = DiagnosisOptions(engine="python", producer_ledger_topic=topics[1], consumer_ledger_topic=topics[2])
        run = run_diagnosis(rule, "cli", options=options)
        assert run.status == "ok", run.error
        from auditor.lint.service import scan_all

        scan = scan_all(LintScan.MANUAL, clusters=[cluster], clients_topic=topics[2])
        assert scan.error_count >= 1, scan.as_event()
        call_command(
            "audit",
            "canary",
            "--topic",
            canary_topic,
            "--bootstrap-servers",
            kafka_bootstrap,
            "--duration",
            "3",
            "--rate",
            "20",
            "--sla",
            "2",
            "--json",
            stdout=io.StringIO(),
        )
        assert CanaryPoint.objects.filter(topic=canary_topic).exists()
        now = timezone.now()
        for n, counts in enumerate(({"missing": 3}, {"missing": 2, "duplicate": 1}, {"missing": 1})):
            run_row = ReconcileRun.objects.create(
                binding=binding,
                status="ok",
                trigger="schedule",
                counts=counts,
                finished_at=now - timedelta(minutes=30 - 10 * n),
            )
            ReconcileRun.objects.filter(pk=run_row.pk).update(created_at=now - timedelta(minutes=31 - 10 * n))
        Finding.objects.create(run=run_row, binding=binding, kind="missing", key=HOSTILE)
    yield RealData(name, canary_topic, run.total)
    with django_db_blocker.unblock(), closing_connection():
        Report.objects.filter(id__gte=first_report).delete()
        LintScan.objects.filter(id__gte=first_scan).delete()
        CanaryPoint.objects.filter(topic=canary_topic).delete()
        rule.delete()
        binding.delete()  # its runs and findings go with it
        cluster.delete()
        source.delete()
    store.drop_tables()
    store.close()
    for future in kafka_admin.delete_topics([*topics, canary_topic]).values():
        try:
            future.result(timeout=30)
        except Exception:  # noqa: BLE001 - the canary topic may not exist if the run failed early
            pass


def charts_drawn(page: Page) -> None:
    for chart in CHARTS:
        page.wait_for_selector(f"#{chart} svg.main-svg", timeout=20000)


def test_it_builds_a_report_from_real_data_and_draws_its_charts(
    browser: Browser, asgi_server: str, admin_credentials: tuple[str, str], real_data: RealData
) -> None:
    page = logged_in_page(browser, f"{asgi_server}/reports/", admin_credentials)

    page.fill("#build-form input[name=since]", "2h")
    page.click("#build-form button[type=submit]")
    page.wait_for_url(f"{asgi_server}/reports/*/", timeout=60000)

    charts_drawn(page)
    assert page.text_content("#report-status") == "ok"
    assert page.text_content('[data-total="stuck"] .n') == str(real_data.stuck_total) != "0"
    assert page.text_content('[data-total="findings"] .n') == "1"
    assert int(page.text_content('[data-total="lint_errors"] .n') or 0) >= 1
    assert real_data.canary_topic in page.text_content("#section-canary")
    assert page.query_selector("#report img") is None and page.evaluate("window.__xss") is None

    # The download is one file with plotly.js inline: it draws its charts with the network off.
    download_url = page.get_attribute("#download-html", "href")
    document = page.request.get(f"{asgi_server}{download_url}").text()
    offline = browser.new_context(offline=True)
    try:
        saved = offline.new_page()
        saved.set_content(document, wait_until="load")
        charts_drawn(saved)
        assert saved.evaluate("window.__xss") is None
    finally:
        offline.close()
