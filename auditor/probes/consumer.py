"""AuditedConsumer: a confluent_kafka.Consumer that keeps a processed ledger of offset
ranges (record contract version 2, docs/contracts.md, ``_audit.consumer-ledger``).

The poll path is the wrapped consumer's own: ``poll`` and ``consume`` are the inner
client's bound methods, with no header parsing (reconciliation reads every record anyway
and counts the ones without or with malformed audit headers). ``mark_processed`` only
appends the message to a buffer; the ledger writer turns each batch into per-partition
ranges of consecutive offsets, off the application's call where it can.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Mapping
from itertools import groupby, repeat
from operator import add, lshift, sub
from types import TracebackType
from typing import Any, Literal, cast

from confluent_kafka import Consumer, Message, Producer, TopicPartition, libversion

from auditor.probes.codec import (
    ProcessedRangeRow,
    encode_client_record,
    encode_session_end,
    encode_session_start,
    processed_ranges_header,
)
from auditor.probes.config import ledger_producer_config, mask_config
from auditor.probes.topics import CLIENTS_TOPIC, CONSUMER_LEDGER_TOPIC
from auditor.probes.writer import LedgerWriter

_time_ns = time.time_ns
# Offsets stay far below 2**62 and partitions below 2**20 (Kafka allows far fewer): a shift
# of 62 keeps "partition, offset - index" one exact integer.
_PARTITION_SHIFT = 62


def offset_ranges(messages: list[Message], first_ms: int, last_ms: int) -> list[ProcessedRangeRow]:
    """Consecutive offsets of one partition, in marking order, as ledger range rows.

    A mark that does not extend the current run (another partition or topic, a gap, a seek
    back) starts a new one, so marking the same offset twice gives two ranges (reprocessing
    stays visible). Error events are skipped: they are not records.
    """
    if any(map(Message.error, messages)):
        messages = [msg for msg in messages if msg.error() is None]
    if not messages:
        return []
    # casts: a record (not an event) always has its topic, partition and offset.
    topics = cast(list[str], list(map(Message.topic, messages)))
    partitions = cast(list[int], list(map(Message.partition, messages)))
    offsets = cast(list[int], list(map(Message.offset, messages)))
    if topics.count(topics[0]) != len(topics):
        # Several topics in one batch: number them, so a change of topic breaks a run too.
        numbers: dict[str, int] = {}
        partitions = [numbers.setdefault(t, len(numbers)) << 20 | p for t, p in zip(topics, partitions, strict=True)]
    # Within a run, partition and offset - index are both constant: one C-level pass finds
    # the runs (no Python frame per mark).
    runs = map(add, map(lshift, partitions, repeat(_PARTITION_SHIFT)), map(sub, offsets, range(len(offsets))))
    rows: list[ProcessedRangeRow] = []
    index = 0
    for _, run in groupby(runs):
        length = len(list(run))
        end = index + length - 1
        rows.append(
            (topics[index], cast(int, messages[index].partition()), offsets[index], offsets[end], first_ms, last_ms)
        )
        index = end + 1
    return rows


class _Processing:
    """``with consumer.processing(msg):`` marks the message only if the block succeeds."""

    __slots__ = ("_consumer", "_msg")

    def __init__(self, consumer: AuditedConsumer, msg: Message) -> None:
        self._consumer = consumer
        self._msg = msg

    def __enter__(self) -> Message:
        return self._msg

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        if exc_type is None:
            self._consumer.mark_processed(self._msg)
        return False


class AuditedConsumer:
    """A confluent_kafka.Consumer with a processed ledger of offset ranges.

    Call ``mark_processed(msg)`` (or use ``with consumer.processing(msg):``) once the
    application has finished with a record. Marks are buffered and written in batches;
    ``commit()`` first hands the buffered marks to the ledger (and, for a synchronous
    commit, waits for them) so a committed offset never runs ahead of its processed marks.
    Offsets committed by ``enable.auto.commit`` cannot be ordered that way; audit-minded
    consumers commit explicitly. The last processed offset per partition goes to the
    ledger in ``session-end`` checkpoints (every ``ledger_flush_interval_s`` when it
    changed, on ``flush_ledger()``, and on ``close()``).
    """

    kind: Literal["consumer"] = "consumer"
    contract_version = 2

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        ledger_topic: str = CONSUMER_LEDGER_TOPIC,
        clients_topic: str = CLIENTS_TOPIC,
        ledger_batch_size: int = 1000,
        ledger_flush_interval_s: float = 1.0,
        ledger_flush_timeout_s: float = 30.0,
        ledger_config: Mapping[str, Any] | None = None,
        consumer_factory: Callable[[dict[str, Any]], Any] = Consumer,
        producer_factory: Callable[[dict[str, Any]], Any] = Producer,
    ) -> None:
        self._config = dict(config)
        self._consumer: Consumer = consumer_factory(dict(config))  # or a test double
        # The poll path is the wrapped client's: no Python frame of ours per record.
        self.poll = self._consumer.poll
        self.consume = self._consumer.consume
        self.session_id = uuid.uuid4().hex
        group = self._config.get("group.id")
        self.group: str | None = None if group is None else str(group)
        self.client_id: str = str(self._config.get("client.id", "rdkafka"))
        self.host = socket.gethostname()
        self._ledger_flush_timeout_s = ledger_flush_timeout_s
        self._processed = 0
        # topic -> partition -> offset of the last record marked processed, learnt from
        # the marks as the writer drains them (so it never runs ahead of the ledger).
        self._last_offsets: dict[str, dict[int, int]] = {}
        self._last_checkpoint: dict[str, dict[int, int]] = {}
        self._closed = False

        self._ledger = LedgerWriter(
            ledger_producer_config(self._config, self.client_id, ledger_config),
            topic=ledger_topic,
            key=self.session_id.encode("ascii"),
            batch_size=ledger_batch_size,
            flush_interval_s=ledger_flush_interval_s,
            name=f"consumer-{self.session_id[:8]}",
            producer_factory=producer_factory,
        )
        now_ms = _time_ns() // 1_000_000
        self._drained_ms = now_ms
        self._marks = self._ledger.stream(
            processed_ranges_header(self.session_id, self.group), self._observe_ranges, self._to_ranges
        )
        self._batch_size = ledger_batch_size
        self._ledger.write(
            encode_session_start("consumer", self.session_id, self.client_id, now_ms, self.host, self.group)
        )
        self._ledger.write(
            encode_client_record(
                "consumer",
                self.session_id,
                self.client_id,
                self.group,
                libversion()[0],
                self._config,
                self.host,
                now_ms,
            ),
            topic=clients_topic,
        )
        self._ledger.set_checkpoint(self._session_end)

    # --- processed marks -------------------------------------------------------------------
    def mark_processed(self, msg: Message) -> None:
        """Record that the application finished processing ``msg`` (a record, not an event)."""
        marks = self._marks
        marks.append(msg)
        if len(marks) >= self._batch_size:
            # Bounded batches: holding a second of Message objects costs more than draining.
            self._ledger.flush_entries()

    def processing(self, msg: Message) -> _Processing:
        """Context manager: marks ``msg`` processed when the block exits without an exception."""
        return _Processing(self, msg)

    def _to_ranges(self, messages: list[Any]) -> list[Any]:
        # Runs under the writer's lock: marks between the previous drain and now.
        now_ms = _time_ns() // 1_000_000
        rows = offset_ranges(messages, self._drained_ms, now_ms)
        self._drained_ms = now_ms
        return rows

    def _observe_ranges(self, rows: list[Any]) -> None:
        last = self._last_offsets
        for topic, partition, _, offset, _, _ in rows:
            offsets = last.get(topic)
            if offsets is None:
                offsets = last[topic] = {}
            offsets[partition] = offset
            self._processed += 1

    def last_offsets(self) -> dict[str, dict[int, int]]:
        """Per topic and partition, the offset of the last mark handed to the ledger."""
        return {topic: dict(offsets) for topic, offsets in dict(self._last_offsets).items()}

    def _session_end(self, force: bool) -> bytes | None:
        # Runs under the ledger's write lock after its drain: last_offsets covers exactly
        # the marks written before this record.
        state = self.last_offsets()
        if not force and state == self._last_checkpoint:
            return None
        self._last_checkpoint = state
        return encode_session_end(
            "consumer", self.session_id, _time_ns() // 1_000_000, group=self.group, last_offset=state
        )

    # --- offsets ----------------------------------------------------------------------------
    def commit(
        self,
        message: Message | None = None,
        offsets: list[TopicPartition] | None = None,
        asynchronous: bool = True,
    ) -> list[TopicPartition] | None:
        self._ledger.flush_entries()
        if not asynchronous:
            self._ledger.flush(self._ledger_flush_timeout_s)
        kwargs: dict[str, Any] = {"asynchronous": asynchronous}
        if message is not None:
            kwargs["message"] = message
        if offsets is not None:
            kwargs["offsets"] = offsets
        committed: list[TopicPartition] | None = self._consumer.commit(**kwargs)
        return committed

    def store_offsets(
        self,
        message: Message | None = None,
        offsets: list[TopicPartition] | None = None,
    ) -> None:
        kwargs: dict[str, Any] = {}
        if message is not None:
            kwargs["message"] = message
        if offsets is not None:
            kwargs["offsets"] = offsets
        self._consumer.store_offsets(**kwargs)

    # --- assignment (plain delegation) -------------------------------------------------------
    def subscribe(
        self,
        topics: list[str],
        on_assign: Callable[..., None] | None = None,
        on_revoke: Callable[..., None] | None = None,
        on_lost: Callable[..., None] | None = None,
    ) -> None:
        callbacks = {"on_assign": on_assign, "on_revoke": on_revoke, "on_lost": on_lost}
        self._consumer.subscribe(topics, **{k: v for k, v in callbacks.items() if v is not None})

    def assign(self, partitions: list[TopicPartition]) -> None:
        self._consumer.assign(partitions)

    def unsubscribe(self) -> None:
        self._consumer.unsubscribe()

    def unassign(self) -> None:
        self._consumer.unassign()

    def __getattr__(self, name: str) -> Any:
        # assignment, committed, position, seek, pause, resume, get_watermark_offsets, ...
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._consumer, name)

    # --- lifecycle --------------------------------------------------------------------------
    def flush_ledger(self, timeout: float | None = None) -> int:
        """Write buffered marks (and a session-end checkpoint if anything changed) now and
        wait for them; returns ledger records still in flight."""
        self._ledger.write_checkpoint()
        return self._ledger.flush(self._ledger_flush_timeout_s if timeout is None else timeout)

    def close(self) -> None:
        """Write the buffered marks and the session end, then close the consumer."""
        if self._closed:
            return
        self._closed = True
        # Marks first, so the final auto-commit in Consumer.close() does not run ahead of them.
        self._ledger.flush(self._ledger_flush_timeout_s)
        try:
            self._consumer.close()
        finally:
            self._ledger.write_checkpoint(force=True)
            self._ledger.close(self._ledger_flush_timeout_s)

    def __enter__(self) -> AuditedConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- introspection -------------------------------------------------------------------------
    @property
    def consumer(self) -> Consumer:
        """The wrapped confluent_kafka.Consumer."""
        return self._consumer

    def effective_config(self) -> dict[str, Any]:
        """The configuration the application gave, secrets masked (as published to the clients topic)."""
        return mask_config(self._config)

    def stats(self) -> dict[str, int]:
        return {"processed_ranges": self._processed, "marks_pending": len(self._marks), **self._ledger.stats()}
