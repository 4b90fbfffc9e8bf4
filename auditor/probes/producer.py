"""AuditedProducer: a drop-in confluent_kafka.Producer that writes record contract
version 2 (docs/contracts.md): one packed binary ``audit`` header per record, and a
producer ledger of sequence *ranges* instead of one row per delivery report.

Why this shape (measured in benchmarks/header_alternatives.py): confluent-kafka's cost
per record header is paid per header, so one 33-byte header costs a fraction of four;
and a Python delivery callback per message, even one confluent-kafka skips for successes
under ``delivery.report.only.error``, costs more than the produce itself. So the hot path
is: one ``struct.pack``, one lock, one ``produce()``; no callback object per message.

Acks without a per-message call: the inner producer reports failures only (to a
config-level callback). Sequences are *resolved* in ranges when the producer can prove
every earlier delivery report was served: its out-queue is empty and no poll()/flush() is
running (after flush(), and whenever the background flush sees it idle), or a poll() that
started ``message.timeout.ms`` + ``socket.timeout.ms`` + slack after a sequence was
produced has returned normally, with no poll started before it still running (librdkafka
reports every message within that time; a raising callback stops a poll with reports left
queued, and the first of concurrent polls takes every queued report). A resolved
range is ``acked`` except where a failure was reported: a failure report carries no
headers (confluent-kafka strips them), so it names the window of sequences it may belong
to, and that window is ledgered ``unconfirmed``, never acked. Until resolved, the sent
tail is ledgered ``unconfirmed`` at each background flush: a crash leaves it so.
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
    UNCONFIRMED,
    encode_client_record,
    encode_session_start,
    producer_failures_header,
    producer_keys_header,
    producer_ranges_header,
)
from auditor.probes.config import applied_setting, ledger_producer_config
from auditor.probes.headers import AUDIT, AUDIT_ID, AUDIT_V2, RESERVED_HEADER_NAMES, decode_audit_id
from auditor.probes.key_entries import key_entries
from auditor.probes.native import HotProduce, SeqLock, use_native
from auditor.probes.persistence import classify_persistence, describe_error, sends_may_be_retried
from auditor.probes.topics import CLIENTS_TOPIC, PRODUCER_LEDGER_TOPIC
from auditor.probes.wrapping import ProducerWrapper, SequenceLock, acks_zero, timeout_args, truthy
from auditor.probes.writer import LedgerWriter

logger = logging.getLogger(__name__)

DeliveryCallback = Callable[[KafkaError | None, Message], None]
KeyFunction = Callable[[Any, Any], Any]
UserHeaders = Sequence[tuple[str, Any]] | Mapping[str, Any] | None
DeliveryReports = Literal["auto", "errors", "all"]

_time_ns = time.time_ns
_pack = AUDIT_V2.pack  # headers.pack_audit_header, inlined on the hot path
_monotonic = time.monotonic
# librdkafka checks message timeouts about once a second; a little more for scheduling.
_TIMEOUT_SLACK_S = 5.0


def _setting(config: Mapping[str, Any], names: tuple[str, ...], default: int) -> int:
    """An integer setting as librdkafka runs with it (applied_setting: aliases, the nested
    topic config)."""
    value = applied_setting(config, names)
    return default if value is None else int(str(value))


def _as_bytes(value: Any) -> bytes | None:
    """An audit-id or key as the bytes the header carries; None when empty."""
    if value is None:
        return None
    if isinstance(value, bytes):
        raw = value
    elif isinstance(value, (bytearray, memoryview)):
        raw = bytes(value)
    else:
        raw = str(value).encode("utf-8")
    return raw or None


def _split_user_headers(headers: UserHeaders) -> tuple[list[tuple[str, Any]], Any]:
    """User headers without the reserved audit names, and a user-supplied audit-id if any."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    kept: list[tuple[str, Any]] = []
    supplied_id: Any = None
    for name, value in pairs:  # type: ignore[union-attr]  # produce() calls this only with headers
        if name in RESERVED_HEADER_NAMES:
            if name == AUDIT_ID:
                supplied_id = value
            continue
        kept.append((name, value))
    return kept, supplied_id


def _returning_zero(call: Callable[..., None], *args: float) -> int:
    call(*args)
    return 0


