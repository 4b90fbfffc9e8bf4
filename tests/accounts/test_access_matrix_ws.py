"""The live websocket, for every role: anonymous and no-role connections are refused, every
role is accepted (the pages and the API are in test_access_matrix).

Its users are committed for Daphne (another process) to see, so they are made here, outside
test_access_matrix's world, which is never committed."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator

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
