"""An application that processes records concurrently: a poll loop hands each record to one of
three workers, which mark it processed (in the probe's consumer ledger) as they finish it, in
whatever order they finish; the client's auto-commit (librdkafka's default) commits what was
handed meanwhile. The worker given the `held` offset waits until the test releases it, or gives
up on that record."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import Message

from auditor.probes.consumer import AuditedConsumer
from tests.support.waiting import handed


class WorkerPool:
    def __init__(
        self,
        bootstrap: str,
        group: str,
        topic: str,
        consumer_ledger: str,
        clients: str,
        held: int,
        process: Callable[[Message], None] | None = None,
        ledger_flush_interval_s: float = 1.0,
    ) -> None:
        config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "auto.commit.interval.ms": 200,  # enable.auto.commit left at its default (true)
        }
        self.consumer = AuditedConsumer(
            config,
            ledger_topic=consumer_ledger,
            clients_topic=clients,
            ledger_flush_interval_s=ledger_flush_interval_s,
        )
        self.consumer.subscribe([topic])
        self.held = held
        self.process = process
        self.release = threading.Event()
        self.give_up = False
        self.finished: list[int] = []  # the application's account: offsets its workers finished
        self.workers = ThreadPoolExecutor(3)

    def _work(self, msg: Message) -> None:
        if msg.offset() == self.held:
            self.release.wait(120)
            if self.give_up:
                return
        if self.process is not None:
            self.process(msg)
        self.consumer.mark_processed(msg)
        self.finished.append(msg.offset())

    def hand(self, count: int) -> list[Message]:
        """Polls the next `count` records and hands each to a worker."""
        batch = handed(self.consumer, count)
        for msg in batch:
            self.workers.submit(self._work, msg)
        return batch

    def settle(self, done: int, committed: Callable[[], int], past: int, timeout: float = 30) -> int:
        """Polls (the auto-commit and the probe's offset store ride on polls) until `done` records
        are finished, their marks flushed, and `committed()` (the group's offset, read back from
        the broker) is past `past`; that offset."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.consumer.poll(0.2) is None  # nothing more to hand
            if len(self.finished) >= done and (held := committed()) > past:
                self.consumer.flush_ledger()
                return held
        raise AssertionError(f"not settled within {timeout}s: finished {self.finished}")

    def close(self) -> None:
        self.give_up = True
        self.release.set()
        self.workers.shutdown()
        self.consumer.close()
