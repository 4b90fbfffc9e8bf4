"""Typed reads of a consumed record's position and headers.

confluent-kafka types ``Message.topic()``, ``partition()`` and ``offset()`` as optional
(an error event carries none of them) and ``headers()`` as the union the producer
accepts. A consumed record (``msg.error() is None``) always has its position, and its
headers are a list of (name, bytes or None) pairs, or None when it has none.
"""

from __future__ import annotations

from typing import cast

from confluent_kafka import Message

Headers = list[tuple[str, bytes | None]]


def record_position(msg: Message) -> tuple[str, int, int]:
    """Topic, partition and offset of a consumed record (not of an error event)."""
    topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
    assert topic is not None and partition is not None and offset is not None, "an error event, not a record"
    return topic, partition, offset


def record_headers(msg: Message) -> Headers:
    """A consumed record's headers; empty when it has none."""
    # cast: the stub's union also covers the dict a producer may pass; a consumer gets a list.
    return cast(Headers, msg.headers() or [])
