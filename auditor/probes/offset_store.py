"""The audited consumer's offset store, in place of librdkafka's ``enable.auto.offset.store``
(docs/contracts.md, "Commit metadata"): the positions it stores name the probe's session.

librdkafka stores each record's position as it hands it over; only its commits read the
store. Storing each one from Python (a TopicPartition and a ``store_offsets`` call per
record) doubled the consumer's CPU per record, so the probe defers the store instead:
``poll``/``consume`` only keep the last record handed per partition (HandedPositions, in C
when the native hot path is built), and ``store_handed()`` stores their positions with the
session's metadata, in one ``store_offsets`` call:

* by the polling thread, as a ``poll``/``consume`` returns, when ``STORE_INTERVAL_S`` (50 ms)
  passed since its last such store: the auto-commit timer, which reads the store at any moment
  from librdkafka's thread, commits at most that far behind plain librdkafka while the
  application polls;
* by the store's own thread, every ``STORE_INTERVAL_S``, for an application that stopped
  polling (one stuck processing a record has its position stored as librdkafka would have,
  within that bound), only while no ``poll``/``consume`` is in progress, and holding the next
  one back until it is done (HandedPositions.try_begin_store);
* before everything that reads the store or changes the assignment, so they see exactly what
  plain librdkafka would: commit(), close(), assign/unassign/incremental_(un)assign,
  unsubscribe, seek, and each rebalance callback (the probe installs its own, which call the
  application's, before librdkafka's commit of the revoked partitions: confluent-kafka still
  assigns or unassigns after a callback that did not).

Why the store's own thread keeps out of the polls: confluent-kafka (2.16) lets one thread at a
time into a client's calls. A store from another thread waits while the application polls,
which a polling loop never stops doing (stop 77 found an auto-committing AuditedConsumer that
committed nothing for as long as it polled), and a rebalance callback inside ``poll`` that
waits for that store's lock never returns (the same consumer froze at the first rebalance).

A Python thread needs the GIL: another thread holding it longer than the interpreter's
switch interval (5 ms) without release (a long C call) delays the tick by as much.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import weakref
from collections.abc import Callable
from typing import Protocol, cast

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from auditor.probes.native import HandedPositions

logger = logging.getLogger(__name__)

# How long a handed record's position may wait before it is stored (the bound above).
STORE_INTERVAL_S = 0.05


class Handed(Protocol):
    """The last record handed per partition since the last take()."""

    def note(self, messages: list[Message]) -> None: ...
    def take(self) -> list[Message]: ...
    def enter(self) -> None: ...
    def leave(self) -> None: ...
    def store_if_due(self) -> None: ...
    def try_begin_store(self, idle: float) -> bool: ...
    def end_store(self) -> None: ...
    def __len__(self) -> int: ...


class PythonHandedPositions:
    """HandedPositions without the native module: ``poll`` is a closure (a Python frame, a
    tuple and a dict store per record, and the call bracket's lock); take() pops entry by
    entry, so a record handed by another thread meanwhile is either taken now or kept for the
    next one. enter/leave/store_if_due/try_begin_store/end_store and the long poll in pieces as
    HandedPositions' (see _hotpath.c)."""

    def __init__(
        self,
        poll: Callable[..., Message | None],
        store: Callable[[], object] | None = None,
        interval: float = STORE_INTERVAL_S,
    ) -> None:
        last: dict[tuple[str | None, int | None], Message] = {}
        self._last = last
        self._store = store
        self._interval = interval
        self._lock = threading.Lock()
        self._in_call = 0
        self._storing = False
        self._last_store = -math.inf  # the first poll that hands records stores them
        self._last_return = time.monotonic()
        enter, leave, store_if_due = self.enter, self.leave, self.store_if_due

        def handed_poll(timeout: float | None = None) -> Message | None:
            enter()
            try:
                wait = -1.0 if timeout is None else float(timeout)
                if store is None or 0 <= wait <= interval:
                    msg = poll(wait)
                else:  # a long poll in pieces, storing between them when due (as the native one)
                    deadline = time.monotonic() + wait
                    while True:
                        left = interval if wait < 0 else deadline - time.monotonic()
                        msg = poll(max(0.0, min(left, interval)))
                        if msg is not None or (wait >= 0 and left <= interval):
                            break
                        store_if_due()
                if msg is not None and msg.error() is None:
                    last[(msg.topic(), msg.partition())] = msg
                return msg
            finally:
                leave()

        self.poll = handed_poll

    def enter(self) -> None:
        while True:
            with self._lock:
                if not self._storing:
                    self._in_call += 1
                    return
            time.sleep(0.0002)

    def store_if_due(self) -> None:
        now = time.monotonic()
        if self._store is not None and self._last and now - self._last_store >= self._interval:
            self._last_store = now
            try:
                self._store()
            except Exception:
                logger.exception("audited consumer: storing the handed offsets failed")

    def leave(self) -> None:
        try:
            self.store_if_due()
        finally:
            with self._lock:
                self._in_call -= 1
                self._last_return = time.monotonic()

    def try_begin_store(self, idle: float) -> bool:
        with self._lock:
            if self._in_call or self._storing or not self._last or time.monotonic() - self._last_return < idle:
                return False
            self._storing = True
            return True

    def end_store(self) -> None:
        with self._lock:
            self._storing = False

    def note(self, messages: list[Message]) -> None:
        last = self._last
        for msg in messages:
            if msg.error() is None:
                last[(msg.topic(), msg.partition())] = msg

    def take(self) -> list[Message]:
        last = self._last
        taken: list[Message] = []
        while last:
            try:
                taken.append(last.popitem()[1])
            except KeyError:  # emptied meanwhile
                break
        return taken

    def __len__(self) -> int:
        return len(self._last)


class DeferredOffsetStore:
    """Keeps the records a consumer hands over and stores their positions (see the module's
    docstring). ``poll`` and ``consume`` are what the audited consumer offers as its own."""

    def __init__(self, consumer: Consumer, metadata: str, native: bool, owner: object) -> None:
        self._store_offsets = consumer.store_offsets
        self._metadata = metadata
        self._lock = threading.Lock()
        handed: Handed
        # the polling thread's store: a bound method of this store (a cycle the GC collects)
        store, interval = self._store_when_due, STORE_INTERVAL_S
        if native:
            handed = native_poll = HandedPositions(consumer.poll, Message, store, interval)
            self.poll: Callable[..., Message | None] = native_poll
        else:
            handed = python = PythonHandedPositions(consumer.poll, store, interval)
            self.poll = python.poll
        self._handed = handed
        inner_consume = consumer.consume
        note, enter, leave, store_if_due = handed.note, handed.enter, handed.leave, handed.store_if_due

        def consume(num_messages: int = 1, timeout: float = -1) -> list[Message]:
            enter()
            try:
                wait = -1.0 if timeout is None else float(timeout)
                if 0 <= wait <= interval:
                    messages = inner_consume(num_messages, wait)
                    note(messages)
                    return messages
                # A long wait in pieces, storing between them when due: up to num_messages
                # records, returned once that many came or the timeout passed, as the client's.
                deadline = time.monotonic() + wait
                got: list[Message] = []
                while True:
                    left = interval if wait < 0 else deadline - time.monotonic()
                    messages = inner_consume(num_messages - len(got), max(0.0, min(left, interval)))
                    note(messages)
                    got += messages
                    if len(got) >= num_messages or (wait >= 0 and left <= interval):
                        return got
                    store_if_due()
            finally:
                leave()

        self.consume = consume
        self._stop = threading.Event()
        # Stops when the audited consumer goes without close() too (the thread holds only the client).
        weakref.finalize(owner, self._stop.set)
        self._thread = threading.Thread(target=self._run, name="audit-offset-store", daemon=True)
        self._thread.start()

    def store_handed(self, blocking: bool = True) -> None:
        """Store the position after the last record handed on each partition since the previous
        store, with the session's metadata. Under a lock: a store never runs behind a later one.
        Not `blocking` (a rebalance callback, inside the application's poll): when another
        thread is storing, nothing (that thread may be waiting for the client, which the poll
        holds); what it took is stored, what was handed after is not, so the revoked
        partitions' commit may be behind: records redelivered, never skipped."""
        if not self._lock.acquire(blocking):
            logger.debug("audited consumer: a rebalance callback left the store to the thread storing")
            return
        try:
            taken = self._handed.take()
            if not taken:
                return
            positions = [record_position(msg, self._metadata) for msg in taken]
            try:
                self._store_offsets(offsets=positions)
            except KafkaException:
                pass  # no partition of them is assigned any more: librdkafka's own store skips them too
        finally:
            self._lock.release()

    def _store_when_due(self) -> bool:
        """The polling thread's store, as a poll or consume returns (HandedPositions calls it
        every STORE_INTERVAL_S while records are handed), and the store's thread's: failures
        logged, never raised into the application's poll; False once the client is closed."""
        try:
            self.store_handed()
        except RuntimeError:
            return False  # the client was closed under the probe
        except Exception:
            logger.exception("audited consumer: storing the handed offsets failed")
        return True

    def close(self) -> None:
        """Stop the thread and store what is left (before the client's close commits)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self.store_handed()

    def _run(self) -> None:
        """The store for an application that stopped polling: only while no poll or consume is
        in progress, and none starts until it is done (see the module's docstring)."""
        handed = self._handed
        while not self._stop.wait(STORE_INTERVAL_S):
            if not handed.try_begin_store(STORE_INTERVAL_S):
                continue
            try:
                open_ = self._store_when_due()
            finally:
                handed.end_store()
            if not open_:
                return


def position(topic: str, partition: int, offset: int, metadata: str, leader_epoch: int | None) -> TopicPartition:
    """A TopicPartition to commit or store (it takes no None leader epoch: an int or nothing)."""
    if leader_epoch is None:
        return TopicPartition(topic, partition, offset, metadata)
    return TopicPartition(topic, partition, offset, metadata, leader_epoch)


def record_position(msg: Message, metadata: str) -> TopicPartition:
    """The position after a record (not an event), with ``metadata``: what committing it stores."""
    return position(
        cast(str, msg.topic()), cast(int, msg.partition()), cast(int, msg.offset()) + 1, metadata, msg.leader_epoch()
    )
