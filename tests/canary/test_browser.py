"""Headless Chromium: /canary/ draws Plotly charts and the latest minute, and updates live."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from auditor.canary.models import CanaryPoint
from auditor.lib.live import publish_now
from tests.support.browser import closing_connection

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.django_db]

SCREENSHOTS = Path(settings.BASE_DIR) / "var" / "screenshots"


@pytest.fixture(scope="module")
def committed_points(django_db_setup, django_db_blocker) -> Iterator[str]:
    """Points committed to the test database, so that the live server sees them."""
    topic = f"canary-browser-{uuid.uuid4().hex[:8]}"
    now = timezone.now().replace(second=0, microsecond=0)
    with django_db_blocker.unblock(), closing_connection():
        CanaryPoint.objects.bulk_create(
            CanaryPoint(
                session="b" * 32,
                topic=topic,
                minute=now - timedelta(minutes=m),
                partition=p,
                leader=p + 1,
                sent=600,
                received=600,
                lost=int(m == 1 and p == 2),
                # the lost record was sent to broker 1, which then failed over to broker 3
                lost_leaders={"1": 1} if m == 1 and p == 2 else {},
                p50_ms=1.5,
                p99_ms=8.0,
                max_ms=30.0,
            )
            for m in range(1, 6)
            for p in range(3)
        )
    yield topic
    with django_db_blocker.unblock(), closing_connection():
        CanaryPoint.objects.filter(topic=topic).delete()


def test_it_draws_the_charts_and_updates_the_latest_minute_live(
    browser, asgi_server, admin_credentials, committed_points
):
    topic = committed_points
    page = browser.new_page()
    page.goto(f"{asgi_server}/login/?next=/canary/%3Ftopic%3D{topic}")
    page.fill("input[name=username]", admin_credentials[0])
    page.fill("input[name=password]", admin_credentials[1])
    page.click("button[type=submit]")
    page.wait_for_url(f"{asgi_server}/canary/?topic={topic}")

    for chart in ("partition-lost", "partition-duplicated", "partition-p99", "broker-lost", "broker-p99"):
        page.wait_for_selector(f"#chart-{chart} svg.main-svg", timeout=20000)
    assert page.locator("#chart-partition-lost .legend .traces").count() == 3  # one trace per partition
    assert page.locator("#chart-broker-lost .legend .traces").count() == 3  # one per leader broker
    rows = page.eval_on_selector_all("#canary-latest tbody tr", "trs => trs.map(tr => tr.dataset.partition)")
    assert rows == ["0", "1", "2"]
    assert page.text_content("[data-total=lost]") == "1"
    # the loss is drawn under the broker the record was sent to, not the leader at minute close
    lost_by_broker = page.evaluate(
        "() => Object.fromEntries(document.getElementById('chart-broker-lost').data"
        ".map(t => [t.name, t.y.reduce((a, b) => a + (b || 0), 0)]))"
    )
    assert lost_by_broker == {"broker 1": 1, "broker 2": 0, "broker 3": 0}
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "canary.png"), full_page=True)

    # A minute closing in the canary reaches the open page over the websocket.
    page.wait_for_selector("#live-state.ok", timeout=20000)
    page.wait_for_function("document.body.dataset.live_canary === '1'", timeout=10000)
    minute = timezone.now().replace(second=0, microsecond=0).isoformat()
    point = {
        "session": "c" * 32,
        "cluster": "",
        "bootstrap_servers": "",
        "scope": "",
        "minute": minute,
        "partition": 0,
        "leader": 1,
        "sent": 600,
        "received": 590,
        "lost": 10,
        "duplicated": 0,
        "out_of_order": 0,
        "late": 0,
        "produce_errors": 0,
        "p50_ms": 1.0,
        "p99_ms": 5.0,
        "max_ms": 9.0,
        "partial": False,
    }
    # A canary on another cluster shares the topic name: its minute (pushed first) is not this page's.
    elsewhere = {**point, "session": "d" * 32, "cluster": "east", "scope": "east", "lost": 100, "received": 500}
    # Playwright runs an event loop in this thread, so push from another one (as the canary process would).
    for pushed in (elsewhere, point):
        pusher = threading.Thread(target=publish_now, args=("canary", "points", {"topic": topic, "points": [pushed]}))
        pusher.start()
        pusher.join(10)
    page.wait_for_function("document.querySelector('[data-total=lost]').textContent !== '1'", timeout=10000)
    assert page.text_content("[data-total=lost]") == "11"
    first_row = page.eval_on_selector_all(
        "#canary-latest tbody tr:first-child td", "tds => tds.map(t => t.textContent)"
    )
    assert first_row[:5] == ["0", "1", "600", "590", "10"]
    page.close()
