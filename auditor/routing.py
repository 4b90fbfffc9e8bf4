"""Websocket routes: one live endpoint; pages subscribe to the groups they show."""

from django.urls import path

from auditor.lib.consumers import LiveConsumer

websocket_urlpatterns = [path("ws/live/", LiveConsumer.as_asgi())]
