"""The demo's consumer side: process tickets with AuditedConsumer and set them DONE.

Every mode commits explicitly (enable.auto.commit=false), so what reaches the
group's committed offsets is exactly what the mode's code commits:

- at-most-once: commit a batch's offsets, then process the batch;
- at-least-once: process, store the offset (enable.auto.offset.store=false),
  commit the stored offsets every ``commit_every`` records or
  ``commit_interval_s`` seconds;
- exactly-once: like at-least-once, but the status update and an idempotency
  key are written in one database transaction, so a redelivered record is skipped;
- transactional: read_committed input, a transactional producer writes each
  result to ``output_topic`` and sends the batch's offsets in the transaction.

A crash fault stops the consumer like a dying process: nothing more is
committed. With ``crash_exits_process`` the process really exits (after the
probe's ledger is flushed, so the marks made so far survive, and without the
ledger's session-end); otherwise the clients are closed without a commit so the
same process can start a fresh consumer.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from auditor.demo.options import DeliveryMode, Faults, ProbeTopics
from auditor.demo.producer import audited_producer
from auditor.demo.store import ApplyOutcome, TicketStore
from auditor.probes import AuditedConsumer, AuditedConsumerV1, AuditedProducer, AuditedProducerV1
from auditor.probes.message import record_position  # _receive() keeps error events out

logger = logging.getLogger(__name__)

# Exit status of a process stopped by the crash fault (the supervisor restarts it).
CRASH_EXIT_CODE = 3
# How long a consumer may wait for its first assignment before idle time starts counting
# (a crashed predecessor keeps its partitions until its session times out: 10 s here).
_ASSIGNMENT_GRACE_S = 30.0


class _Crash(Exception):
    """The crash fault fired."""


@dataclass(frozen=True)
class HandledRecord:
    topic: str
    partition: int
    offset: int
    ticket_id: str | None
    outcome: ApplyOutcome | None  # None: not a ticket record (logged and skipped)


@dataclass
class ConsumeResult:
    session_id: str
    handled: list[HandledRecord] = field(default_factory=list)
    # at-most-once: records whose offsets were committed but that were never processed
    skipped: list[HandledRecord] = field(default_factory=list)
    crashed: bool = False
    stop_reason: str = ""

    def ticket_ids(self, *outcomes: ApplyOutcome) -> list[str]:
        """Handled ticket ids, in handling order, optionally only those with one of ``outcomes``."""
        return [
            record.ticket_id
            for record in self.handled
            if record.ticket_id is not None and (not outcomes or record.outcome in outcomes)
        ]


def consumer_config(kafka_config: Mapping[str, Any], group: str, client_id: str, mode: DeliveryMode) -> dict[str, Any]:
    config: dict[str, Any] = {
        "group.id": group,
        "client.id": client_id,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        # A crashed member holds its partitions until this expires; keep restarts quick.
        "session.timeout.ms": 10000,
    }
    if mode is DeliveryMode.TRANSACTIONAL:
        config["isolation.level"] = "read_committed"
    config.update(kafka_config)
    return config


def _ticket_id_of(msg: Message) -> str | None:
    try:
        document = json.loads(msg.value() or b"")
    except (ValueError, UnicodeDecodeError):
        return None
    ticket_id = document.get("ticket_id") if isinstance(document, dict) else None
    return ticket_id if isinstance(ticket_id, str) and ticket_id else None


def _next_offsets(records: Sequence[Message]) -> list[TopicPartition]:
    """Per partition, the offset after the last of ``records`` (what a commit stores)."""
    highest: dict[tuple[str, int], int] = {}
    for msg in records:
        topic, partition, offset = record_position(msg)
        key = (topic, partition)
        highest[key] = max(highest.get(key, -1), offset)
    return [TopicPartition(topic, partition, offset + 1) for (topic, partition), offset in sorted(highest.items())]


def _first_offsets(records: Sequence[Message]) -> list[TopicPartition]:
    lowest: dict[tuple[str, int], int] = {}
    for msg in records:
        topic, partition, offset = record_position(msg)
        key = (topic, partition)
        lowest[key] = min(lowest.get(key, offset), offset)
    return [TopicPartition(topic, partition, offset) for (topic, partition), offset in sorted(lowest.items())]


class TicketConsumer:
    """Consumes ticket records from ``topic`` and sets the tickets DONE in ``store``.

    Fault counters count the records this instance handled. In the transactional
    mode, ``transactional_id`` (default ``<group>.<topic>.0``) names one live
    consumer: a new instance with the same id fences the old one and aborts its
    open transaction, which is how a restart after a crash cleans up.
    """

    def __init__(
        self,
        *,
        kafka_config: Mapping[str, Any],
        store: TicketStore,
        topic: str = "tickets",
        group: str = "ticket-processor",
        mode: DeliveryMode = DeliveryMode.AT_LEAST_ONCE,
        faults: Faults | None = None,
        output_topic: str = "tickets.processed",
        batch_size: int = 100,
        commit_every: int = 100,
        commit_interval_s: float = 5.0,
        poll_timeout_s: float = 0.5,
        client_id: str = "ticket-processor",
        transactional_id: str | None = None,
        probe_topics: ProbeTopics | None = None,
        crash_exits_process: bool = False,
    ) -> None:
        if batch_size < 1 or commit_every < 1:
            raise ValueError(f"batch_size and commit_every must be >= 1, got {batch_size} and {commit_every}")
        self.store = store
        self.topic = topic
        self.group = group
        self.mode = mode
        self.faults = faults or Faults()
        self.output_topic = output_topic
        self.batch_size = batch_size
        self.commit_every = commit_every
        self.commit_interval_s = commit_interval_s
        self.poll_timeout_s = poll_timeout_s
        self.crash_exits_process = crash_exits_process
        probes = probe_topics or ProbeTopics()
        self.config = consumer_config(kafka_config, group, client_id, mode)
        consumer_class = AuditedConsumerV1 if probes.contract == 1 else AuditedConsumer
        self._consumer: AuditedConsumer | AuditedConsumerV1 = consumer_class(
            self.config,
            ledger_topic=probes.consumer_ledger,
            clients_topic=probes.clients,
            ledger_flush_interval_s=probes.ledger_flush_interval_s,
        )
        self._producer: AuditedProducer | AuditedProducerV1 | None = None
        if mode is DeliveryMode.TRANSACTIONAL:
            self.transactional_id = transactional_id or f"{group}.{topic}.0"
            producer_config = {
                "client.id": f"{client_id}.output",
                "transactional.id": self.transactional_id,
                "linger.ms": 5,
                **{k: v for k, v in kafka_config.items() if not k.startswith(("group.", "isolation."))},
            }
            self._producer = audited_producer(producer_config, probes)
            # Fences an earlier incarnation with the same transactional.id and
            # aborts the transaction it left open.
            self._producer.init_transactions(30)
        self._handled_count = 0  # this instance, for the fault counters
        self._since_commit = 0
        self._last_commit = time.monotonic()
        self._closed = False
        self._assigned = False
        self._consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    @property
    def session_id(self) -> str:
        return self._consumer.session_id

    # --- the loop ----------------------------------------------------------------------
    def run(
        self,
        *,
        max_records: int | None = None,
        idle_timeout_s: float | None = None,
        timeout_s: float | None = None,
        stop: threading.Event | None = None,
    ) -> ConsumeResult:
        """Consume until ``max_records`` were handled, nothing arrived for ``idle_timeout_s``,
        ``timeout_s`` passed, ``stop`` was set, or the crash fault fired. Closes the consumer."""
        result = ConsumeResult(self.session_id)
        started = time.monotonic()
        # Idle time counts from the first assignment (a group still waiting for a crashed
        # member's session to expire is not idle), or from _ASSIGNMENT_GRACE_S after the start.
        idle_since: float | None = None
        try:
            while True:
                now = time.monotonic()
                if stop is not None and stop.is_set():
                    result.stop_reason = "stopped"
                    break
                if max_records is not None and len(result.handled) >= max_records:
                    result.stop_reason = "max-records"
                    break
                if idle_since is None and (self._assigned or now - started >= _ASSIGNMENT_GRACE_S):
                    idle_since = now
                if idle_timeout_s is not None and idle_since is not None and now - idle_since >= idle_timeout_s:
                    result.stop_reason = "idle"
                    break
                if timeout_s is not None and now - started >= timeout_s:
                    result.stop_reason = "timeout"
                    break
                wanted = self.batch_size
                if max_records is not None:
                    wanted = min(wanted, max_records - len(result.handled))
                records = self._receive(wanted)
                if records:
                    idle_since = time.monotonic()
                    self._handle_batch(records, result)
                elif self.mode in (DeliveryMode.AT_LEAST_ONCE, DeliveryMode.EXACTLY_ONCE):
                    self._commit_if_due(force=False)
        except _Crash:
            result.crashed = True
            result.stop_reason = "crash"
            self._die(result)
            return result
        except BaseException:
            # An unexpected error ends this consumer like a crash: nothing more is committed.
            self._closed = True
            self._close_clients()
            raise
        self.close()
        return result

    def _receive(self, wanted: int) -> list[Message]:
        records: list[Message] = []
        for msg in self._consumer.consume(wanted, self.poll_timeout_s):
            error = msg.error()
            if error is None:
                records.append(msg)
            elif error.code() != KafkaError._PARTITION_EOF:
                logger.warning("consumer error on %s: %s", self.topic, error.str())
        return records

    def _handle_batch(self, records: list[Message], result: ConsumeResult) -> None:
        if self.mode is DeliveryMode.AT_MOST_ONCE:
            self._commit_offsets(_next_offsets(records))  # before processing: that is the mode
            for index, msg in enumerate(records):
                try:
                    result.handled.append(self._process(msg))
                    self._count_and_maybe_crash()
                except _Crash:
                    result.skipped.extend(self._describe(m) for m in records[index + 1 :])
                    raise
        elif self.mode is DeliveryMode.TRANSACTIONAL:
            self._handle_transaction(records, result)
        else:
            for msg in records:
                result.handled.append(self._process(msg))
                self._consumer.store_offsets(message=msg)
                self._since_commit += 1
                self._count_and_maybe_crash()
                self._commit_if_due(force=False)

    def _count_and_maybe_crash(self) -> None:
        crash_after = self.faults.crash_after
        if crash_after and self._handled_count >= crash_after:
            logger.warning("fault crash-after=%d: consumer %s dies now", crash_after, self.session_id)
            raise _Crash

    # --- processing one record ---------------------------------------------------------
    def _should_lose_update(self) -> bool:
        every = self.faults.fail_update_every
        return every is not None and self._handled_count % every == 0

    def _process(self, msg: Message) -> HandledRecord:
        """Process one ticket record (at-most-once, at-least-once, exactly-once)."""
        self._handled_count += 1
        ticket_id = _ticket_id_of(msg)
        if ticket_id is None:
            logger.warning("not a ticket record at %s/%d@%d: skipped", msg.topic(), msg.partition(), msg.offset())
            return self._describe(msg)
        if self.faults.slow_ms:
            time.sleep(self.faults.slow_ms / 1000)
        lose = self._should_lose_update()
        if self.mode is DeliveryMode.EXACTLY_ONCE:
            outcome = self.store.apply_once(self.group, ticket_id, *record_position(msg), lose_update=lose)
            if outcome is not ApplyOutcome.DUPLICATE:  # a skipped duplicate was not processed again
                self._consumer.mark_processed(msg)
        else:
            with self._consumer.processing(msg):
                outcome = self.store.mark_done(ticket_id, lose_update=lose)
        self._log_lost(outcome, ticket_id)
        return HandledRecord(*record_position(msg), ticket_id, outcome)

    def _log_lost(self, outcome: ApplyOutcome, ticket_id: str) -> None:
        if outcome is ApplyOutcome.LOST:
            every = self.faults.fail_update_every
            logger.warning("fault fail-update-every=%s: %s processed but its update was rolled back", every, ticket_id)

    def _describe(self, msg: Message, outcome: ApplyOutcome | None = None) -> HandledRecord:
        return HandledRecord(*record_position(msg), _ticket_id_of(msg), outcome)

    # --- transactional consume-process-produce -----------------------------------------------
    def _handle_transaction(self, records: list[Message], result: ConsumeResult) -> None:
        producer = self._producer
        assert producer is not None
        handled: list[HandledRecord] = []
        producer.begin_transaction()
        try:
            for msg in records:
                self._handled_count += 1
                ticket_id = _ticket_id_of(msg)
                outcome: ApplyOutcome | None = None
                if ticket_id is not None:
                    if self.faults.slow_ms:
                        time.sleep(self.faults.slow_ms / 1000)
                    # The update is idempotent and runs before the commit: a transaction
                    # that aborts is redone and sets DONE again, harmlessly.
                    outcome = self.store.mark_done(ticket_id, lose_update=self._should_lose_update())
                    self._log_lost(outcome, ticket_id)
                    producer.produce(
                        self.output_topic,
                        json.dumps(
                            {"ticket_id": ticket_id, "status": "DONE",
                             "source": [msg.topic(), msg.partition(), msg.offset()]},
                            separators=(",", ":"),
                        ).encode("utf-8"),
                        ticket_id.encode("utf-8"),
                    )  # fmt: skip
                handled.append(HandledRecord(*record_position(msg), ticket_id, outcome))
                self._count_and_maybe_crash()
            producer.send_offsets_to_transaction(_next_offsets(records), self._consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not (isinstance(error, KafkaError) and error.txn_requires_abort()):
                raise
            logger.warning("transaction aborted (%s): the batch will be read again", error.str())
            producer.abort_transaction(30)
            for position in _first_offsets(records):
                self._consumer.seek(position)
            return
        for msg in records:  # processed means committed, in this mode
            self._consumer.mark_processed(msg)
        result.handled.extend(handled)

    # --- offsets -----------------------------------------------------------------------
    def _commit_offsets(self, offsets: list[TopicPartition]) -> None:
        if offsets:
            self._consumer.commit(offsets=offsets, asynchronous=False)

    def _commit_if_due(self, *, force: bool) -> None:
        """Commit the stored offsets (at-least-once, exactly-once) when enough piled up."""
        due = self._since_commit >= self.commit_every or (
            self._since_commit and time.monotonic() - self._last_commit >= self.commit_interval_s
        )
        if not (due or (force and self._since_commit)):
            return
        try:
            self._consumer.commit(asynchronous=False)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not (isinstance(error, KafkaError) and error.code() == KafkaError._NO_OFFSET):
                raise
        self._since_commit = 0
        self._last_commit = time.monotonic()

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self._assigned = True

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        # Hand over what was processed so the next owner does not process it again.
        if self.mode in (DeliveryMode.AT_LEAST_ONCE, DeliveryMode.EXACTLY_ONCE) and not self._closed:
            try:
                self._commit_if_due(force=True)
            except KafkaException as exc:
                logger.warning("commit on revoke failed: %s", exc)

    # --- ending ------------------------------------------------------------------------
    def _die(self, result: ConsumeResult) -> None:
        """The crash fault: no commit. Either really exit, or close without committing."""
        if self.crash_exits_process:
            # The marks made so far survive (as if the crash came just after a ledger
            # flush); an open transaction is left for the next incarnation to abort.
            self._consumer.flush_ledger(5)
            sys.stderr.write(
                f"demo consumer {self.session_id}: crash fault after {self._handled_count} records, exiting\n"
            )
            sys.stderr.flush()
            os._exit(CRASH_EXIT_CODE)
        self._since_commit = 0  # nothing stored is committed: the crash lost it
        self._closed = True
        self._close_clients()

    def close(self) -> None:
        """Commit what was processed (at-least-once, exactly-once), then close the clients."""
        if self._closed:
            return
        if self.mode in (DeliveryMode.AT_LEAST_ONCE, DeliveryMode.EXACTLY_ONCE):
            self._commit_if_due(force=True)
        self._closed = True
        self._close_clients()

    def _close_clients(self) -> None:
        try:
            self._consumer.close()
        finally:
            try:
                if self._producer is not None:
                    self._producer.close(10)
            finally:
                self.store.close()

    def __enter__(self) -> TicketConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
