"""Headless Chromium logs in and sees every component healthy, updated live."""

from __future__ import annotations

import pytest

from tests.support.browser import logged_in_page

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.django_db]


def test_it_logs_in_and_sees_every_component_healthy(
    browser, asgi_server, admin_credentials, celery_worker_process, celery_beat_process, kafka_brokers
):
    from django.core.cache import cache

    from auditor.status.checks import BEAT_HEARTBEAT_KEY
    from auditor.status.service import SNAPSHOT_KEY

    cache.delete_many([SNAPSHOT_KEY, BEAT_HEARTBEAT_KEY])  # no stale snapshot from an earlier run
    page = logged_in_page(browser, f"{asgi_server}/status/", admin_credentials)
    page.wait_for_selector("#live-state.ok", timeout=20000)

    # Beat's heartbeat and the worker take a few seconds; the page updates itself over the websocket.
    page.wait_for_function(
        """(n) => {
            const rows = [...document.querySelectorAll('#components tbody tr')];
            const names = rows.map(r => r.dataset.component);
            const brokers = names.filter(x => x.startsWith('kafka broker')).length;
            return brokers === n && rows.every(r => r.classList.contains('ok'))
                && ['postgresql', 'redis', 'celery workers', 'celery beat', 'spark'].every(c => names.includes(c));
        }""",
        arg=kafka_brokers,
        timeout=60000,
    )
    states = page.eval_on_selector_all("#components tbody tr .state", "els => els.map(e => e.textContent)")
    assert set(states) == {"healthy"}
    page.close()
