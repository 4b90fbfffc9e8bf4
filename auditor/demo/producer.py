"""The demo's producer side: insert a NEW ticket, then produce it with AuditedProducer.

The database insert commits first and the produce follows, as in the user's
story; nothing makes the two atomic, which is exactly the gap the auditor shows
(``drop_every`` makes it visible on purpose).

With a ``transactional_id`` (or the ``abort_every`` fault, which needs one) each ticket
is produced in a Kafka transaction of its own, the producer side of an exactly-once
pipeline; read_committed consumers (librdkafka's default, so every demo mode) see a
ticket only once its transaction commits.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message

from auditor.demo.options import Faults, ProbeTopics
from auditor.demo.store import Ticket, TicketStore
from auditor.probes import AuditedProducer, AuditedProducerV1

logger = logging.getLogger(__name__)

_SUBJECTS = (
    "printer on fire",
    "password reset",
    "VPN drops",
    "refund request",
    "laptop will not boot",
    "access to repo",
)
_PRIORITIES = ("low", "normal", "normal", "high")


@dataclass(frozen=True)
class ProducedTicket:
    ticket: Ticket
    produced: bool  # False: the drop fault skipped the produce

    @property
    def ticket_id(self) -> str:
        return self.ticket.ticket_id


@dataclass
class ProducerStats:
    inserted: int = 0
    produced: int = 0
    dropped: int = 0
    acked: int = 0
    failed: int = 0
    failed_ids: list[str] = field(default_factory=list)
    aborted_ids: list[str] = field(default_factory=list)  # the abort fault's tickets


# Attempts at one ticket's transaction when the broker asks for an abort (e.g. a leader moved).
_TRANSACTION_ATTEMPTS = 3


def audited_producer(config: dict[str, Any], probes: ProbeTopics) -> AuditedProducer | AuditedProducerV1:
    """The probe of the contract version asked for. The demo counts acks in its own delivery
    callback, so a version-2 producer keeps success reports for it."""
    options: dict[str, Any] = {
        "ledger_topic": probes.producer_ledger,
        "clients_topic": probes.clients,
        "ledger_flush_interval_s": probes.ledger_flush_interval_s,
    }
    if probes.contract == 1:
        return AuditedProducerV1(config, **options)
    return AuditedProducer(config, delivery_reports="all", **options)


def producer_config(
    kafka_config: Mapping[str, Any], faults: Faults, client_id: str, transactional_id: str | None = None
) -> dict[str, Any]:
    """The demo producer's client config: durable by default, weakened only by fault switches."""
    config: dict[str, Any] = {
        "client.id": client_id,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
    }
    config.update(kafka_config)
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
    if faults.no_idempotence:
        # Retries stay on (librdkafka's default) with a million requests in flight:
        # a retried batch can land twice or behind a later one.
        config.update({"enable.idempotence": False, "retries": 2147483647})
    if faults.fire_and_forget:
        config.update({"acks": 0, "enable.idempotence": False, "retries": 0})
    return config


def ticket_value(ticket: Ticket) -> bytes:
    """The record value: the ticket as JSON; record_key json:$.ticket_id finds it."""
    document = {
        "ticket_id": ticket.ticket_id,
        "id": ticket.id,
        "created_at": ticket.created_at.isoformat(),
        "payload": ticket.payload,
    }
    return json.dumps(document, separators=(",", ":")).encode("utf-8")


def demo_payload(number: int) -> dict[str, Any]:
    return {"subject": _SUBJECTS[number % len(_SUBJECTS)], "priority": _PRIORITIES[number % len(_PRIORITIES)]}


