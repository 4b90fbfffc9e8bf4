"""What the audited clients of both record contract versions share: configuration helpers,
the session-end checkpoint, and the plain delegation to the wrapped confluent-kafka client.

The version-specific parts (produce, delivery reports, marks, flush and close) stay in
producer.py / producer_v1.py and consumer.py / consumer_v1.py.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Literal, Protocol, Self

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from auditor.probes.codec import encode_session_end
from auditor.probes.config import TOPIC_CONFIG, applied_setting, librdkafka_bool, mask_config
from auditor.probes.offset_store import DeferredOffsetStore, position, record_position
from auditor.probes.writer import LedgerWriter

logger = logging.getLogger(__name__)

DeliveryCallback = Callable[[KafkaError | None, Message], None]


def acks_zero(config: Mapping[str, Any]) -> bool:
    """True when the producer sends fire-and-forget: acks=0 as librdkafka applies it (the later
    of `acks` and its alias, a nested `default.topic.config` last)."""
    acks = applied_setting(config, ("acks", "request.required.acks"))
    return acks is not None and str(acks).strip() == "0"


def truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "on")
    return bool(value)


def timeout_args(timeout: float | None) -> tuple[float, ...]:
    return () if timeout is None else (timeout,)


class _Stream(Protocol):
    next_seq: int


# (topic, partition) -> the position sent to the transaction: the next offset to consume.
TransactionPositions = dict[tuple[str, int], int]


class TransactionMarks(Protocol):
    """What an audited consumer offers the probed transactional producer that its positions
    are sent to (``send_offsets_to_transaction``): its marks of the records below those
    positions are of that transaction, and are written only if it commits."""

    session_id: str

    def join_transaction(self) -> None: ...
    def end_transaction(self, positions: TransactionPositions, committed: bool, producer: str) -> None: ...
    def note_abort(self, producer: str) -> None: ...


class HoldingConsumers:
    """The audited consumers of the process that hold their marks for the outcome of a
    transaction. A probed producer's abort is told to each (ProducerWrapper._note_abort): the
    transaction it ended may have carried marks of theirs without their positions (aborted
    before send_offsets_to_transaction). Weak: a consumer dropped without close() leaves too."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._consumers: weakref.WeakSet[TransactionMarks] = weakref.WeakSet()

    def add(self, consumer: TransactionMarks) -> None:
        with self._lock:
            self._consumers.add(consumer)

    def discard(self, consumer: object) -> None:
        with self._lock:
            self._consumers.discard(consumer)  # type: ignore[arg-type]  # any object: absent ones are left alone

    def note_abort(self, producer: str) -> None:
        """Tell each that `producer` is about to abort. One consumer's failure is logged and
        never stops the others, nor the application's abort."""
        with self._lock:
            consumers = list(self._consumers)
        for consumer in consumers:
            try:
                consumer.note_abort(producer)
            except Exception:  # the probe must not break the application's abort
                logger.exception("audited consumer: noting the abort of producer %s failed", producer)


HOLDING = HoldingConsumers()


class GroupMetadata(bytes):
    """An audited consumer's ``consumer_group_metadata()``: the client's own bytes (any
    producer takes them), carrying the consumer's marks for a probed producer."""

    transaction_marks: TransactionMarks


# Commit metadata naming the probed consumer session that committed (docs/contracts.md, "Commit
# metadata"): the stuck diagnosis reads it back from __consumer_offsets to tell a probed
# consumer's commit from a plain one's.
# What a probed session's commits carry (docs/contracts.md, "Commit metadata"); the readers'
# copy is spark_jobs.commit_history's (the probes import nothing outside this package; a test
# keeps the two the same).
COMMIT_METADATA_PREFIX = "audit:v2:"
# Kafka's offset.metadata.max.bytes default: an application's own metadata that leaves no room
# for the probe's is committed unchanged (the commit then names no session).
COMMIT_METADATA_MAX_BYTES = 4096


