"""AuditedConsumerV1: a confluent_kafka.Consumer (contract version 1) that checks audit headers and keeps
a processed ledger (docs/contracts.md, ``_audit.consumer-ledger``).

Bad or missing headers are counted, never raised: records from producers that
are not audited are still consumed, just with fewer verdicts available.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Literal

from confluent_kafka import Consumer, Message, Producer, libversion

from auditor.probes.codec import (
    HeaderProblems,
    consumer_batch_header,
    encode_client_record,
    encode_session_end,
    encode_session_start,
)
from auditor.probes.config import ledger_producer_config
from auditor.probes.headers import fast_audit_id
from auditor.probes.message import record_position
from auditor.probes.native import use_native
from auditor.probes.topics import CLIENTS_TOPIC, CONSUMER_LEDGER_TOPIC
from auditor.probes.wrapping import ConsumerWrapper, inner_consumer_config, probe_stores_offsets
from auditor.probes.writer import LedgerWriter

_time_ns = time.time_ns


class AuditedConsumerV1(ConsumerWrapper):
    """A confluent_kafka.Consumer with a processed ledger and header statistics.

    Call ``mark_processed(msg)`` (or use ``with consumer.processing(msg):``)
    once the application has finished with a record. Marks are buffered and
    written in batches to the consumer ledger; ``commit()`` first hands the
    buffered marks to the ledger (and, for a synchronous commit, waits for them)
    so a committed offset never runs ahead of its processed marks. Offsets
    committed by ``enable.auto.commit`` cannot be ordered that way; audit-minded
    consumers commit explicitly.

    ``stats()`` counts received records (poll/consume, errors and events
    excluded), processed marks, and records whose audit headers are missing or
    malformed (see ``parse_audit_headers``). The per-topic header counts and the
    last processed offset per partition also go to the ledger in ``session-end``
    records: a checkpoint every ``ledger_flush_interval_s`` when either changed,
    on ``flush_ledger()``, and a final one on ``close()``. ``consumer_factory`` and
    ``producer_factory`` build the wrapped consumer and the ledger producer; ``native``
    chooses the C poll of the probe's offset store (None: whenever built).
    """

    kind: Literal["consumer"] = "consumer"

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
        native: bool | None = None,
    ) -> None:
        self._config = dict(config)
        self._consumer: Consumer = consumer_factory(inner_consumer_config(config))  # or a test double
        self.session_id = uuid.uuid4().hex
        # Commits name the session in their metadata (docs/contracts.md): the probe stores the
        # handed records' positions in place of enable.auto.offset.store, which stores none
        # (deferred: offset_store.py; its poll in C when the native hot path is built).
        self._stores_offsets = probe_stores_offsets(self._config)
        self._store_poll, self._store_consume = self._offset_store_calls(use_native(native))
        group = self._config.get("group.id")
        self.group: str | None = None if group is None else str(group)
        self.client_id: str = str(self._config.get("client.id", "rdkafka"))
        self.host = socket.gethostname()
        self._ledger_flush_timeout_s = ledger_flush_timeout_s
        self._received = 0
        self._processed = 0
        self._missing = 0
        self._malformed = 0
        # topic -> [missing, malformed]; touched only for records with bad headers.
        self._header_problems: dict[str, list[int]] = {}
        # topic -> partition -> offset of the last record marked processed, learnt from
        # the marks as the writer drains them (so it never runs ahead of the ledger).
        self._last_offsets: dict[str, dict[int, int]] = {}
        self._last_checkpoint: tuple[Any, Any] = ({}, {})
        self._last_msg: Message | None = None
        self._last_id: bytes | str | None = None
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
        self._rows = self._ledger.stream(consumer_batch_header(self.session_id, self.group), self._observe_marks)
        self._batch_size = ledger_batch_size
        now_ms = _time_ns() // 1_000_000
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

    # --- receiving ---------------------------------------------------------------------
    def _inspect(self, msg: Message) -> None:
        # ignore: a consumed record's headers are a list of pairs; the stub's union also
        # covers the dict a producer may pass (a cast would cost a call per record).
        status, audit_id = fast_audit_id(msg.headers())  # type: ignore[arg-type]
        self._received += 1
        if status:
            self._count_bad_headers(msg, status)
        self._last_msg = msg
        self._last_id = audit_id

    def _count_bad_headers(self, msg: Message, status: int) -> None:
        topic = record_position(msg)[0]
        counts = self._header_problems.get(topic)
        if counts is None:
            counts = self._header_problems[topic] = [0, 0]
        if status == 1:
            self._missing += 1
            counts[0] += 1
        else:
            self._malformed += 1
            counts[1] += 1

    def poll(self, timeout: float | None = None) -> Message | None:
        msg = self._store_poll(-1 if timeout is None else timeout)
        if msg is None or msg.error() is not None:
            return msg
        # _inspect() inlined: this runs once per consumed record.
        status, audit_id = fast_audit_id(msg.headers())  # type: ignore[arg-type]  # a list: see _inspect
        self._received += 1
        if status:
            self._count_bad_headers(msg, status)
        self._last_msg = msg
        self._last_id = audit_id
        return msg

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        messages = self._store_consume(num_messages, timeout)
        for msg in messages:
            if msg.error() is None:
                self._inspect(msg)
        return messages

    # --- processed marks -------------------------------------------------------------------
    def mark_processed(self, msg: Message) -> None:
        """Record that the application finished processing ``msg``."""
        if msg is self._last_msg:
            audit_id = self._last_id
        else:
            if msg.error() is not None:
                return  # an event or error, not a record: nothing was processed
            audit_id = fast_audit_id(msg.headers())[1]  # type: ignore[arg-type]  # a list: see _inspect
        if audit_id.__class__ is bytes:
            audit_id = audit_id.decode("utf-8", "backslashreplace")
        rows = self._rows
        rows.append((msg.topic(), msg.partition(), msg.offset(), audit_id, _time_ns() // 1_000_000))
        self._processed += 1
        if len(rows) >= self._batch_size:
            self._ledger.flush_entries()

    def _observe_marks(self, rows: list[Any]) -> None:
        last = self._last_offsets
        for topic, partition, offset, _, _ in rows:
            offsets = last.get(topic)
            if offsets is None:
                offsets = last[topic] = {}
            offsets[partition] = offset

    def header_problems(self) -> dict[str, HeaderProblems]:
        """Per topic: records received without audit headers / with malformed ones."""
        # dict() copies in one C call: poll() may add a topic on another thread meanwhile.
        return {topic: HeaderProblems(c[0], c[1]) for topic, c in dict(self._header_problems).items()}

    def last_offsets(self) -> dict[str, dict[int, int]]:
        """Per topic and partition, the offset of the last mark handed to the ledger."""
        return {topic: dict(offsets) for topic, offsets in dict(self._last_offsets).items()}

    def _session_end(self, force: bool) -> bytes | None:
        # Runs under the ledger's write lock after its drain: last_offsets covers exactly
        # the marks written before this record.
        state = (self.last_offsets(), self.header_problems())
        if not force and state == self._last_checkpoint:
            return None
        self._last_checkpoint = state
        last_offset, problems = state
        return encode_session_end(
            "consumer",
            self.session_id,
            _time_ns() // 1_000_000,
            group=self.group,
            last_offset=last_offset,
            header_problems=problems,
        )

    # --- introspection -------------------------------------------------------------------------
    def stats(self) -> dict[str, int]:
        return {
            "received": self._received,
            "processed": self._processed,
            "missing_headers": self._missing,
            "malformed_headers": self._malformed,
            **self._ledger.stats(),
        }
