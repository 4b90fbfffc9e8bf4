"""A task runs on the real worker through Redis."""

from __future__ import annotations

import uuid

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def test_it_runs_a_task_on_the_worker(celery_worker_process):
    from auditor.status.tasks import echo

    token = uuid.uuid4().hex
    assert echo.delay(token).get(timeout=30) == token


def test_it_reports_the_worker_in_the_status_checks(celery_worker_process):
    from auditor.status.checks import check_celery_workers

    status = check_celery_workers()
    assert status.healthy, status.detail
    assert "worker(s)" in status.detail