def commit_metadata(session: str, given: str | None = None) -> str:
    """The metadata a probed session commits: ``audit:v2:<session>``, after the application's
    own metadata and a newline when it gave some (kept unchanged when both would not fit).

    Metadata read back from a commit (``committed()``) and committed again carries an earlier
    session's line: it is dropped first, so the lines do not pile up, and a commit never names a
    session that did not make it."""
    mark = COMMIT_METADATA_PREFIX + session
    own = _without_session_lines(given or "")
    if not own:
        return mark
    combined = f"{own}\n{mark}"
    # librdkafka sends the string with its terminating NUL, which the broker counts
    fits = len(combined.encode("utf-8")) + 1 <= COMMIT_METADATA_MAX_BYTES
    return combined if fits else own


def _without_session_lines(metadata: str) -> str:
    """`metadata` less its trailing ``audit:v2:`` lines (a probe's, read back and given again)."""
    lines = metadata.split("\n")
    while lines and lines[-1].startswith(COMMIT_METADATA_PREFIX):
        lines.pop()
    return "\n".join(lines)


def with_commit_metadata(positions: list[TopicPartition], session: str) -> list[TopicPartition]:
    """Copies of ``positions`` whose metadata names ``session`` (the caller's list is left alone)."""
    return [
        position(tp.topic, tp.partition, tp.offset, commit_metadata(session, tp.metadata), tp.leader_epoch)
        for tp in positions
    ]


def probe_stores_offsets(config: Mapping[str, Any]) -> bool:
    """True when the probe stores the handed messages' offsets itself (with its commit metadata)
    in place of librdkafka's ``enable.auto.offset.store``, which stores them without: a group
    member whose application leaves that setting on (the default), read as librdkafka applies
    the config (a nested ``default.topic.config`` last, its boolean spellings). A value the
    client refuses is left to it."""
    if applied_setting(config, ("group.id",)) is None:
        return False
    store = applied_setting(config, ("enable.auto.offset.store",))
    return store is None or librdkafka_bool(store) is True


def inner_consumer_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The wrapped client's configuration: the application's, with librdkafka's offset store
    turned off where the probe stores the offsets itself (probe_stores_offsets), in the nested
    ``default.topic.config`` too, which the client applies last."""
    inner = dict(config)
    if probe_stores_offsets(config):
        inner["enable.auto.offset.store"] = False
        nested = inner.get(TOPIC_CONFIG)
        if isinstance(nested, Mapping) and "enable.auto.offset.store" in nested:
            inner[TOPIC_CONFIG] = {**nested, "enable.auto.offset.store": False}
    return inner


def transaction_positions(positions: list[TopicPartition]) -> TransactionPositions:
    return {(tp.topic, tp.partition): tp.offset for tp in positions if tp.offset >= 0}


class SequenceLock(Protocol):
    """What a producer's sequence lock offers: threading.Lock, or the native SeqLock."""

    def acquire(self, blocking: bool = ..., timeout: float = ...) -> bool: ...
    def release(self) -> None: ...
    def locked(self) -> bool: ...
    def __enter__(self) -> bool: ...
    def __exit__(self, exc_type: Any, exc: Any, traceback: Any, /) -> None: ...


