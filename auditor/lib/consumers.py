"""The live websocket: authenticated users join the groups their page shows.

Access is checked at connect, again before events are sent (at most every ACCESS_RECHECK_S)
and every LIVE_GROUP_REFRESH_S: a socket whose user logged out, was deactivated, changed
password or lost every role is closed, as the pages would refuse their next request. A socket
joins its groups again every LIVE_GROUP_REFRESH_S: the channel layer drops a member not added
again within its group expiry (a day), and a page left open that long would get no more
events, silently."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from importlib import import_module
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.utils.crypto import constant_time_compare

from auditor.accounts.roles import VIEWER, has_role
from auditor.lib.live import LIVE_GROUPS

log = logging.getLogger(__name__)

ACCESS_RECHECK_S = 5.0
CLOSE_FORBIDDEN = 4403
CLOSE_UNCHECKED = 1011  # access could not be checked for too long: the page reconnects


def still_allowed(user_id: Any, session_key: str | None) -> bool:
    """The session still exists and names the user, whose password is unchanged since the
    login (the session's auth hash), who is active and holds at least the viewer role."""
    if not session_key:
        return False
    data = import_module(settings.SESSION_ENGINE).SessionStore(session_key).load()
    if str(data.get(SESSION_KEY)) != str(user_id):
        return False
    user = get_user_model().objects.filter(pk=user_id, is_active=True).first()
    if user is None:
        return False
    if not constant_time_compare(data.get(HASH_SESSION_KEY, ""), user.get_session_auth_hash()):
        return False
    return has_role(user, VIEWER)


class LiveConsumer(AsyncWebsocketConsumer):
    groups_joined: list[str]
    access_lock: asyncio.Lock
    allowed_until: float = 0.0  # monotonic: access was last checked and holds until then
    closed_for_access: bool = False
    confirmed_at: float = 0.0  # monotonic: the last check that answered
    refresher: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        # Same rule as the pages: logged in and holding at least the viewer role.
        if user is None or not user.is_authenticated or not await database_sync_to_async(has_role)(user, VIEWER):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.groups_joined = []
        self.access_lock = asyncio.Lock()
        self.confirmed_at = time.monotonic()
        self.allowed_until = self.confirmed_at + ACCESS_RECHECK_S
        await self.accept()
        self.refresher = asyncio.ensure_future(self._refresh(float(settings.LIVE_GROUP_REFRESH_S)))

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        # however the consumer ends (a close, a crash), its refresher ends with it
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self.refresher is not None:
                self.refresher.cancel()

    async def _refresh(self, every_s: float) -> None:
        """Every `every_s`: access checked, and the groups joined again (their expiry restarts)."""
        while True:
            await asyncio.sleep(every_s)
            try:
                if not await self._still_allowed(force=True):
                    return
                async with self.access_lock:
                    if self.closed_for_access:
                        return
                    for group in list(self.groups_joined):
                        await self.channel_layer.group_add(group, self.channel_name)
            except Exception:  # a Redis blip: the next round tries again
                log.exception("could not join the live socket's groups again")

    async def _leave_groups(self) -> None:
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)
        self.groups_joined = []

    async def _still_allowed(self, force: bool = False) -> bool:
        """Access re-checked (at most every ACCESS_RECHECK_S unless `force`); the socket closed
        when it ended. A check that fails (the database unreachable) keeps the socket as it was
        for up to LIVE_GROUP_REFRESH_S since the last check that answered, then closes it (1011),
        never crashing the consumer."""
        async with self.access_lock:
            if self.closed_for_access:
                return False
            now = time.monotonic()
            if not force and now < self.allowed_until:
                return True
            session = self.scope.get("session")
            user = self.scope["user"]
            try:
                allowed = await database_sync_to_async(still_allowed)(user.pk, getattr(session, "session_key", None))
            except Exception:
                log.exception("could not check the live socket's access")
                if now - self.confirmed_at < float(settings.LIVE_GROUP_REFRESH_S):
                    self.allowed_until = now + ACCESS_RECHECK_S  # asked again then, not on every event
                    return True
                allowed, code = False, CLOSE_UNCHECKED
            else:
                code = CLOSE_FORBIDDEN
            if allowed:
                self.confirmed_at = now
                self.allowed_until = now + ACCESS_RECHECK_S
                return True
            self.closed_for_access = True
            await self._leave_groups()
            await self.close(code=code)
            return False

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if not await self._still_allowed():
            return
        try:
            message = json.loads(text_data or "{}")
        except json.JSONDecodeError:
            await self.send(json.dumps({"error": "messages must be JSON"}))
            return
        group = message.get("subscribe")
        if group not in LIVE_GROUPS:
            await self.send(json.dumps({"error": f"unknown group {group!r}"}))
            return
        if group not in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
            self.groups_joined.append(group)
        await self.send(json.dumps({"subscribed": group}))

    async def disconnect(self, code: int) -> None:
        if self.refresher is not None:
            self.refresher.cancel()
        await self._leave_groups()

    async def audit_event(self, event: dict[str, Any]) -> None:
        if not await self._still_allowed():
            return
        await self.send(json.dumps({"group": event["group"], "event": event["event"], "payload": event["payload"]}))
