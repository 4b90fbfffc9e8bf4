"""Test sessions share the test stack's Redis, each in its own namespace (tests/conftest.py
_session_namespace): a session starting clears its own keys and never another session's.

Before stop 70 every session started with FLUSHDB, which also deleted the sessions running
beside it: their live groups (so Daphne's sockets got no more events, all of them at once,
with nothing logged), their queued Celery tasks and their cache."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Iterator

import pytest
import redis
import websockets
from django.contrib.auth import get_user_model
from django.test import Client
from pytest_django import DjangoDbBlocker

from auditor.accounts.roles import grant_role
from tests.support.redis_reset import reset_session_redis

pytestmark = pytest.mark.integration


@pytest.fixture
def test_redis() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(os.environ["REDIS_URL"], socket_timeout=5)
    yield client
    client.close()


def test_it_clears_its_own_namespace_and_no_other_sessions(test_redis: redis.Redis) -> None:
    ours = f"auditor-reset-{uuid.uuid4().hex[:8]}"
    other = f"auditor-reset-{uuid.uuid4().hex[:8]}"
    own_keys = [
        f"{ours}:1:status-snapshot",  # the cache (KEY_PREFIX)
        f"{ours}:group:status",  # the channel layer's groups ...
        f"{ours}specific.abc!",  # ... its channels' messages ...
        f"{ours}specific.abc!$inflight",  # ... and what a receiver took
        ours,  # the Celery queue ...
        f"{ours}\x06\x163",  # ... a priority of it ...
        f"_kombu.binding.{ours}",  # ... and its binding
        f"{ours}-gw0:group:status",  # a pytest-xdist worker's: the controller resets before they start
    ]
    foreign_keys = [
        f"{other}:group:status",
        f"{other}specific.abc!",
        other,
        f"_kombu.binding.{other}",
        f"{ours}2:group:status",  # a session whose name only starts with ours
    ]
    for key in own_keys + foreign_keys:
        test_redis.set(key, "x", ex=300)
    try:
        reset_session_redis(test_redis, ours)
        assert [key for key in own_keys if test_redis.exists(key)] == []
        assert [key for key in foreign_keys if test_redis.exists(key)] == foreign_keys
    finally:
        test_redis.delete(*own_keys, *foreign_keys)


@pytest.fixture(scope="module")
def viewer_cookies(django_db_setup: None, django_db_blocker: DjangoDbBlocker) -> Iterator[list[str]]:
    """Session cookies of viewers committed for Daphne to see."""
    suffix = uuid.uuid4().hex[:6]
    cookies, users = [], []
    with django_db_blocker.unblock():
        for n in range(4):
            user = get_user_model().objects.create_user(username=f"session-redis-{n}-{suffix}")
            grant_role(user, "viewer")
            client = Client()
            client.force_login(user)
            cookies.append(f"sessionid={client.cookies['sessionid'].value}")
            users.append(user)
    yield cookies
    with django_db_blocker.unblock():
        for user in users:
            user.delete()


@pytest.mark.django_db
def test_every_live_event_reaches_every_socket_while_another_session_starts(
    asgi_server: str, viewer_cookies: list[str], test_redis: redis.Redis
) -> None:
    """Four sockets subscribe to `status`; six events are published as the status task does
    (publish_now from a thread), some of them after a pause longer than the channel layer's
    blocking pop (5 s), and another test session starts on the same Redis after the first."""
    from channels_redis.core import RedisChannelLayer

    from auditor.lib.live import publish_now

    events = 6
    url = asgi_server.replace("http", "ws") + "/ws/live/"

    async def listen(cookie: str, subscribed: asyncio.Event) -> list[int]:
        received: list[int] = []
        async with websockets.connect(url, origin=asgi_server, additional_headers={"Cookie": cookie}) as ws:
            await ws.send(json.dumps({"subscribe": "status"}))
            assert json.loads(await asyncio.wait_for(ws.recv(), 10)) == {"subscribed": "status"}
            subscribed.set()
            try:
                while len(received) < events:
                    received.append(json.loads(await asyncio.wait_for(ws.recv(), 15))["payload"]["n"])
            except TimeoutError:
                pass
        return received

    async def scenario() -> list[list[int]]:
        subscribed = [asyncio.Event() for _ in viewer_cookies]
        listeners = [asyncio.create_task(listen(c, s)) for c, s in zip(viewer_cookies, subscribed, strict=True)]
        await asyncio.wait_for(asyncio.gather(*(s.wait() for s in subscribed)), 20)
        for n in range(events):
            await asyncio.to_thread(publish_now, "status", "status", {"components": [], "checked_at": 1.0, "n": n})
            if n == 0:
                await asyncio.to_thread(reset_session_redis, test_redis, f"auditor-other-{uuid.uuid4().hex[:8]}")
            await asyncio.sleep(RedisChannelLayer.brpop_timeout + 1 if n % 2 else 0.3)
        return list(await asyncio.gather(*listeners))

    assert asyncio.run(scenario()) == [list(range(events))] * len(viewer_cookies)
