"""The Celery side of alerting: send a delivery, hand deliveries to workers, re-hand lost ones."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.db import transaction
from django.utils import timezone

from auditor.alerts.delivery import deliver, next_waiting
from auditor.alerts.models import Delivery


@shared_task(time_limit=300, soft_time_limit=280, ignore_result=True)
def deliver_webhook(delivery_id: int) -> None:
    """Send one webhook delivery (retries happen inside, with backoff), then hand over the next
    delivery of its alert, which waited for this one."""
    delivery = deliver(delivery_id)
    following = next_waiting(delivery) if delivery is not None else None
    if following is not None:
        deliver_webhook.delay(following)


def enqueue(delivery_id: int) -> None:
    """Hand the delivery to a Celery worker once the transaction that created it commits."""
    transaction.on_commit(lambda: deliver_webhook.delay(delivery_id))


def requeue_stale_deliveries(older_than: timedelta = timedelta(minutes=10)) -> int:
    """Hand again to workers the deliveries whose task was lost (broker down at commit time,
    worker killed mid-send). Returns how many were queued again."""
    cutoff = timezone.now() - older_than
    with transaction.atomic():
        Delivery.objects.filter(status=Delivery.SENDING, claimed_at__lt=cutoff).update(status=Delivery.PENDING)
        stale = list(
            Delivery.objects.filter(status=Delivery.PENDING, created_at__lt=cutoff).values_list("pk", flat=True)
        )
        for delivery_id in stale:
            enqueue(delivery_id)
    return len(stale)


@shared_task(time_limit=120, ignore_result=True)
def requeue_stale_deliveries_task() -> int:
    """For beat (e.g. every 5 minutes): re-send deliveries whose task was lost."""
    return requeue_stale_deliveries()
