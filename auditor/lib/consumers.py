"""The live websocket: authenticated users join the groups their page shows."""

from __future__ import annotations

import json
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from auditor.accounts.roles import VIEWER, has_role
from auditor.lib.live import LIVE_GROUPS


class LiveConsumer(AsyncWebsocketConsumer):
    groups_joined: list[str]

    async def connect(self) -> None:
        user = self.scope.get("user")
        # Same rule as the pages: logged in and holding at least the viewer role.
        if user is None or not user.is_authenticated or not await database_sync_to_async(has_role)(user, VIEWER):
            await self.close(code=4403)
            return
        self.groups_joined = []
        await self.accept()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
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
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def audit_event(self, event: dict[str, Any]) -> None:
        await self.send(json.dumps({"group": event["group"], "event": event["event"], "payload": event["payload"]}))
