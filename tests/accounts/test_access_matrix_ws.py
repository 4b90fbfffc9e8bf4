"""The live websocket, for every role: anonymous and no-role connections are refused, every
role is accepted (the pages and the API are in test_access_matrix).

Its users are committed for Daphne (another process) to see, so they are made here, outside
test_access_matrix's world, which is never committed."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import websockets
import websockets.exceptions
from django.contrib.auth import get_user_model
from django.test import Client
from pytest_django import DjangoDbBlocker

from auditor.accounts.roles import ROLES, grant_role
from tests.support.access import ANONYMOUS, NO_ROLE, WHO

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def ws_cookies(django_db_setup: None, django_db_blocker: DjangoDbBlocker) -> Iterator[dict[str, str]]:
    """Session cookies of users committed for Daphne to see: one per role, one without."""
    suffix = uuid.uuid4().hex[:6]
    cookies = {}
    with django_db_blocker.unblock():
        users = []
        for who in (NO_ROLE, *ROLES):
            user = get_user_model().objects.create_user(username=f"matrix-ws-{who}-{suffix}")
            grant_role(user, None if who == NO_ROLE else who)
            client = Client()
            client.force_login(user)
            cookies[who] = f"sessionid={client.cookies['sessionid'].value}"
            users.append(user)
    yield cookies
    with django_db_blocker.unblock():
        for user in users:
            user.delete()


def websocket_outcome(base_url: str, cookie: str | None) -> int | str:
    """The HTTP status of a refused upgrade, or the answer to a subscription."""

    async def attempt() -> int | str:
        url = base_url.replace("http", "ws") + "/ws/live/"
        headers = {"Cookie": cookie} if cookie else {}
        try:
            async with websockets.connect(url, origin=base_url, additional_headers=headers) as ws:
                await ws.send(json.dumps({"subscribe": "status"}))
                return str(await asyncio.wait_for(ws.recv(), 10))
        except websockets.exceptions.InvalidStatus as refused:
            return refused.response.status_code

    return asyncio.run(attempt())


@pytest.mark.integration
@pytest.mark.parametrize("who", WHO)
def test_it_lets_only_roles_use_the_websocket(asgi_server: str, ws_cookies: dict[str, str], who: str) -> None:
    outcome = websocket_outcome(asgi_server, ws_cookies.get(who))
    if who in (ANONYMOUS, NO_ROLE):
        assert outcome == 403  # closed before the handshake completes
    else:
        assert outcome == json.dumps({"subscribed": "status"})


LOSSES = ("role-removed", "logged-out", "deactivated", "password-changed")


@pytest.fixture(scope="module")
def losing_viewers(
    django_db_setup: None, django_db_blocker: DjangoDbBlocker
) -> Iterator[tuple[dict[str, Any], dict[str, str]]]:
    """A viewer per way of losing access, committed for Daphne to see, and its session key."""
    suffix = uuid.uuid4().hex[:6]
    users: dict[str, Any] = {}
    keys: dict[str, str] = {}
    with django_db_blocker.unblock():
        for loss in LOSSES:
            user = get_user_model().objects.create_user(
                username=f"ws-lose-{loss}-{suffix}", password="pw-1-long-enough"
            )
            grant_role(user, "viewer")
            client = Client()
            client.force_login(user)
            users[loss], keys[loss] = user, client.cookies["sessionid"].value
    yield users, keys
    with django_db_blocker.unblock():
        for user in users.values():
            user.delete()


@pytest.mark.integration
def test_an_open_websocket_is_closed_once_its_user_loses_access(
    asgi_server: str, losing_viewers: tuple[dict[str, Any], dict[str, str]]
) -> None:
    """Four viewers subscribe to `status` and each gets an event. Then one loses its role, one
    logs out (its session deleted), one is deactivated and one's password changes, committed
    for Daphne to see. The next event, published after the re-check interval, reaches none
    of them: each socket is closed with 4403. Before stop 70 the role was checked at connect
    only, and every one of them kept receiving events."""
    from django.contrib.sessions.models import Session
    from django.db import connection

    from auditor.lib.consumers import ACCESS_RECHECK_S
    from auditor.lib.live import publish_now

    users, keys = losing_viewers

    def lose_access() -> None:
        # A thread of its own: its own connection, outside the test's transaction, so it commits.
        try:
            grant_role(users["role-removed"], None)
            Session.objects.filter(session_key=keys["logged-out"]).delete()
            users["deactivated"].is_active = False
            users["deactivated"].save()
            users["password-changed"].set_password("another-pw-2-long")
            users["password-changed"].save()
        finally:
            connection.close()

    async def listen(loss: str, changed: asyncio.Event) -> tuple[str, list[str], int | None]:
        url = asgi_server.replace("http", "ws") + "/ws/live/"
        received: list[str] = []
        async with websockets.connect(
            url, origin=asgi_server, additional_headers={"Cookie": f"sessionid={keys[loss]}"}
        ) as ws:
            await ws.send(json.dumps({"subscribe": "status"}))
            assert json.loads(await asyncio.wait_for(ws.recv(), 10)) == {"subscribed": "status"}
            subscribed.append(loss)
            received.append(json.loads(await asyncio.wait_for(ws.recv(), 20))["payload"]["probe"])
            await changed.wait()
            try:
                while True:
                    received.append(json.loads(await asyncio.wait_for(ws.recv(), 20))["payload"]["probe"])
            except websockets.exceptions.ConnectionClosed as closed:
                return loss, received, closed.rcvd.code if closed.rcvd else None
            except TimeoutError:
                return loss, received, None

    subscribed: list[str] = []

    async def scenario() -> list[tuple[str, list[str], int | None]]:
        changed = asyncio.Event()
        tasks = [asyncio.create_task(listen(loss, changed)) for loss in LOSSES]
        for _ in range(100):
            if len(subscribed) == len(LOSSES) or any(t.done() for t in tasks):
                break
            await asyncio.sleep(0.1)
        await asyncio.to_thread(
            publish_now, "status", "status", {"components": [], "checked_at": 1.0, "probe": "before"}
        )
        await asyncio.sleep(1)
        await asyncio.to_thread(lose_access)
        changed.set()
        await asyncio.sleep(ACCESS_RECHECK_S + 0.5)
        # Events after the change, until every socket is closed: one event is enough to close
        # a socket (each socket re-checks its access when an event comes).
        after = {"components": [], "checked_at": 2.0, "probe": "after"}
        for _ in range(15):
            if all(t.done() for t in tasks):
                break
            await asyncio.to_thread(publish_now, "status", "status", after)
            await asyncio.sleep(1)
        return list(await asyncio.wait_for(asyncio.gather(*tasks), 40))

    outcomes = asyncio.run(scenario())
    assert outcomes == [(loss, ["before"], 4403) for loss in LOSSES], outcomes


@pytest.mark.integration
def test_a_database_outage_during_the_access_check_neither_crashes_the_socket_nor_keeps_it_for_good(
    ws_cookies: dict[str, str], monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """The access check reads the session, the user and the role from the database. Before stop
    70 an error there (a Postgres restart) raised out of the event handler: Channels closed the
    socket as crashed (1011) and its group refresher outlived it. Now a failed check keeps the
    socket for up to LIVE_GROUP_REFRESH_S since the last check that answered, then closes it
    (1011) without crashing. Runs the consumer in this process (channels' communicator) on the
    real channel layer, with the check made to fail as the database would."""
    from channels.db import database_sync_to_async
    from channels.layers import get_channel_layer
    from channels.testing import WebsocketCommunicator
    from django.contrib.sessions.backends.db import SessionStore
    from django.db import OperationalError, connections

    from auditor.lib import consumers

    # the module's committed viewer (the connect check reads its role from another thread)
    session_key = ws_cookies["viewer"].split("=", 1)[1]
    user = get_user_model().objects.get(pk=SessionStore(session_key).load()["_auth_user_id"])
    monkeypatch.setattr(consumers, "ACCESS_RECHECK_S", 0.0)

    def unreachable(user_id: Any, session_key: str | None) -> bool:
        raise OperationalError("server closed the connection unexpectedly")

    async def scenario() -> tuple[str, int | None]:
        communicator = WebsocketCommunicator(consumers.LiveConsumer.as_asgi(), "/ws/live/")
        communicator.scope["user"] = user
        communicator.scope["session"] = SessionStore(session_key)
        connected, _ = await communicator.connect()
        assert connected
        await communicator.send_json_to({"subscribe": "status"})
        assert await communicator.receive_json_from(timeout=10) == {"subscribed": "status"}
        monkeypatch.setattr(consumers, "still_allowed", unreachable)
        layer = get_channel_layer()
        event = {"type": "audit.event", "group": "status", "event": "status", "payload": {"probe": "during"}}
        await layer.group_send("status", event)
        during = (await communicator.receive_json_from(timeout=10))["payload"]["probe"]
        # the outage outlasts the grace: closed, 1011, no crash
        settings.LIVE_GROUP_REFRESH_S = 0
        await layer.group_send("status", dict(event, payload={"probe": "after"}))
        closed = await communicator.receive_output(timeout=10)
        await communicator.wait()
        await database_sync_to_async(connections.close_all)()  # the consumer's database thread's
        return during, closed.get("code")

    assert asyncio.run(scenario()) == ("during", 1011)