class _TopicStream:
    """One topic of one session: the sequence counter and what is resolved of it."""

    __slots__ = (
        "failure_rows",
        "failures",
        "key_rows",
        "keys",
        "keys_base",
        "last_ms",
        "next_seq",
        "resolved",
        "resolved_ms",
        "rows",
        "stamps",
        "tail_written",
        "topic",
    )

    def __init__(self, topic: str, rows: deque[Any], started_ms: int) -> None:
        self.topic = topic
        self.next_seq = 0
        # The audit id (or record key) of each sequence from keys_base on, not yet ledgered:
        # one list append per record; the background flush writes and empties it.
        self.keys: list[Any] = []
        self.keys_base = 0
        # When their produce time (epoch ms) changed: (first seq, ts_ms), ascending, the first
        # at or before keys_base. Hundreds of sends share a millisecond under load, so this
        # costs a comparison per send where a list of stamps cost an append.
        self.stamps: list[tuple[int, int]] = [(0, 0)]
        self.last_ms = 0  # the produce time of the latest send
        self.key_rows: deque[Any] | None = None
        self.resolved = 0  # every seq below is resolved (ledgered acked or unconfirmed)
        self.resolved_ms = started_ms  # seqs from `resolved` on were produced after this
        self.tail_written = -1  # the highest seq ledgered as the unresolved tail
        self.failures: list[tuple[int, int]] = []  # windows of seqs a failure report may name
        self.rows = rows
        self.failure_rows: deque[Any] | None = None


def _give_back(stream: _TopicStream, seq: int, last_ms: int) -> None:
    """Undo what produce() took for `seq` before the client refused the record (under the
    sequence lock): the next call uses the sequence."""
    stream.next_seq = seq
    del stream.keys[-1]
    if stream.last_ms != last_ms:
        del stream.stamps[-1]
        stream.last_ms = last_ms


