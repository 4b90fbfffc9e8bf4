"""Which ledger topics a binding's probes write: the one answer every reader of them uses
(the reconciliation job's input and the stuck diagnosis)."""

from __future__ import annotations

import os

from django.conf import settings

from auditor.pipelines.models import Binding
from auditor.probes.topics import CONSUMER_LEDGER_TOPIC, PRODUCER_LEDGER_TOPIC


def ledger_topics(binding: Binding, producer: str | None = None, consumer: str | None = None) -> tuple[str, str]:
    """(producer ledger, consumer ledger): the explicit names, else the binding's own fields
    (producer_ledger_topic / consumer_ledger_topic) when set, else AUDITOR_PRODUCER_LEDGER_TOPIC / AUDITOR_CONSUMER_LEDGER_TOPIC (a
    Django setting or the environment), else the probes' defaults."""

    def pick(explicit: str | None, own: str, name: str, default: str) -> str:
        return explicit or own or getattr(settings, name, None) or os.environ.get(name) or default

    return (
        pick(producer, binding.producer_ledger_topic, "AUDITOR_PRODUCER_LEDGER_TOPIC", PRODUCER_LEDGER_TOPIC),
        pick(consumer, binding.consumer_ledger_topic, "AUDITOR_CONSUMER_LEDGER_TOPIC", CONSUMER_LEDGER_TOPIC),
    )
