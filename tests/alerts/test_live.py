"""End to end through the real processes: the "send test" button on Daphne queues a delivery,
the Celery worker signs it and sends it to the loopback receiver."""

from __future__ import annotations

import os
import re
import time
import urllib.request
import uuid
from collections.abc import Iterator
from http.cookiejar import CookieJar
from urllib.parse import urlencode

import pytest
from django.contrib.auth import get_user_model

from auditor.accounts.roles import grant_role
from auditor.alerts.models import Channel, Delivery
from tests.support.webhooks import SECRET_ENV, Receiver

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


@pytest.fixture(scope="module")
def live_receiver() -> Iterator[Receiver]:
    with Receiver(os.environ[SECRET_ENV]) as receiver:
        yield receiver


@pytest.fixture(scope="module")
def committed(django_db_setup, django_db_blocker, live_receiver) -> Iterator[tuple[Channel, str, str]]:
    """An operator and a channel committed to the test database, where the live processes see them."""
    username, password = f"op-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    with django_db_blocker.unblock():
        user = get_user_model().objects.create_user(username=username, password=password)
        grant_role(user, "operator")
        channel = Channel.objects.create(
            name=f"live-{uuid.uuid4().hex[:8]}", url=live_receiver.url, secret="${" + SECRET_ENV + "}"
        )
    yield channel, username, password
    with django_db_blocker.unblock():
        channel.delete()
        user.delete()


def _opener_logged_in(base_url: str, username: str, password: str) -> urllib.request.OpenerDirector:
    jar = CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    page = opener.open(f"{base_url}/login/").read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    data = urlencode({"username": username, "password": password, "csrfmiddlewaretoken": token}).encode()
    opener.open(urllib.request.Request(f"{base_url}/login/", data=data))
    assert "sessionid" in {c.name for c in jar}, "login failed"
    return opener


def test_it_sends_a_test_from_the_button_through_the_worker(
    asgi_server, celery_worker_process, committed, live_receiver
):
    channel, username, password = committed
    opener = _opener_logged_in(asgi_server, username, password)
    page = opener.open(f"{asgi_server}/alerts/channels/{channel.pk}/").read().decode()
    assert 'id="send-test"' in page
    token = re.search(
        r'action="/alerts/channels/\d+/test/">\s*<input type="hidden" name="csrfmiddlewaretoken" '
        r'value="([^"]+)"',
        page,
    ).group(1)
    opener.open(
        urllib.request.Request(
            f"{asgi_server}/alerts/channels/{channel.pk}/test/", data=urlencode({"csrfmiddlewaretoken": token}).encode()
        )
    )

    [request] = live_receiver.wait_for(1, timeout=30)
    assert request.signature_valid
    assert request.json()["event"] == "test" and request.json()["channel"] == channel.name
    deadline = time.monotonic() + 20
    delivery = Delivery.objects.get(channel=channel)
    while delivery.status != Delivery.DELIVERED and time.monotonic() < deadline:
        time.sleep(0.1)
        delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.status_code) == ("delivered", 1, 200)
    assert request.headers["X-Auditor-Delivery"] == str(delivery.pk)
