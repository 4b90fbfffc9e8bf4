from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from auditor.alerts.models import Channel
from tests.accounts.fixtures import client_as, role_users
from tests.alerts.receiver import Receiver

__all__ = ["client_as", "role_users"]

# Set before any live process starts (they copy this environment), so the Celery worker
# and Daphne can sign test deliveries and reach the loopback receiver: the test settings
# allow private destinations, as the issue asks; refusal is tested with it switched off.
SECRET_ENV = "AUDITOR_TEST_WEBHOOK_SECRET"
os.environ.setdefault(SECRET_ENV, secrets.token_hex(16))
os.environ.setdefault("AUDITOR_WEBHOOK_ALLOW_PRIVATE", "true")


@pytest.fixture
def webhook_settings(settings: Any) -> Any:
    settings.AUDITOR_WEBHOOK_ALLOW_PRIVATE = True
    settings.AUDITOR_WEBHOOK_BACKOFF_SECONDS = 0.01
    settings.AUDITOR_WEBHOOK_TIMEOUT_SECONDS = 2.0
    settings.AUDITOR_WEBHOOK_MAX_ATTEMPTS = 4
    settings.AUDITOR_WEBHOOK_RATE_LIMIT_PER_MINUTE = 100
    return settings


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver(os.environ[SECRET_ENV]) as r:
        yield r


@pytest.fixture
def make_channel(db: None, receiver: Receiver) -> Callable[..., Channel]:
    def make(name: str = "ops", **kwargs: Any) -> Channel:
        values: dict[str, Any] = {
            "url": receiver.url,
            "secret": "${" + SECRET_ENV + "}",
            "events": {
                "finding_kinds": ["missing", "duplicate"],
                "stuck_verdicts": ["skipped"],
                "lint_severity": "error",
                "canary_loss": 5,
            },
            **kwargs,
        }
        bindings = values.pop("bindings", [])
        channel = Channel.objects.create(name=name, **values)
        channel.bindings.set(bindings)
        return channel

    return make