class TicketProducer:
    """Inserts tickets into the source table and produces each to ``topic``.

    ``faults.drop_every=N`` inserts every Nth ticket of this instance but never
    produces it; ``fire_and_forget`` and ``no_idempotence`` weaken the client.
    ``transactional_id`` produces each ticket in a transaction of its own;
    ``faults.abort_every=N`` does too (with ``<client_id>.<topic>`` unless an id is
    given) and aborts every Nth ticket's transaction without producing it again.
    Call ``flush()`` to wait for the broker, ``close()`` at the end.
    """

    def __init__(
        self,
        *,
        kafka_config: Mapping[str, Any],
        store: TicketStore,
        topic: str = "tickets",
        faults: Faults | None = None,
        client_id: str = "ticket-producer",
        probe_topics: ProbeTopics | None = None,
        transactional_id: str | None = None,
    ) -> None:
        self.store = store
        self.topic = topic
        self.faults = faults or Faults()
        self.stats = ProducerStats()
        probes = probe_topics or ProbeTopics()
        if transactional_id is None and self.faults.abort_every is not None:
            transactional_id = f"{client_id}.{topic}"
        self.transactional_id = transactional_id
        self.config = producer_config(kafka_config, self.faults, client_id, transactional_id)
        self._producer = audited_producer(self.config, probes)
        if transactional_id is not None:
            # Fences an earlier instance with the same id and aborts the transaction it left open.
            self._producer.init_transactions(30)

    @property
    def session_id(self) -> str:
        return self._producer.session_id

    def create_ticket(self, payload: dict[str, Any] | None = None) -> ProducedTicket:
        """Insert one ticket (committed), then produce it unless the drop fault says otherwise."""
        ticket = self.store.insert_ticket(payload if payload is not None else demo_payload(self.stats.inserted))
        self.stats.inserted += 1
        drop_every = self.faults.drop_every
        if drop_every and self.stats.inserted % drop_every == 0:
            self.stats.dropped += 1
            logger.info("fault drop-every=%d: %s inserted but never produced", drop_every, ticket.ticket_id)
            return ProducedTicket(ticket, produced=False)
        if self.transactional_id is None:
            self._produce(ticket)
        else:
            self._produce_in_transaction(ticket, abort=self._abort_fault_hits())
        return ProducedTicket(ticket, produced=True)

    def _abort_fault_hits(self) -> bool:
        every = self.faults.abort_every
        return every is not None and self.stats.inserted % every == 0

    def create_tickets(self, count: int) -> list[ProducedTicket]:
        created = [self.create_ticket() for _ in range(count)]
        self.flush()
        return created

    def _produce(self, ticket: Ticket) -> None:
        value = ticket_value(ticket)
        key = ticket.ticket_id.encode("utf-8")
        while True:
            try:
                self._producer.produce(self.topic, value, key, on_delivery=self._on_delivery)
                break
            except BufferError:  # local queue full: serve delivery reports, then retry
                self._producer.poll(0.5)
        self.stats.produced += 1
        self._producer.poll(0)

    def _produce_in_transaction(self, ticket: Ticket, *, abort: bool) -> None:
        """One ticket, one transaction. The abort fault flushes first so the record is in the
        log (acked, then aborted: invisible to read_committed), and never sends it again."""
        for attempt in range(1, _TRANSACTION_ATTEMPTS + 1):
            self._producer.begin_transaction()
            try:
                self._produce(ticket)
                if abort:
                    self._producer.flush(30)
                    self._producer.abort_transaction(30)
                    self.stats.aborted_ids.append(ticket.ticket_id)
                    every = self.faults.abort_every
                    logger.info("fault abort-every=%s: %s's transaction was aborted", every, ticket.ticket_id)
                else:
                    self._producer.commit_transaction(30)
                return
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if (
                    not (isinstance(error, KafkaError) and error.txn_requires_abort())
                    or attempt == _TRANSACTION_ATTEMPTS
                ):
                    raise
                # The transaction cannot complete (e.g. a partition leader moved): abort it
                # and produce the ticket again in a new one, as an exactly-once producer must.
                logger.warning("transaction for %s must abort (%s): producing it again", ticket.ticket_id, error.str())
                self._producer.abort_transaction(30)

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.stats.acked += 1
            return
        self.stats.failed += 1
        key = msg.key()
        ticket_id = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
        self.stats.failed_ids.append(ticket_id)
        logger.warning("ticket %s was not delivered: %s", ticket_id, err.str())

    def poll(self, timeout: float = 0) -> int:
        return self._producer.poll(timeout)

    def flush(self, timeout: float = 30.0) -> int:
        """Wait for delivery reports; returns the records still undelivered."""
        return self._producer.flush(timeout)

    def close(self, timeout: float = 30.0) -> None:
        try:
            self._producer.close(timeout)
        finally:
            self.store.close()

    def __enter__(self) -> TicketProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
