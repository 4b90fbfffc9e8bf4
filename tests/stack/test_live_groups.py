"""An open live socket keeps getting events past the channel layer's group expiry.

channels_redis drops a group member not added again within `group_expiry` (a day by default):
a dashboard left open longer got no more events, and nothing told it. Here Daphne runs with a
4-second expiry and a 1-second refresh, and the event is published by a layer with the same
expiry (the sender drops expired members), 7 seconds after the socket subscribed."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator

import pytest
import websockets
from asgiref.sync import async_to_sync
from channels_redis.core import RedisChannelLayer
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from pytest_django import DjangoDbBlocker

from auditor.accounts.roles import grant_role
from tests.support.live import daphne

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

EXPIRY_S = 4


@pytest.fixture(scope="module")
def short_expiry_daphne(live_env: dict[str, str]) -> Iterator[str]:
    env = dict(live_env, AUDITOR_CHANNEL_GROUP_EXPIRY_S=str(EXPIRY_S), AUDITOR_LIVE_GROUP_REFRESH_S="1")
    with daphne(env, "daphne-short-expiry") as url:
        yield url


@pytest.fixture(scope="module")
def viewer_cookie(django_db_setup: None, django_db_blocker: DjangoDbBlocker) -> Iterator[str]:
    with django_db_blocker.unblock():
        user = get_user_model().objects.create_user(username=f"ws-expiry-{uuid.uuid4().hex[:6]}")
        grant_role(user, "viewer")
        client = Client()
        client.force_login(user)
        cookie = f"sessionid={client.cookies['sessionid'].value}"
    yield cookie
    with django_db_blocker.unblock():
        user.delete()


def _publish_with_expiry(payload: dict[str, object]) -> None:
    config = settings.CHANNEL_LAYERS["default"]["CONFIG"]
    layer = RedisChannelLayer(hosts=config["hosts"], prefix=config["prefix"], group_expiry=EXPIRY_S)
    async_to_sync(layer.group_send)(
        "status", {"type": "audit.event", "group": "status", "event": "status", "payload": payload}
    )


def test_an_open_socket_gets_events_past_the_group_expiry(short_expiry_daphne: str, viewer_cookie: str) -> None:
    async def scenario() -> str:
        url = short_expiry_daphne.replace("http", "ws") + "/ws/live/"
        async with websockets.connect(
            url, origin=short_expiry_daphne, additional_headers={"Cookie": viewer_cookie}
        ) as ws:
            await ws.send(json.dumps({"subscribe": "status"}))
            assert json.loads(await asyncio.wait_for(ws.recv(), 10)) == {"subscribed": "status"}
            await asyncio.sleep(EXPIRY_S + 3)
            await asyncio.to_thread(_publish_with_expiry, {"probe": "late"})
            return str(json.loads(await asyncio.wait_for(ws.recv(), 10))["payload"]["probe"])

    # Before stop 70 the socket joined its groups once: its membership expired, the event went
    # to nobody, and recv timed out.
    assert asyncio.run(scenario()) == "late"
