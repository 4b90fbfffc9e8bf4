from __future__ import annotations

from celery import shared_task

from auditor.alerts.service import deliver, requeue_stale_deliveries


@shared_task(time_limit=300, soft_time_limit=280, ignore_result=True)
def deliver_webhook(delivery_id: int) -> None:
    """Send one webhook delivery (retries happen inside, with backoff)."""
    deliver(delivery_id)


@shared_task(time_limit=120, ignore_result=True)
def requeue_stale_deliveries_task() -> int:
    """For beat (e.g. every 5 minutes): re-send deliveries whose task was lost."""
    return requeue_stale_deliveries()
