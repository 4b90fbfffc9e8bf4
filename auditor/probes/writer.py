"""Batched, durable writes of ledger entries to an audit topic.

The probes' hot paths only append a ready-made row tuple to a deque (thread-safe,
no lock). A writer keeps one deque per "stream" (a batch header: the producer
has one per topic, the consumer one); rows are encoded and handed to a separate
acks=all idempotent producer when a stream reaches ``batch_size`` (on the thread
that appended) or every ``flush_interval_s`` (on a small daemon thread), so a
crash loses at most the rows buffered since the last flush plus what that
producer had in flight.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from auditor.probes.codec import encode_batch, encode_encoded_batch
from auditor.probes.headers import decode_audit_id

logger = logging.getLogger(__name__)

# Called, under the write lock, with each batch of a stream's rows once they were handed
# to the ledger producer (the consumer learns its last processed offsets this way, off
# its hot path).
RowObserver = Callable[[list[Any]], None]
# Builds the checkpoint record (under the write lock, after every buffered row was
# drained); None when nothing changed since the last one, unless forced.
Checkpoint = Callable[[bool], bytes | None]
# Turns a drained batch of buffered items into the rows written (under the write lock).
RowTransform = Callable[[list[Any]], list[Any]]

# How long a write keeps retrying when the ledger producer's local queue is full
# before it gives up on a record (it is then counted in `records_dropped`).
_QUEUE_FULL_RETRY_S = 10.0


def _jsonable_row(row: Any) -> list[Any]:
    return [
        value
        if value is None or isinstance(value, (str, int, float))
        else decode_audit_id(value)
        if isinstance(value, bytes)
        else str(value)
        for value in row
    ]


class LedgerWriter:
    """Buffers rows for one audit topic and writes them in batches."""

    def __init__(
        self,
        producer_config: Mapping[str, Any],
        topic: str,
        key: bytes,
        batch_size: int,
        flush_interval_s: float,
        name: str,
        producer_factory: Callable[[dict[str, Any]], Any] = Producer,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"ledger batch_size must be >= 1, got {batch_size}")
        if flush_interval_s <= 0:
            raise ValueError(f"ledger flush_interval_s must be > 0, got {flush_interval_s}")
        self.topic = topic
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self._key = key
        config = dict(producer_config)
        config.setdefault("error_cb", self._on_client_error)
        self._producer: Producer = producer_factory(config)  # or a test double
        # (header, buffer, observer, transform, whether the rows are already JSON text)
        self._streams: list[tuple[dict[str, Any], deque[Any], RowObserver | None, RowTransform | None, bool]] = []
        self._checkpoint: Checkpoint | None = None
        self._before_flush: Callable[[], None] | None = None
        self._on_lost: Callable[[bytes], None] | None = None
        self._write_lock = threading.Lock()
        self.records_written = 0
        self.records_acked = 0
        self.records_failed = 0
        self.records_dropped = 0
        self.last_error: str | None = None
        # time.monotonic() when a record was last handed to the ledger producer (a heartbeat
        # is due after a silence: AuditedProducer._heartbeat)
        self.last_write_at = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"audit-ledger-{name}", daemon=True)
        self._thread.start()

    def stream(
        self,
        header: Mapping[str, Any],
        observe: RowObserver | None = None,
        transform: RowTransform | None = None,
        *,
        encoded: bool = False,
    ) -> deque[Any]:
        """A new buffer whose rows (``transform``-ed, when given) are written as records of
        ``header`` + entries. ``encoded``: each row is already an entry's JSON (ASCII bytes)."""
        rows: deque[Any] = deque()
        with self._write_lock:
            self._streams.append((dict(header), rows, observe, transform, encoded))
        return rows

    def set_checkpoint(self, checkpoint: Checkpoint | None) -> None:
        """Have the background flush also write ``checkpoint``'s record when it has one."""
        self._checkpoint = checkpoint

    def set_before_flush(self, hook: Callable[[], None] | None) -> None:
        """Have the background flush call ``hook`` first (it may append rows to streams)."""
        self._before_flush = hook

    def set_on_lost(self, hook: Callable[[bytes], None] | None) -> None:
        """Have ``hook`` called with the value of every record of this writer's topic that
        was not written (its delivery failed, or the local queue stayed full). It runs on the
        thread that serves the ledger producer's reports: it must be quick and never raise."""
        self._on_lost = hook

    def _lost(self, value: bytes | None) -> None:
        hook = self._on_lost
        if hook is None or not value:
            return
        try:
            hook(value)
        except Exception:  # a probe never breaks the application's poll() or commit()
            logger.exception("audit ledger %s: the lost-record hook failed", self.topic)

    def write_checkpoint(self, force: bool = False) -> bool:
        """Drain the buffers, then write the checkpoint record if it has one (always if forced)."""
        checkpoint = self._checkpoint
        if checkpoint is None:
            return False
        with self._write_lock:
            self._drain_locked()
            value = checkpoint(force)
            if value is None:
                return False
            self._produce_locked(self.topic, value)
            return True

    # --- writing ---------------------------------------------------------------------
    def flush_entries(self) -> int:
        """Encode every buffered row so far and hand the records to the ledger producer."""
        with self._write_lock:
            return self._drain_locked()

    def write(self, value: bytes, topic: str | None = None) -> None:
        """Write one already-encoded record after every row buffered before it."""
        with self._write_lock:
            self._drain_locked()
            self._produce_locked(topic or self.topic, value)

    def flush(self, timeout: float | None = None) -> int:
        """Drain the buffers and wait for the ledger producer; returns records still in flight."""
        self.flush_entries()
        return self._producer.flush(-1 if timeout is None else timeout)

    def close(self, timeout: float | None = None) -> int:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=max(1.0, self.flush_interval_s * 2))
        remaining = self.flush(timeout)
        if remaining:
            # Producer.close() would flush again without a bound; leave the rest to GC.
            logger.error(
                "audit ledger %s: %d record(s) not delivered at close (last error: %s)",
                self.topic,
                remaining,
                self.last_error,
            )
            return remaining
        close = getattr(self._producer, "close", None)
        if close is not None:
            close()
        return 0

    def pending_count(self) -> int:
        return sum(len(stream[1]) for stream in self._streams)

    def _drain_locked(self) -> int:
        drained = 0
        for header, rows, observe, transform, encoded in self._streams:
            count = len(rows)
            if not count:
                continue
            popleft = rows.popleft
            batch = [popleft() for _ in range(count)]
            if transform is not None:
                batch = transform(batch)
            if encoded:
                records = encode_encoded_batch(header, batch, self.batch_size)
            else:
                try:
                    records = encode_batch(header, batch, self.batch_size)
                except (TypeError, ValueError):
                    # A value JSON cannot carry must cost one field, never the batch
                    # or the application's poll() (this can run inside it).
                    try:
                        records = encode_batch(header, [_jsonable_row(row) for row in batch], self.batch_size)
                    except (TypeError, ValueError):
                        logger.exception("audit ledger %s: dropped %d unencodable rows", self.topic, count)
                        self.records_dropped += 1
                        continue
            for value in records:
                self._produce_locked(self.topic, value)
            if observe is not None:
                observe(batch)
            drained += count
        return drained

    def _produce_locked(self, topic: str, value: bytes) -> None:
        deadline = time.monotonic() + _QUEUE_FULL_RETRY_S
        while True:
            try:
                self._producer.produce(topic, value, self._key, on_delivery=self._on_delivery)
                self.records_written += 1
                self.last_write_at = time.monotonic()
                return
            except BufferError:
                if time.monotonic() >= deadline:
                    self._drop_locked(topic, value, "ledger producer queue full")
                    return
                self._producer.poll(0.05)
            except Exception as exc:  # noqa: BLE001 - a ledger write never raises into the application
                # KafkaException (a record over message.max.bytes, a fatal producer error) or
                # anything else the client refuses: this runs inside the application's flush(),
                # close() or a delivery callback, where an exception would skip the rest.
                self._drop_locked(topic, value, f"ledger producer refused a record: {exc}")
                return

    def _drop_locked(self, topic: str, value: bytes, reason: str) -> None:
        """One ledger record not written: counted (``records_dropped``), logged, and handed to
        the lost-record hook like a failed delivery."""
        self.records_dropped += 1
        self.last_error = reason
        logger.error("audit ledger %s: dropped one ledger record (%d bytes): %s", topic, len(value), reason)
        if topic == self.topic:
            self._lost(value)

    # --- background ------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.wait(self.flush_interval_s):
            try:
                hook = self._before_flush
                if hook is not None:
                    hook()
                self.flush_entries()
                self.write_checkpoint()
                self._producer.poll(0)
            except Exception:
                logger.exception("audit ledger %s: background flush failed", self.topic)

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.records_acked += 1
            return
        self.records_failed += 1
        self.last_error = f"{err.name()}: {err.str()}"
        logger.error("audit ledger %s: record not written: %s", msg.topic(), self.last_error)
        if msg.topic() == self.topic:
            self._lost(msg.value())

    def _on_client_error(self, err: KafkaError) -> None:
        self.last_error = f"{err.name()}: {err.str()}"
        logger.warning("audit ledger %s: client error: %s", self.topic, self.last_error)

    def stats(self) -> dict[str, int]:
        return {
            "ledger_entries_pending": self.pending_count(),
            "ledger_records_written": self.records_written,
            "ledger_records_acked": self.records_acked,
            "ledger_records_failed": self.records_failed,
            "ledger_records_dropped": self.records_dropped,
        }