class ProducerWrapper:
    """Delegation and the session-end checkpoint of an audited producer (either version)."""

    _producer: Producer
    _config: dict[str, Any]
    _ledger: LedgerWriter
    _ledger_flush_timeout_s: float
    _seq_lock: SequenceLock
    _topics: Mapping[str, _Stream]
    _last_checkpoint: dict[str, int] | None
    # how often at least the session writes a ledger record while it runs (_declare_liveness)
    _alive_ms: int | None = None
    _heartbeat_s: float
    session_id: str
    produce: Callable[..., None]
    # Audited consumers whose positions went to the open transaction, with the positions.
    _transaction_inputs: dict[int, tuple[TransactionMarks, TransactionPositions]]

    def close(self, timeout: float | None = None) -> int:
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self._producer)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ledger_timeout(self, timeout: float | None, started: float | None = None) -> float:
        """How long the ledger may be waited for: ledger_flush_timeout_s, and within a call
        given a timeout (flush(5), close(5)) no longer than what is left of it: an outage
        that holds up the ledger's acks=all writes must not hold up the application longer
        than it asked for (the ledger keeps writing in the background)."""
        if timeout is None:
            return self._ledger_flush_timeout_s
        left = timeout - (time.monotonic() - started) if started is not None else timeout
        return max(0.0, min(left, self._ledger_flush_timeout_s))

    def _declare_liveness(self, heartbeat_s: float, flush_interval_s: float) -> None:
        """Have the session's ledger never silent for longer than heartbeat_s + one flush
        interval while it runs: the `alive_ms` its session-start and session-ends declare
        (docs/contracts.md, liveness). Both contracts' background flushes call _heartbeat."""
        if heartbeat_s <= 0:
            raise ValueError(f"ledger_heartbeat_s must be > 0, got {heartbeat_s}")
        self._heartbeat_s = heartbeat_s
        # The background flush checks every flush interval: a running session's ledger is
        # never silent longer than the heartbeat plus one interval (plus the flush's own run).
        self._alive_ms = round((heartbeat_s + flush_interval_s) * 1000)

    # Set once a ledger record of this session was not written (_watch_ledger_losses).
    _ledger_lost = False
    # A loss not yet declared in a written session-end (_heartbeat writes one at once)
    _loss_unsaid = False

    def _watch_ledger_losses(self) -> None:
        """Be told of each ledger record of this session that was not written (the client
        refused it, its queue stayed full, or its delivery failed): from then on no session-end
        names a sequence a lost record may have held (each keeps the last checkpoint's), and
        close() writes no `closed` (readers then take the session as one that may have sent
        records its ledger does not name: unknown, never never-sent). The next background
        flush writes a session-end saying so (`ledger_lost`, _heartbeat), and every later one
        says it too: the sequences past its `last_seq` are not known to readers, though later
        records of the session name higher ones."""
        self._ledger.set_on_lost(self._note_ledger_loss)

    def _note_ledger_loss(self, value: bytes) -> None:
        # Runs on the thread serving the ledger producer's reports, or under the writer's lock;
        # _ledger_lost first: a session-end saying the loss reads it after _loss_unsaid.
        first = not self._ledger_lost
        self._ledger_lost = True
        self._loss_unsaid = True  # again where the session-end saying so was the record lost
        if first:
            logger.error(
                "audited producer %s: a ledger record was not written; the session will not be "
                "ledgered as closed and no later session-end names a sequence it may have held",
                self.session_id,
            )

    def _heartbeat(self, last_seq: Mapping[str, int]) -> None:
        """A session-end when this flush writes nothing and nothing was ledgered for
        ``ledger_heartbeat_s``: an idle session's ledger is never silent for longer, so readers
        know a silent one stopped (it may have sent records its ledger never got). `last_seq`:
        what the ledger already accounts for, as each contract knows it."""
        ledger = self._ledger
        idle = not ledger.pending_count() and time.monotonic() - ledger.last_write_at >= self._heartbeat_s
        if not (idle or self._loss_unsaid):
            return
        self._write_end(last_seq)

    def _write_end(self, last_seq: Mapping[str, int], closed: bool = False) -> None:
        """A session-end naming `last_seq`, or, once a ledger record of the session was lost,
        the last checkpoint's and `ledger_lost` (the loss read once, so both agree)."""
        self._loss_unsaid = False
        lost = self._ledger_lost
        self._ledger.write(
            encode_session_end(
                "producer",
                self.session_id,
                time.time_ns() // 1_000_000,
                (self._last_checkpoint or {}) if lost else last_seq,
                alive_ms=self._alive_ms,
                closed=closed and not lost,
                ledger_lost=lost,
            )
        )

    def _write_closing_end(self, last_seq: dict[str, int], wait: float) -> None:
        """The session's last ledger record, after every other: a session-end with `closed`,
        which says the session sent nothing its ledger does not account for. Written once the
        records before it were (waiting up to `wait` seconds): when one was lost or is still
        unsettled, the end carries no `closed` and the last checkpoint's `last_seq`."""
        unsettled = self._ledger.flush(wait)
        lost = self._ledger_lost
        closed = not unsettled and not lost
        if closed:
            self._last_checkpoint = last_seq
        else:
            logger.error(
                "audited producer %s: not ledgered as closed: %s",
                self.session_id,
                "a ledger record was not written" if lost else f"{unsettled} ledger record(s) unsettled",
            )
        self._write_end(last_seq if closed else self._last_checkpoint or {}, closed=closed)

    def _end_session_checkpoint(self, wait: float, last_seq: dict[str, int] | None, patient: bool = True) -> None:
        """Write a session-end naming `last_seq` (unless nothing changed since the last) and wait
        up to `wait` seconds for the ledger (_ledger_timeout: what the caller's timeout leaves).
        `patient`: the caller gave time (flush(), flush(5)), so a ledger still not written after
        it is logged; flush(0) asked not to wait (lab run #32 logged the lag 3,427 times in 3
        minutes of an application flushing with 0 after each send), and the background flush
        writes the records.

        `last_seq`: the last sequence per topic that the ledger accounts for once what it holds
        now is written, taken by the caller before it; None: the previous checkpoint (if any)
        is kept. A session-end naming a sequence with no ledger entry yet (a send still in
        flight) makes it a hole that readers judge at once: so does one naming a sequence whose
        entry was lost, and the session-end names new sequences only once the records before it
        were written (a lost or still unsettled one keeps the previous checkpoint)."""
        deadline = time.monotonic() + wait
        if (
            last_seq is not None
            and last_seq != self._last_checkpoint
            and (self._ledger.flush(wait) or self._ledger_lost)
        ):
            last_seq = None
        if last_seq is None:
            last_seq = self._last_checkpoint
        wait = max(0.0, deadline - time.monotonic())
        unchanged = last_seq is None or (last_seq == self._last_checkpoint and not self._ledger.pending_count())
        if unchanged and not self._loss_unsaid:
            # Nothing new since the last session-end: don't repeat it.
            self._wait_for_ledger(wait, patient)
            return
        if not self._ledger_lost:  # a loss keeps the checkpoint before it (_write_end)
            self._last_checkpoint = last_seq
        self._write_end(last_seq or {})
        self._wait_for_ledger(wait, patient)

    def _wait_for_ledger(self, wait: float, patient: bool) -> None:
        """Wait up to `wait` seconds for the ledger; log what is still unwritten if `patient`."""
        remaining = self._ledger.flush(wait)
        if remaining and patient:
            logger.error(
                "audited producer %s: %d ledger record(s) not yet written to %s",
                self.session_id,
                remaining,
                self._ledger.topic,
            )

    # --- delegation ----------------------------------------------------------------------
    def produce_batch(
        self,
        topic: str,
        messages: list[dict[str, Any]],
        partition: int = -1,
        on_delivery: DeliveryCallback | None = None,
    ) -> int:
        """Like ``Producer.produce_batch`` (which cannot carry headers): one audited
        produce() per message; failed ones get an ``_error`` entry. Returns the count queued."""
        queued = 0
        for message in messages:
            try:
                self.produce(
                    topic,
                    message.get("value"),
                    message.get("key"),
                    message.get("partition", partition),
                    on_delivery=message.get("callback") or on_delivery,
                    timestamp=message.get("timestamp", 0),
                    headers=message.get("headers"),
                )
                queued += 1
            except (BufferError, KafkaException, TypeError, ValueError) as exc:  # per message, like produce_batch
                message["_error"] = exc
        return queued

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return self._producer.list_topics(topic, timeout)

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        self._producer.purge(in_queue, in_flight, blocking)

    def init_transactions(self, timeout: float | None = None) -> None:
        self._producer.init_transactions(*timeout_args(timeout))

    def begin_transaction(self) -> None:
        self._producer.begin_transaction()

    def send_offsets_to_transaction(
        self,
        positions: list[TopicPartition],
        group_metadata: Any,
        timeout: float | None = None,
    ) -> None:
        marks: TransactionMarks | None = getattr(group_metadata, "transaction_marks", None)
        if marks is not None:
            # Before the call: if it fails the application aborts, and the marks go with it.
            marks.join_transaction()
            _, sent = self._transaction_inputs.setdefault(id(marks), (marks, {}))
            for at, offset in transaction_positions(positions).items():
                sent[at] = max(offset, sent.get(at, offset))
            # The commit the transaction makes names the probed consumer session whose positions they are.
            positions = with_commit_metadata(positions, marks.session_id)
        self._producer.send_offsets_to_transaction(positions, group_metadata, *timeout_args(timeout))

    def _note_abort(self) -> None:
        """Before this producer's abort: each audited consumer holding marks notes which it
        holds now. Those its positions never went to (the application aborted before sending
        them, or did not send a partition's) were of this transaction if this producer is the
        one their positions go to: its next commit carrying them names them aborted."""
        HOLDING.note_abort(self.session_id)

    def _end_transaction_inputs(self, committed: bool) -> None:
        """The transaction ended (its commit or abort call returned): the audited consumers
        whose positions it carried write their marks of it (committed) or name them aborted."""
        inputs = list(self._transaction_inputs.values())
        self._transaction_inputs.clear()
        for marks, positions in inputs:
            marks.end_transaction(positions, committed, self.session_id)

    def __getattr__(self, name: str) -> Any:
        # Anything not wrapped (cluster_id, set_sasl_credentials, ...).
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._producer, name)

    # --- introspection -----------------------------------------------------------------
    @property
    def producer(self) -> Producer:
        """The wrapped confluent_kafka.Producer (records produced on it directly are not audited)."""
        return self._producer

    def effective_config(self) -> dict[str, Any]:
        """The configuration the application gave, secrets masked (as published to the clients topic)."""
        return mask_config(self._config)

    def last_sequences(self) -> dict[str, int]:
        """The last sequence number sent per topic (-1 entries omitted)."""
        with self._seq_lock:
            return {topic: stream.next_seq - 1 for topic, stream in self._topics.items() if stream.next_seq > 0}


