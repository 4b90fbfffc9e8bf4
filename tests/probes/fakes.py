"""In-memory stand-ins for confluent-kafka clients, for tests that need no broker.

They record what the probes hand them and let a test decide when (and how) each
delivery report fires, using real ``confluent_kafka.Message`` objects.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, Message


@dataclass
class Produced:
    topic: str
    value: Any
    key: Any
    partition: int
    headers: list[tuple[str, Any]] | None
    callback: Callable[[KafkaError | None, Message], None] | None
    timestamp: int = 0


@dataclass
class FakeProducer:
    """Queues produce() calls; ``deliver()`` acks them with offsets per partition."""

    config: dict[str, Any]
    max_queue: int = 1_000_000
    queued: list[Produced] = field(default_factory=list)
    delivered: list[Produced] = field(default_factory=list)
    next_offset: dict[tuple[str, int], int] = field(default_factory=lambda: defaultdict(int))
    closed: bool = False

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        callback: Any = None,
        on_delivery: Any = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        if len(self.queued) >= self.max_queue:
            raise BufferError("Local: Queue full")
        self.queued.append(Produced(topic, value, key, partition, headers, callback or on_delivery, timestamp))

    def deliver(self, error: KafkaError | None = None, count: int | None = None) -> int:
        """Fire delivery reports for the oldest ``count`` queued messages (all by default)."""
        batch = self.queued[: len(self.queued) if count is None else count]
        del self.queued[: len(batch)]
        for item in batch:
            partition = item.partition if item.partition >= 0 else 0
            if error is None:
                offset = self.next_offset[(item.topic, partition)]
                self.next_offset[(item.topic, partition)] += 1
                msg = Message(topic=item.topic, partition=partition, offset=offset, key=item.key, value=item.value)
            else:
                msg = Message(topic=item.topic, partition=partition, key=item.key, value=item.value, error=error)
            self.delivered.append(item)
            # Like confluent-kafka: a per-message callback, else the config's on_delivery;
            # delivery.report.only.error skips successes.
            callback = item.callback or self.config.get("on_delivery")
            if error is None and self.config.get("delivery.report.only.error") is True:
                callback = None
            if callback is not None:
                callback(error, msg)
        return len(batch)

    def poll(self, timeout: float | None = None) -> int:
        return 0

    def flush(self, timeout: float | None = None) -> int:
        self.deliver()
        return 0

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        self.deliver(KafkaError(KafkaError._PURGE_QUEUE))

    def __len__(self) -> int:
        return len(self.queued)

    def close(self) -> bool:
        self.closed = True
        return True

    def values(self, topic: str | None = None) -> list[bytes]:
        """Values written so far (delivered or queued), optionally for one topic."""
        return [p.value for p in self.delivered + self.queued if topic is None or p.topic == topic]


class FactoryRecorder:
    """A producer_factory that builds FakeProducers and remembers them by client.id."""

    def __init__(self) -> None:
        self.producers: list[FakeProducer] = []

    def __call__(self, config: dict[str, Any]) -> FakeProducer:
        producer = FakeProducer(dict(config), max_queue=int(config.get("queue.buffering.max.messages", 1_000_000)))
        self.producers.append(producer)
        return producer

    @property
    def ledger(self) -> FakeProducer:
        return next(p for p in self.producers if str(p.config.get("client.id", "")).endswith(".audit-ledger"))


@dataclass
class FakeConsumer:
    """Hands out prepared messages from poll()/consume() and records offset calls."""

    config: dict[str, Any]
    messages: list[Message] = field(default_factory=list)
    calls: list[tuple[str, Any]] = field(default_factory=list)
    closed: bool = False

    def poll(self, timeout: float | None = None) -> Message | None:
        return self.messages.pop(0) if self.messages else None

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        batch, self.messages = self.messages[:num_messages], self.messages[num_messages:]
        return batch

    def commit(self, **kwargs: Any) -> None:
        self.calls.append(("commit", kwargs))

    def store_offsets(self, **kwargs: Any) -> None:
        self.calls.append(("store_offsets", kwargs))

    def assign(self, partitions: Any) -> None:
        self.calls.append(("assign", partitions))

    def subscribe(self, topics: Any, **kwargs: Any) -> None:
        self.calls.append(("subscribe", (topics, kwargs)))

    def assignment(self) -> list[Any]:
        return []

    def consumer_group_metadata(self) -> bytes:
        return b"CGMDv2:fake"

    def close(self) -> None:
        self.closed = True