class AuditedProducer(ProducerWrapper):
    """A confluent_kafka.Producer that stamps the ``audit`` header and keeps a ledger.

    Header: version 2, the session id, the per-(session, topic) sequence and the produce
    time; the audit-id follows only when it differs from the record key: from
    ``key_fn(value, key)`` if given, else a user-supplied ``audit-id`` header. A record
    without key and id is identified by (session, seq). Other user-supplied reserved
    names (``audit``, ``audit-pid``, ``audit-seq``, ``audit-ts``) are dropped; all other
    user headers follow unchanged. A sequence is used up only when produce() succeeds
    locally. produce() is thread-safe, like Producer's.

    Delivery reports: with ``delivery_reports="errors"`` (the default unless the config
    has an ``on_delivery`` without ``delivery.report.only.error``) the wrapped producer
    reports failures only, and per-call callbacks see failures only; ``"all"`` keeps
    success reports for applications that need them (the ledger is the same). With
    ``acks=0`` resolved ranges are ``unconfirmed``, never ``acked``.

    Ledger: range records per topic, failure records, and ``session-end`` checkpoints
    with the last sequence sent, written through a separate acks=all idempotent producer
    in batches every ``ledger_flush_interval_s``; an idle session writes a ``session-end``
    heartbeat once nothing was ledgered for ``ledger_heartbeat_s``, so a silence longer than
    the ``alive_ms`` its records declare (heartbeat + flush interval) means it stopped, and
    close() ends with a ``closed`` session-end: readers tell a session killed with records
    it never ledgered from one that closed. ``flush()`` and ``close()`` resolve
    everything delivered and wait up to ``ledger_flush_timeout_s`` for the ledger (given a
    timeout, ``flush(t)``/``close(t)`` return within it, ledger included). A
    transactional producer resolves at ``commit_transaction()``/``abort_transaction()``
    only (records of an open transaction are not readable yet).
    """

    kind: Literal["producer"] = "producer"
    contract_version = 2

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
        delivery_reports: DeliveryReports = "auto",
        native: bool | None = None,
    ) -> None:
        self._declare_liveness(ledger_heartbeat_s, ledger_flush_interval_s)
        if delivery_reports not in ("auto", "errors", "all"):
            raise ValueError(f"delivery_reports must be 'auto', 'errors' or 'all', got {delivery_reports!r}")
        client_config = dict(config)
        self._config = dict(config)
        self._app_on_delivery: DeliveryCallback | None = client_config.pop("on_delivery", None)
        app_only_errors = truthy(client_config.pop("delivery.report.only.error", False))
        if delivery_reports == "auto":
            delivery_reports = "all" if self._app_on_delivery is not None and not app_only_errors else "errors"
        self._success_reports = delivery_reports == "all"
        self._warned_failures_only = False
        self._app_only_errors = app_only_errors or not self._success_reports
        client_config["on_delivery"] = self._on_report
        client_config["delivery.report.only.error"] = not self._success_reports
        self._range_status = UNCONFIRMED if acks_zero(client_config) else ACKED
        self._transactional = "transactional.id" in client_config
        self._transaction_inputs = {}
        # A failure's error is its last attempt's: with retries an earlier one may have written it.
        self._may_retry = sends_may_be_retried(client_config)
        message_timeout_ms = _setting(client_config, ("message.timeout.ms", "delivery.timeout.ms"), 300_000)
        request_timeout_ms = _setting(client_config, ("socket.timeout.ms",), 60_000)
        # No bound when messages never time out (message.timeout.ms=0): idle moments only.
        self._report_bound_s: float | None = (
            None if message_timeout_ms == 0 else (message_timeout_ms + request_timeout_ms) / 1000 + _TIMEOUT_SLACK_S
        )
        self._producer: Producer = producer_factory(client_config)  # or a test double
        self._inner_produce = self._producer.produce
        self._key_fn = key_fn
        self._ledger_flush_timeout_s = ledger_flush_timeout_s
        session = uuid.uuid4()
        self.session_id = session.hex
        self._session_bytes = session.bytes
        self.client_id: str = str(client_config.get("client.id", "rdkafka"))
        self.host = socket.gethostname()
        self._topics: dict[str, _TopicStream] = {}
        self.native = use_native(native)
        # The native hot path takes its own lock type without a method call; Python takes it
        # like a threading.Lock.
        self._seq_lock: SequenceLock = SeqLock() if self.native else threading.Lock()
        self._resolve_lock = threading.Lock()
        self._poll_lock = threading.Lock()
        self._polls_active = 0
        # Monotonic start of the latest poll/flush that returned normally while no earlier
        # one was running (_serve): every report queued before it was served.
        self._last_poll_started = 0.0
        self._poll_starts: list[float] = []  # starts of the polls/flushes running now
        self._snapshots: deque[tuple[float, int, list[tuple[_TopicStream, int]]]] = deque()
        self._closed = False
        self._last_checkpoint: dict[str, int] | None = None
        self.failures_reported = 0

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
        now_ms = _time_ns() // 1_000_000
        self._started_ms = now_ms
        self._ledger.write(
            encode_session_start(
                "producer", self.session_id, self.client_id, now_ms, self.host, alive_ms=self._alive_ms
            )
        )
        self._ledger.write(
            encode_client_record(
                "producer", self.session_id, self.client_id, None, libversion()[0], self._config, self.host, now_ms
            ),
            topic=clients_topic,
        )
        self._ledger.set_before_flush(self._background_resolve)
        self.produce = self._make_native_produce() if self.native else self._make_produce()

    # --- the hot path --------------------------------------------------------------------
    # produce(topic, value=None, key=None, partition=-1, on_delivery=None, timestamp=0,
    # headers=None, *, callback=None): the same contract as confluent_kafka.Producer.produce,
    # plus the `audit` header. A closure bound per instance (see _make_produce).
    produce: Callable[..., None]

    def _make_native_produce(self) -> Callable[..., None]:
        # The same steps as _make_produce's closure, in C (auditor/probes/_hotpath.c), under
        # the SeqLock the native mode made (the C code takes it without a method call).
        lock = self._seq_lock
        assert isinstance(lock, SeqLock)
        return HotProduce(
            self._topics,
            self._new_topic,
            self._inner_produce,
            self._produce_with_options,
            lock,
            self._session_bytes,
            AUDIT,
            self._key_fn is not None,
            _TopicStream,
        )

    def _make_produce(self) -> Callable[..., None]:
        # Everything the common call needs is a closure variable: each attribute lookup on
        # self would cost more than the lookup itself is worth on this path.
        get_stream = self._topics.get
        new_topic = self._new_topic
        lock = self._seq_lock
        inner_produce = self._inner_produce
        with_options = self._produce_with_options
        key_fn = self._key_fn
        session = self._session_bytes
        pack = _pack
        time_ns = _time_ns
        name = AUDIT

        def produce(
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
            """Same contract as ``confluent_kafka.Producer.produce``, plus the ``audit`` header."""
            if headers or on_delivery or callback or key_fn:
                with_options(topic, value, key, partition, on_delivery or callback, timestamp, headers)
                return
            ts_ms = time_ns() // 1_000_000
            with lock:  # `with`: an exception landing after the acquire still releases it
                stream = get_stream(topic) or new_topic(topic)
                seq = stream.next_seq
                audit = [(name, pack(2, session, seq, ts_ms))]
                # The sequence, key and stamp are taken before the client call, by steps that
                # call nothing (CPython runs a signal handler only at a call, a backward jump or
                # a function start): an exception a handler raises lands at the latest as the
                # call returns, the record queued and its bookkeeping done. A refusal (the
                # client's own exception) gives the sequence back.
                stream.next_seq = seq + 1
                keys = stream.keys
                keys += (key,)
                last_ms = stream.last_ms
                if ts_ms != last_ms:
                    stream.stamps += ((seq, ts_ms),)
                    stream.last_ms = ts_ms
                try:
                    # Positional on purpose (keywords cost ~0.5 us per call): slot 5 is `callback`.
                    inner_produce(topic, value, key, partition, None, None, timestamp, audit)
                except Exception:
                    _give_back(stream, seq, last_ms)
                    raise

        return produce

    def _produce_with_options(
        self,
        topic: str,
        value: Any,
        key: Any,
        partition: int,
        user_callback: DeliveryCallback | None,
        timestamp: int,
        headers: UserHeaders,
    ) -> None:
        extra_headers: list[tuple[str, Any]] | None = None
        audit_id: Any = None
        if headers:
            extra_headers, audit_id = _split_user_headers(headers)
        if self._key_fn is not None:
            audit_id = self._key_fn(value, key)
        id_bytes = None
        if audit_id is not None:
            id_bytes = _as_bytes(audit_id)
            if id_bytes is not None and id_bytes == _as_bytes(key):
                id_bytes = None  # the key says it: readers take the key
        report = None
        if user_callback is not None or id_bytes is not None:
            # An id other than the key (a header-supplied audit-id, the key function's): a
            # delivery report carries no headers, and its key and value are bytes where the
            # application may have passed str (a key function then gives another id, stop 70),
            # so the id computed now goes with this record's report.
            report = partial(self._on_call_report, id_bytes, user_callback)
        if user_callback is not None:
            if not self._success_reports and not self._warned_failures_only:
                # A drop-in Producer calls a per-call callback for successes too; say once that
                # this one will not, rather than let an application wait for reports in silence.
                self._warned_failures_only = True
                logger.warning(
                    "AuditedProducer reports failures only (delivery_reports=%r): per-call delivery "
                    "callbacks are not called for successful deliveries; pass delivery_reports='all' "
                    "(or an on_delivery in the config) to receive them",
                    "errors",
                )
        ts_ms = _time_ns() // 1_000_000
        with self._seq_lock:
            stream = self._topics.get(topic) or self._new_topic(topic)
            seq = stream.next_seq
            audit = _pack(2, self._session_bytes, seq, ts_ms)
            if id_bytes is not None:
                audit += id_bytes
            record_headers: list[tuple[str, Any]] = [(AUDIT, audit)]
            if extra_headers:
                record_headers.extend(extra_headers)
            inner_produce = self._inner_produce
            # Taken before the call, as in _make_produce's closure (why there).
            stream.next_seq = seq + 1
            keys = stream.keys
            keys += (key if audit_id is None else audit_id,)
            last_ms = stream.last_ms
            if ts_ms != last_ms:
                stream.stamps += ((seq, ts_ms),)
                stream.last_ms = ts_ms
            try:
                inner_produce(topic, value, key, partition, report, None, timestamp, record_headers)
            except Exception:
                _give_back(stream, seq, last_ms)
                raise

    def _new_topic(self, topic: str) -> _TopicStream:
        stream = _TopicStream(
            topic,
            self._ledger.stream(producer_ranges_header(self.session_id, self.client_id, topic)),
            _time_ns() // 1_000_000,
        )
        self._topics[topic] = stream
        return stream

    # --- delivery reports (failures, unless success reports were asked for) -------------------
    def _on_report(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self._ledger_failure(err, msg)
        app = self._app_on_delivery
        if app is not None and (err is not None or not self._app_only_errors):
            app(err, msg)

    def _on_call_report(
        self, named: bytes | None, user_callback: DeliveryCallback | None, err: KafkaError | None, msg: Message
    ) -> None:
        """The report of a record produced with a per-call callback or an ``audit-id`` header of
        its own (`named`: its failure is named by it): to that callback, else the config's."""
        if err is not None:
            self._ledger_failure(err, msg, named)
        app = self._app_on_delivery if user_callback is None else user_callback
        if app is not None and (err is not None or not self._app_only_errors):
            app(err, msg)

    def _ledger_failure(self, err: KafkaError, msg: Message, named: bytes | None = None) -> None:
        """Ledger a failure report, named by `named` (the id computed when the record was
        produced: its audit-id header or the key function's, where it differs from the key),
        else by its key."""
        topic = msg.topic() or ""
        audit_id = named or msg.key()
        with self._seq_lock:
            stream = self._topics.get(topic)
            if stream is None:
                return  # not a record of this session (cannot happen through produce())
            # The report has no headers: the failed record is one of the unresolved sequences.
            window = (stream.resolved, stream.next_seq - 1)
            stream.failures.append(window)
            if stream.failure_rows is None:
                stream.failure_rows = self._ledger.stream(
                    producer_failures_header(self.session_id, self.client_id, topic)
                )
            rows = stream.failure_rows
        partition = msg.partition()
        id_bytes = _as_bytes(audit_id)
        persisted = classify_persistence(err, may_retry=self._may_retry)
        rows.append(
            (window[0], window[1], -1 if partition is None or partition < 0 else partition, describe_error(err),
             persisted, None if id_bytes is None else decode_audit_id(id_bytes),
             _time_ns() // 1_000_000)
        )  # fmt: skip
        self.failures_reported += 1

    # --- resolving ranges -----------------------------------------------------------------
    def _snapshot(self) -> None:
        with self._seq_lock:
            snap = [(stream, stream.next_seq) for stream in self._topics.values()]
        self._snapshots.append((_monotonic(), _time_ns() // 1_000_000, snap))

    def _resolve(self, boundary: bool = False) -> None:
        """Resolve every snapshot whose failure reports have all been served.

        ``boundary``: a transaction just ended (a transactional producer resolves only then).
        """
        with self._resolve_lock:
            self._snapshot()
            if self._transactional and not boundary:
                return
            # Out-queue first, then running polls: an empty queue with no poll running means
            # every report queued before was popped by a poll that has finished its callbacks.
            idle = len(self._producer) == 0
            if idle:
                with self._poll_lock:
                    idle = self._polls_active == 0
            snapshots = self._snapshots
            while snapshots:
                taken_at, taken_ms, snap = snapshots[0]
                if not idle and (
                    self._report_bound_s is None or taken_at + self._report_bound_s > self._last_poll_started
                ):
                    break
                snapshots.popleft()
                for stream, upto in snap:
                    self._resolve_stream(stream, upto, taken_ms)

    def _resolve_stream(self, stream: _TopicStream, upto: int, taken_ms: int) -> None:
        first, last = stream.resolved, upto - 1
        if last < first:
            return
        with self._seq_lock:
            windows = sorted(
                (max(lo, first), min(hi, last)) for lo, hi in stream.failures if hi >= first and lo <= last
            )
            stream.failures = [(lo, hi) for lo, hi in stream.failures if hi > last]
            stream.resolved, stream.resolved_ms, from_ms = upto, taken_ms, stream.resolved_ms
        rows = stream.rows
        position = first
        for lo, hi in windows:
            if hi < position:
                continue
            if lo > position:
                rows.append((position, lo - 1, self._range_status, from_ms, taken_ms))
            rows.append((max(lo, position), hi, UNCONFIRMED, from_ms, taken_ms))
            position = hi + 1
        if position <= last:
            rows.append((position, last, self._range_status, from_ms, taken_ms))

    def _write_unresolved_tail(self) -> None:
        """Ledger the sent, unresolved sequences as unconfirmed: what a crash leaves."""
        now_ms = _time_ns() // 1_000_000
        with self._seq_lock:
            tails = [
                (stream, max(stream.resolved, stream.tail_written + 1), stream.next_seq - 1, stream.resolved_ms)
                for stream in self._topics.values()
            ]
            for stream, _, last, _ in tails:
                stream.tail_written = max(stream.tail_written, last)
        for stream, first, last, from_ms in tails:
            if first <= last:
                stream.rows.append((first, last, UNCONFIRMED, from_ms, now_ms))

    def _write_keys(self) -> None:
        """Ledger the audit id of every sequence sent since the last call (``keys`` records):
        what lets readers name the item of a sequence the topic no longer has."""
        with self._seq_lock:
            taken = []
            for stream in self._topics.values():
                if stream.keys:
                    taken.append((stream, stream.keys_base, stream.keys, stream.stamps))
                    stream.keys_base += len(stream.keys)
                    stream.keys = []
                    stream.stamps = [(stream.keys_base, stream.last_ms)]
        for stream, base, keys, stamps in taken:
            rows = stream.key_rows
            if rows is None:
                rows = stream.key_rows = self._ledger.stream(
                    producer_keys_header(self.session_id, self.client_id, stream.topic), encoded=True
                )
            rows.extend(key_entries(base, keys, stamps))

    def _background_resolve(self) -> None:
        # Taken first: every sequence up to it is ledgered by the steps below (a send racing
        # them is not, and a heartbeat must not name it as sent)
        sent = self.last_sequences()
        self._resolve()
        self._write_unresolved_tail()
        self._write_keys()
        self._heartbeat(sent)

    # --- polling: tracked so resolution knows when reports have been served ----------------
    def _serve(self, call: Callable[..., int], *args: float) -> int:
        started = _monotonic()
        with self._poll_lock:
            self._polls_active += 1
            self._poll_starts.append(started)
        served = False
        try:
            served_count = call(*args)
            served = True
            return served_count
        finally:
            with self._poll_lock:
                self._polls_active -= 1
                self._poll_starts.remove(started)
                # A proof that every report queued before `started` was served only when the
                # call returned (a raising callback stops it with reports left queued) and no
                # poll that started no later is still running (librdkafka hands all queued
                # reports to the first poller: this one may have found the queue empty).
                if served and started > self._last_poll_started and all(other > started for other in self._poll_starts):
                    self._last_poll_started = started

    def poll(self, timeout: float | None = None) -> int:
        return self._serve(self._producer.poll, *timeout_args(timeout))

    # --- ledger-aware lifecycle --------------------------------------------------------
    def flush(self, timeout: float | None = None) -> int:
        """Flush the producer, resolve what was delivered, and make the ledger durable.

        Returns what ``Producer.flush`` returns: messages still in the queue.
        """
        started = time.monotonic()
        remaining = self._serve(self._producer.flush, *timeout_args(timeout))
        # Taken before the steps below, as in _background_resolve: each sequence up to it is
        # ledgered by them (resolved, or in the unresolved tail); a send racing them is not.
        sent = self.last_sequences()
        self._resolve()
        self._write_unresolved_tail()
        self._write_keys()
        self._end_session_checkpoint(self._ledger_timeout(timeout, started), sent, patient=timeout != 0)
        return remaining

    def close(self, timeout: float | None = None) -> int:
        """Flush, resolve, write the final session-end, and close the ledger and the producer."""
        if self._closed:
            return 0
        started = time.monotonic()
        remaining = self._serve(self._producer.flush, *timeout_args(timeout))
        self._ledger.set_before_flush(None)
        sent = self.last_sequences()  # before the tail is written, as in flush()
        self._resolve(boundary=True)
        self._write_unresolved_tail()
        self._write_keys()
        # The last record of the session, after every other: a session whose ledger has it
        # sent nothing unledgered.
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

    # --- transactions: resolved at their end ---------------------------------------------
    def commit_transaction(self, timeout: float | None = None) -> None:
        self._serve(partial(_returning_zero, self._producer.commit_transaction), *timeout_args(timeout))
        self._resolve(boundary=True)
        self._end_transaction_inputs(committed=True)

    def abort_transaction(self, timeout: float | None = None) -> None:
        # Aborted records were acked (and are filtered by read_committed readers), as in v1.
        self._note_abort()  # before the abort: the marks held now may be of this transaction
        self._serve(partial(_returning_zero, self._producer.abort_transaction), *timeout_args(timeout))
        self._resolve(boundary=True)
        self._end_transaction_inputs(committed=False)

    # --- introspection -----------------------------------------------------------------
    def resolved_sequences(self) -> dict[str, int]:
        """Per topic, the next sequence not yet resolved (everything below is ledgered)."""
        with self._seq_lock:
            return {topic: stream.resolved for topic, stream in self._topics.items()}

    def stats(self) -> dict[str, int]:
        with self._seq_lock:
            produced = sum(stream.next_seq for stream in self._topics.values())
            unresolved = sum(stream.next_seq - stream.resolved for stream in self._topics.values())
        return {
            "produced": produced,
            "unresolved": unresolved,
            "failures_reported": self.failures_reported,
            "in_queue": len(self._producer),
            **self._ledger.stats(),
        }
