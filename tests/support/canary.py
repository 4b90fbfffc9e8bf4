"""Helpers of the canary tests: watermarks read beside a running canary, a fault injected next to it."""

from __future__ import annotations

import threading
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition


def high_watermark(consumer: Consumer, topic: str, partition: int) -> int:
    """The partition's end offset; -1 while a new topic's leader does not serve it yet."""
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=5)[1]
    except KafkaException:
        return -1


def watermark_reader(bootstrap: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}", "log_level": 0})


class Background(threading.Thread):
    """Runs a fault-injecting function next to the canary; re-raises its failure in join_checked."""

    def __init__(self, target: Any) -> None:
        super().__init__(daemon=True)
        self._target_fn = target
        self.error: BaseException | None = None
        self.result: Any = None

    def run(self) -> None:
        try:
            self.result = self._target_fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            self.error = exc

    def join_checked(self, timeout: float = 30) -> Any:
        self.join(timeout)
        if self.error is not None:
            raise self.error
        return self.result
