"""Login on every page, websocket auth and origin checks, status pushed live."""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets
import websockets.exceptions

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


@pytest.mark.parametrize("path", ["/status/", "/status/api/", "/pipelines/", "/admin/"])
def test_it_redirects_anonymous_pages_to_login(client, path):
    response = client.get(path)
    assert response.status_code == 302
    assert "/login/" in response["Location"]


def test_it_opens_no_websocket_on_the_login_page(client, admin_user):
    # an anonymous socket is refused anyway; the login page should not try (console errors, log noise)
    assert b"js/live.js" not in client.get("/login/").content
    client.force_login(admin_user)
    assert b"js/live.js" in client.get("/status/").content


def test_it_serves_plotly_locally(client, admin_user):
    client.force_login(admin_user)
    response = client.get("/static/vendor/plotly/plotly.min.js")
    assert response.status_code == 200
    body = b"".join(response.streaming_content)
    assert b"plotly" in body[:2000].lower()
    assert len(body) > 1_000_000


def _session_cookie(base_url: str, username: str, password: str) -> str:
    import re
    import urllib.error
    import urllib.request
    from http.cookiejar import CookieJar
    from urllib.parse import urlencode

    jar = CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    page = opener.open(f"{base_url}/login/").read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    data = urlencode({"username": username, "password": password, "csrfmiddlewaretoken": token}).encode()
    try:
        opener.open(urllib.request.Request(f"{base_url}/login/", data=data, headers={"Referer": f"{base_url}/login/"}))
    except urllib.error.HTTPError as exc:  # the page after login may refuse a user without a role
        assert exc.code == 403
    cookies = {c.name: c.value for c in jar}
    assert "sessionid" in cookies, "login failed"
    return f"sessionid={cookies['sessionid']}"


def test_it_refuses_an_anonymous_websocket(asgi_server):
    async def attempt() -> None:
        url = asgi_server.replace("http", "ws") + "/ws/live/"
        async with websockets.connect(url, origin=asgi_server) as ws:
            await ws.recv()

    # Closed before the handshake completes: the server answers the upgrade with 403.
    with pytest.raises(websockets.exceptions.InvalidStatus) as info:
        asyncio.run(attempt())
    assert info.value.response.status_code == 403


def test_it_refuses_a_websocket_from_a_foreign_origin(asgi_server, admin_credentials):
    cookie = _session_cookie(asgi_server, *admin_credentials)

    async def attempt() -> None:
        url = asgi_server.replace("http", "ws") + "/ws/live/"
        async with websockets.connect(url, origin="http://evil.example", additional_headers={"Cookie": cookie}) as ws:
            await ws.recv()

    with pytest.raises(websockets.exceptions.InvalidStatus) as info:
        asyncio.run(attempt())
    assert info.value.response.status_code == 403


def test_it_pushes_a_status_event_to_a_logged_in_websocket(asgi_server, admin_credentials):
    from auditor.lib.live import publish_now

    cookie = _session_cookie(asgi_server, *admin_credentials)

    async def listen() -> dict:
        url = asgi_server.replace("http", "ws") + "/ws/live/"
        async with websockets.connect(url, origin=asgi_server, additional_headers={"Cookie": cookie}) as ws:
            await ws.send(json.dumps({"subscribe": "status"}))
            assert json.loads(await asyncio.wait_for(ws.recv(), 10)) == {"subscribed": "status"}
            await asyncio.to_thread(
                publish_now, "status", "status", {"components": [], "checked_at": 1.0, "probe": "x"}
            )
            return json.loads(await asyncio.wait_for(ws.recv(), 10))

    message = asyncio.run(listen())
    assert message == {
        "group": "status",
        "event": "status",
        "payload": {"components": [], "checked_at": 1.0, "probe": "x"},
    }


@pytest.fixture(scope="module")
def role_users(django_db_setup, django_db_blocker) -> dict[str | None, tuple[str, str]]:
    """Users committed outside the test transaction, so Daphne sees them: one per role and one without."""
    from django.contrib.auth import get_user_model

    from auditor.accounts.roles import grant_role

    users = {}
    with django_db_blocker.unblock():
        for role in (None, "viewer", "operator", "admin"):
            name = f"ws-{role or 'no-role'}"
            user, _ = get_user_model().objects.get_or_create(username=name)
            user.set_password("role-password-1")
            user.save()
            grant_role(user, role)
            users[role] = (name, "role-password-1")
    return users


def test_it_refuses_a_websocket_of_a_user_without_a_role(asgi_server, role_users):
    cookie = _session_cookie(asgi_server, *role_users[None])

    async def attempt() -> None:
        url = asgi_server.replace("http", "ws") + "/ws/live/"
        async with websockets.connect(url, origin=asgi_server, additional_headers={"Cookie": cookie}) as ws:
            await ws.recv()

    with pytest.raises(websockets.exceptions.InvalidStatus) as info:
        asyncio.run(attempt())
    assert info.value.response.status_code == 403


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_it_accepts_a_websocket_for_every_role(asgi_server, role_users, role):
    cookie = _session_cookie(asgi_server, *role_users[role])

    async def subscribe() -> dict:
        url = asgi_server.replace("http", "ws") + "/ws/live/"
        async with websockets.connect(url, origin=asgi_server, additional_headers={"Cookie": cookie}) as ws:
            await ws.send(json.dumps({"subscribe": "stuck"}))
            return json.loads(await asyncio.wait_for(ws.recv(), 10))

    assert asyncio.run(subscribe()) == {"subscribed": "stuck"}
