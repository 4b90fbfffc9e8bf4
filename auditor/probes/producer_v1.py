"""AuditedProducerV1: a drop-in confluent_kafka.Producer that stamps the contract-1 audit headers
and keeps a producer ledger (docs/contracts.md).

Per produce() the hot path builds the header list and one functools.partial
(the delivery report must know the record's sequence number: confluent-kafka
hands delivery callbacks a message without headers). Per delivery report it
appends one row tuple, already in the ledger's JSON shape, to a deque; encoding
and writing the ledger happen in batches. What remains costly is confluent-kafka
itself: record headers plus a per-message delivery callback cost several times a
bare produce() (see benchmarks/probe_overhead.py --floor).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Literal

from confluent_kafka import KafkaError, Message, Producer, libversion

from auditor.probes.codec import (
    ACKED,
    FAILED,
    PERSISTED,
    POSSIBLY_PERSISTED,
    UNCONFIRMED,
    encode_client_record,
    encode_session_start,
    producer_batch_header,
)
from auditor.probes.config import ledger_producer_config
from auditor.probes.headers import (
    AUDIT_ID,
    AUDIT_PID,
    AUDIT_SEQ,
    AUDIT_TS,
    RESERVED_HEADER_NAMES,
    decode_audit_id,
    new_uuid4_batch,
)
from auditor.probes.persistence import classify_persistence, describe_error, sends_may_be_retried
from auditor.probes.topics import CLIENTS_TOPIC, PRODUCER_LEDGER_TOPIC
from auditor.probes.wrapping import ProducerWrapper, acks_zero, timeout_args, truthy
from auditor.probes.writer import LedgerWriter

logger = logging.getLogger(__name__)

DeliveryCallback = Callable[[KafkaError | None, Message], None]
KeyFunction = Callable[[Any, Any], Any]
UserHeaders = Sequence[tuple[str, Any]] | Mapping[str, Any] | None

_time_ns = time.time_ns
_UUID_BATCH = 1024


AuditIdPair = tuple[bytes | str, str]  # (header value, ledger text)


def _audit_id_pair(value: Any) -> AuditIdPair | None:
    """The audit-id header value and its ledger text for a key or key_fn result."""
    if value is None:
        return None
    if isinstance(value, str):
        return (value, value) if value else None
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        return (raw, decode_audit_id(raw)) if raw else None
    text = str(value)
    return (text, text) if text else None


def _split_user_headers(headers: UserHeaders) -> tuple[list[tuple[str, Any]], AuditIdPair | None]:
    """User headers without the reserved audit names, and a user-supplied audit-id if any.

    A passed-on version-2 ``audit`` header is dropped too (as version 2 does): a record
    carrying one is read as version 2, so this session's own headers would never be seen.
    """
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    kept: list[tuple[str, Any]] = []
    supplied_id: AuditIdPair | None = None
    for name, value in pairs:  # type: ignore[union-attr]  # produce() calls this only with headers
        if name in RESERVED_HEADER_NAMES:
            if name == AUDIT_ID:
                supplied_id = _audit_id_pair(value)
            continue
        kept.append((name, value))
    return kept, supplied_id


class _TopicStream:
    """Sequence counter and buffered ledger rows of one topic in one session."""

    __slots__ = ("next_seq", "rows")

    def __init__(self, rows: deque[Any]) -> None:
        self.next_seq = 0
        self.rows = rows


class AuditedProducerV1(ProducerWrapper):
    """A confluent_kafka.Producer that stamps audit headers and keeps a ledger.

    Headers: ``audit-id`` comes from ``key_fn(value, key)`` if given, else a
    user-supplied ``audit-id`` header, else the record key, else a UUID4 (32 hex
    digits). Other user-supplied ``audit-*`` headers (and a passed-on v2 ``audit``) are replaced by this
    session's; all other user headers follow the four audit headers unchanged.
    ``audit-seq`` is per (session, topic), from 0, and is only used up when
    produce() succeeds locally: BufferError or KafkaException leave it for the
    next call. produce() is thread-safe, like Producer's.

    Delivery reports: the application's ``on_delivery``/``callback`` (per call
    or ``on_delivery`` in the config) is still called with the same (err, msg).
    The inner producer always reports every delivery (the ledger needs the
    acks); a configured ``delivery.report.only.error=true`` is honoured for the
    application's callback only. With ``acks=0`` the broker confirms nothing:
    those reports are ledgered ``unconfirmed`` (partition, no offset), never ``acked``.

    Ledger: one row per delivery report, buffered and written in batches of
    ``ledger_batch_size`` or every ``ledger_flush_interval_s`` through a separate
    acks=all idempotent producer (``ledger_config`` overrides its settings).
    ``flush()`` and ``close()`` write the buffered rows plus a ``session-end``
    with the last sequence per topic, and wait up to ``ledger_flush_timeout_s``
    for the ledger to be acked. Liveness as in contract v2 (stop 65): an idle session
    writes a ``session-end`` heartbeat once nothing was ledgered for
    ``ledger_heartbeat_s``, its records declare ``alive_ms`` (heartbeat + flush
    interval), and close() ends with a ``closed`` session-end once every delivery report
    was served: readers tell a session killed with reports it never ledgered from one
    that closed. ``producer_factory`` builds both the wrapped and
    the ledger producer (tests pass fakes; applications may pass a subclass).
    """

    kind: Literal["producer"] = "producer"

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        key_fn: KeyFunction | None = None,
        ledger_topic: str = PRODUCER_LEDGER_TOPIC,
        clients_topic: str = CLIENTS_TOPIC,
        ledger_batch_size: int = 1000,
        ledger_flush_interval_s: float = 1.0,
        ledger_flush_timeout_s: float = 30.0,
        ledger_heartbeat_s: float = 30.0,
        ledger_config: Mapping[str, Any] | None = None,
        producer_factory: Callable[[dict[str, Any]], Any] = Producer,
    ) -> None:
        self._declare_liveness(ledger_heartbeat_s, ledger_flush_interval_s)
        client_config = dict(config)
        self._config = dict(config)
        self._transaction_inputs = {}
        self._default_on_delivery: DeliveryCallback | None = client_config.pop("on_delivery", None)
        self._only_error_reports = truthy(client_config.pop("delivery.report.only.error", False))
        self._unconfirmed_sends = acks_zero(client_config)
        self._may_retry = sends_may_be_retried(client_config)
        self._producer: Producer = producer_factory(client_config)  # or a test double
        self._key_fn = key_fn
        self._ledger_flush_timeout_s = ledger_flush_timeout_s
        self.session_id = uuid.uuid4().hex
        self.client_id: str = str(client_config.get("client.id", "rdkafka"))
        self.host = socket.gethostname()
        self._pid_header = (AUDIT_PID, self.session_id.encode("ascii"))
        self._topics: dict[str, _TopicStream] = {}
        self._seq_lock = threading.Lock()
        self._uuid_pool: list[str] = []
        self._closed = False
        self._last_checkpoint: dict[str, int] | None = None

        self._ledger = LedgerWriter(
            ledger_producer_config(client_config, self.client_id, ledger_config),
            topic=ledger_topic,
            key=self.session_id.encode("ascii"),
            batch_size=ledger_batch_size,
            flush_interval_s=ledger_flush_interval_s,
            name=f"producer-{self.session_id[:8]}",
            producer_factory=producer_factory,
        )
        self._watch_ledger_losses()  # first: the session-start may be the record lost
        self._on_delivery = self._make_delivery_handler()
        now_ms = _time_ns() // 1_000_000
        self._ledger.write(
            encode_session_start(
                "producer", self.session_id, self.client_id, now_ms, self.host, alive_ms=self._alive_ms
            )
        )
        self._ledger.write(
            encode_client_record(
                "producer",
                self.session_id,
                self.client_id,
                None,
                libversion()[0],
                self._config,
                self.host,
                now_ms,
            ),
            topic=clients_topic,
        )
        self._ledger.set_before_flush(self._idle_heartbeat)

    def _idle_heartbeat(self) -> None:
        # A heartbeat names only the sequences an earlier session-end did: a sent sequence
        # whose delivery report is not served yet has no ledger entry, and a session-end's
        # last_seq would make it a hole.
        self._heartbeat(self._last_checkpoint or {})

    def _make_delivery_handler(self) -> Callable[..., None]:
        # A closure, not a method: local names are the cheapest lookups on the
        # path that runs once per delivered message.
        batch_size = self._ledger.batch_size
        flush_entries = self._ledger.flush_entries
        only_errors = self._only_error_reports
        # With acks=0 the broker answers nothing: a "successful" report only means the
        # request left the client, so the entry is unconfirmed, never acked.
        unconfirmed = self._unconfirmed_sends
        # A failure's error is its last attempt's: with retries an earlier one may have written it.
        may_retry = self._may_retry
        time_ns = _time_ns

        def on_delivery(
            rows: deque[Any],
            seq: int,
            audit_id: str,
            user_callback: DeliveryCallback | None,
            err: KafkaError | None,
            msg: Message,
        ) -> None:
            if err is None:
                offset = msg.offset()
                if unconfirmed or offset is None or offset < 0:
                    rows.append(
                        (seq, UNCONFIRMED, msg.partition(), -1, None, POSSIBLY_PERSISTED, audit_id,
                         time_ns() // 1_000_000)
                    )  # fmt: skip
                else:
                    rows.append(
                        (seq, ACKED, msg.partition(), offset, None, PERSISTED, audit_id, time_ns() // 1_000_000)
                    )
            else:
                partition = msg.partition()
                rows.append(
                    (seq, FAILED, -1 if partition is None or partition < 0 else partition, -1, describe_error(err),
                     classify_persistence(err, may_retry=may_retry), audit_id, time_ns() // 1_000_000)
                )  # fmt: skip
            if len(rows) >= batch_size:
                flush_entries()
            if user_callback is not None and (err is not None or not only_errors):
                user_callback(err, msg)

        return on_delivery

    def _new_topic(self, topic: str) -> _TopicStream:
        stream = _TopicStream(self._ledger.stream(producer_batch_header(self.session_id, self.client_id, topic)))
        self._topics[topic] = stream
        return stream

    # --- the hot path --------------------------------------------------------------------
    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: UserHeaders = None,
        *,
        callback: DeliveryCallback | None = None,
    ) -> None:
        """Same contract as ``confluent_kafka.Producer.produce``, plus audit headers."""
        extra_headers: list[tuple[str, Any]] | None = None
        id_pair: AuditIdPair | None = None
        if headers:
            extra_headers, id_pair = _split_user_headers(headers)
        if self._key_fn is not None:
            id_pair = _audit_id_pair(self._key_fn(value, key))
        elif id_pair is None and key is not None:
            id_pair = _audit_id_pair(key)
        header_id: bytes | str  # a generated id is text; a key's is its bytes or text
        if id_pair is None:
            try:
                header_id = id_text = self._uuid_pool.pop()
            except IndexError:
                self._uuid_pool.extend(new_uuid4_batch(_UUID_BATCH))
                header_id = id_text = self._uuid_pool.pop()
        else:
            header_id, id_text = id_pair
        ts_header = (AUDIT_TS, b"%d" % (_time_ns() // 1_000_000))
        user_callback = on_delivery or callback or self._default_on_delivery
        with self._seq_lock:  # `with`: an exception landing after the acquire still releases it
            stream = self._topics.get(topic)
            if stream is None:
                stream = self._new_topic(topic)
            seq = stream.next_seq
            record_headers: list[tuple[str, str | bytes | None]] = [
                (AUDIT_ID, header_id),
                self._pid_header,
                (AUDIT_SEQ, b"%d" % seq),
                ts_header,
            ]
            if extra_headers:
                record_headers.extend(extra_headers)
            report = partial(self._on_delivery, stream.rows, seq, id_text, user_callback)
            inner_produce = self._producer.produce
            # Used up before the client call, by a step that calls nothing (CPython runs a
            # signal handler only at a call, a backward jump or a function start): an exception
            # a handler raises lands at the latest as the call returns, the record queued. A
            # refusal (the client's own exception) gives the sequence back.
            stream.next_seq = seq + 1
            try:
                # Positional on purpose (keywords cost ~0.5 us per call): slot 5 is
                # `callback`, slot 6 `on_delivery`.
                inner_produce(topic, value, key, partition, report, None, timestamp, record_headers)
            except Exception:
                stream.next_seq = seq
                raise

    def poll(self, timeout: float | None = None) -> int:
        return self._producer.poll(*timeout_args(timeout))

    # --- ledger-aware lifecycle --------------------------------------------------------
    def flush(self, timeout: float | None = None) -> int:
        """Flush the producer, then make the ledger durable up to this point.

        Returns what ``Producer.flush`` returns: messages still in the queue.
        """
        started = time.monotonic()
        # Taken before the flush: once it returns 0 every report of these sends was served
        # (ledgered). Sends still in flight have no entry yet: the checkpoint must not name
        # them (a session-end's last_seq would make them a hole judged `never-sent` at once).
        sent = self.last_sequences()
        remaining = self._producer.flush(*timeout_args(timeout))
        self._end_session_checkpoint(
            self._ledger_timeout(timeout, started), None if remaining else sent, patient=timeout != 0
        )
        return remaining

    def close(self, timeout: float | None = None) -> int:
        """Flush, write the final (``closed``) session-end, and close the ledger and the producer."""
        if self._closed:
            return 0
        started = time.monotonic()
        sent = self.last_sequences()  # before the flush, as in flush()
        remaining = self._producer.flush(*timeout_args(timeout))
        self._ledger.set_before_flush(None)
        if remaining:
            # Reports still to come would never be ledgered: no `closed` claim and no new
            # checkpoint, readers keep the session as one that may have sent records its
            # ledger does not name.
            self._end_session_checkpoint(self._ledger_timeout(timeout, started), None)
        else:
            self._write_closing_end(sent, self._ledger_timeout(timeout, started))
        self._ledger.close(self._ledger_timeout(timeout, started))
        self._closed = True
        if remaining and timeout is not None:
            # Producer.close() flushes without a bound; the caller asked for one.
            logger.warning("audited producer %s: %d message(s) still queued at close", self.session_id, remaining)
            return remaining
        close = getattr(self._producer, "close", None)
        if close is not None:
            close()
        return remaining

    # --- transactions ----------------------------------------------------------------------
    def commit_transaction(self, timeout: float | None = None) -> None:
        self._producer.commit_transaction(*timeout_args(timeout))
        self._end_transaction_inputs(committed=True)

    def abort_transaction(self, timeout: float | None = None) -> None:
        self._note_abort()  # before the abort: the marks held now may be of this transaction
        self._producer.abort_transaction(*timeout_args(timeout))
        self._end_transaction_inputs(committed=False)

    # --- introspection -----------------------------------------------------------------
    def stats(self) -> dict[str, int]:
        with self._seq_lock:
            produced = sum(stream.next_seq for stream in self._topics.values())
        return {"produced": produced, "in_queue": len(self._producer), **self._ledger.stats()}