class _Marking(Protocol):
    def mark_processed(self, msg: Message) -> None: ...


class Processing:
    """``with consumer.processing(msg):`` marks the message only if the block succeeds."""

    __slots__ = ("_consumer", "_msg")

    def __init__(self, consumer: _Marking, msg: Message) -> None:
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


class ConsumerWrapper:
    """Offsets, assignment, lifecycle and introspection of an audited consumer (either
    version). ``_hand_marks_over`` lets a version move marks it still holds to the ledger
    writer first (before a commit, a ledger flush or the close)."""

    _consumer: Consumer
    _config: dict[str, Any]
    _ledger: LedgerWriter
    _ledger_flush_timeout_s: float
    _closed: bool
    mark_processed: Callable[[Message], None]
    session_id: str
    # the probe stores handed messages' offsets in place of librdkafka (probe_stores_offsets),
    # through its deferred store
    _stores_offsets: bool = False
    _offset_store: DeferredOffsetStore | None = None

    def _hand_marks_over(self) -> None:
        """Nothing to do where marks go straight to the ledger writer."""

    def _settle_before_end(self) -> None:
        """close(): the last step before the final session-end (AuditedConsumer decides there
        whether it may say `closed`)."""

    def _release_held_marks(self, closing: bool = False) -> None:
        """Nothing to do where no marks wait for a transaction's outcome."""

    def processing(self, msg: Message) -> Processing:
        """Context manager: marks ``msg`` processed when the block exits without an exception."""
        return Processing(self, msg)

    # --- offsets ----------------------------------------------------------------------------
    def commit(
        self,
        message: Message | None = None,
        offsets: list[TopicPartition] | None = None,
        asynchronous: bool = True,
    ) -> list[TopicPartition] | None:
        # Offsets committed by the consumer itself: no transaction holds these marks back.
        self._release_held_marks()
        self._hand_marks_over()
        self._ledger.flush_entries()
        if not asynchronous:
            # Bounded: the commit goes ahead when the ledger cannot be written in time (the
            # probe never holds the application up for long); the marks in records that then
            # fail are named in a marks-lost record (AuditedConsumer).
            remaining = self._ledger.flush(self._ledger_flush_timeout_s)
            if remaining:
                logger.warning(
                    "audit ledger %s: committing with %d ledger record(s) not yet written (last error: %s)",
                    self._ledger.topic,
                    remaining,
                    self._ledger.last_error,
                )
        # The commit names this session in its metadata (docs/contracts.md); with neither
        # argument librdkafka commits the stored offsets, which carry it (store_offsets, and the
        # probe's own store in place of enable.auto.offset.store).
        kwargs: dict[str, Any] = {"asynchronous": asynchronous}
        if message is not None:
            kwargs.update(self._message_position(message))
        if offsets is not None:
            kwargs["offsets"] = with_commit_metadata(offsets, self.session_id)
        self._store_handed()  # the store as librdkafka's own would hold it now
        committed: list[TopicPartition] | None = self._consumer.commit(**kwargs)
        return committed

    def _message_position(self, message: Message) -> dict[str, Any]:
        """The position after ``message`` with this session's metadata, as commit/store_offsets
        take it (an error event is passed as it is: the client refuses it as before)."""
        if message.error() is not None:
            return {"message": message}
        return {"offsets": [record_position(message, commit_metadata(self.session_id))]}

    def store_offsets(
        self,
        message: Message | None = None,
        offsets: list[TopicPartition] | None = None,
    ) -> None:
        if self._stores_offsets:
            # The application left enable.auto.offset.store on, where librdkafka refuses an
            # explicit store: so does the probe that stores in its place.
            raise KafkaException(
                KafkaError(KafkaError._INVALID_ARG, "store_offsets with enable.auto.offset.store=true")
            )
        kwargs: dict[str, Any] = {}
        if message is not None:
            kwargs.update(self._message_position(message))
        if offsets is not None:
            kwargs["offsets"] = with_commit_metadata(offsets, self.session_id)
        self._consumer.store_offsets(**kwargs)

    def _offset_store_calls(self, native: bool) -> tuple[Callable[..., Message | None], Callable[..., list[Message]]]:
        """The consumer's ``poll`` and ``consume``: the client's own, or where the probe stores
        the offsets (probe_stores_offsets) those of its deferred store (offset_store.py: the
        last record handed per partition is kept, its position stored within STORE_INTERVAL_S
        and before anything that reads the store)."""
        if not self._stores_offsets:
            return self._consumer.poll, self._consumer.consume
        store = DeferredOffsetStore(self._consumer, commit_metadata(self.session_id), native, self)
        self._offset_store = store
        return store.poll, store.consume

    def _store_handed(self, blocking: bool = True) -> None:
        """Store the positions of the records handed so far, where the probe stores offsets:
        before the client reads the store (a commit, a close, a change of assignment)."""
        store = self._offset_store
        if store is not None:
            store.store_handed(blocking)

    # --- assignment (delegation; the probe's offset store first) -----------------------------
    def subscribe(
        self,
        topics: list[str],
        on_assign: Callable[..., None] | None = None,
        on_revoke: Callable[..., None] | None = None,
        on_lost: Callable[..., None] | None = None,
    ) -> None:
        callbacks = {"on_assign": on_assign, "on_revoke": on_revoke, "on_lost": on_lost}
        if self._offset_store is not None:
            # The probe's own callbacks store the handed positions first, before librdkafka
            # commits the revoked partitions (it does so once they are unassigned, after the
            # callback; confluent-kafka unassigns itself after one that did not). Lost partitions
            # go to on_revoke when the application gave no on_lost, as confluent-kafka sends them.
            callbacks["on_lost"] = on_lost or on_revoke
            self._consumer.subscribe(
                topics, **{name: self._storing_first(callback) for name, callback in callbacks.items()}
            )
            return
        self._consumer.subscribe(
            topics, **{name: self._given_self(callback) for name, callback in callbacks.items() if callback is not None}
        )

    def _given_self(self, callback: Callable[..., None]) -> Callable[..., None]:
        """A rebalance callback called with this audited consumer, not the client inside it:
        a commit it makes (``on_revoke`` committing what was processed) goes through the probe
        (the marks first), and so does the group metadata it sends to a transaction."""

        def called(_client: Consumer, partitions: list[TopicPartition]) -> None:
            callback(self, partitions)

        return called

    def _storing_first(self, callback: Callable[..., None] | None) -> Callable[..., None]:
        """A rebalance callback of the probe's: stores the handed positions, then calls the
        application's (if any) with this audited consumer."""

        def called(_client: Consumer, partitions: list[TopicPartition]) -> None:
            # never waiting: another thread of the application storing (a commit from a worker)
            # may be waiting for the client this poll holds
            self._store_handed(blocking=False)
            if callback is not None:
                callback(self, partitions)

        return called

    # Each stores the handed positions first: librdkafka commits the stored offsets of the
    # partitions an assignment change removes (with enable.auto.commit), and a seek is ordered
    # after the records handed before it.
    def assign(self, partitions: list[TopicPartition]) -> None:
        self._store_handed()
        self._consumer.assign(partitions)

    def unsubscribe(self) -> None:
        self._store_handed()
        self._consumer.unsubscribe()

    def unassign(self) -> None:
        self._store_handed()
        self._consumer.unassign()

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self._store_handed()
        self._consumer.incremental_assign(partitions)

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self._store_handed()
        self._consumer.incremental_unassign(partitions)

    def seek(self, partition: TopicPartition) -> None:
        self._store_handed()
        self._consumer.seek(partition)

    def __getattr__(self, name: str) -> Any:
        # assignment, committed, position, pause, resume, get_watermark_offsets,
        # consumer_group_metadata, list_topics, ...
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._consumer, name)

    # --- lifecycle --------------------------------------------------------------------------
    def flush_ledger(self, timeout: float | None = None) -> int:
        """Write buffered marks (and a session-end checkpoint if anything changed) now and
        wait for them; returns ledger records still in flight."""
        self._hand_marks_over()
        self._ledger.write_checkpoint()
        return self._ledger.flush(self._ledger_flush_timeout_s if timeout is None else timeout)

    def close(self) -> None:
        """Write the buffered marks and the session end, then close the consumer."""
        if self._closed:
            return
        self._closed = True
        HOLDING.discard(self)  # no later abort of a producer concerns it
        # Marks first, so the final auto-commit in Consumer.close() does not run
        # ahead of them; then whatever its rebalance callbacks marked, then the end.
        self._hand_marks_over()
        self._ledger.flush(self._ledger_flush_timeout_s)
        if self._offset_store is not None:
            self._offset_store.close()  # the handed positions stored before the close's commit
        try:
            self._consumer.close()
        finally:
            self._hand_marks_over()
            self._release_held_marks(closing=True)
            self._ledger.set_before_flush(None)
            self._settle_before_end()
            self._ledger.write_checkpoint(force=True)
            self._ledger.close(self._ledger_flush_timeout_s)

    def __enter__(self) -> Self:
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
