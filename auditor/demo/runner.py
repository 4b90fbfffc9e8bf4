"""Setting the demo up, and running producer and consumer together as one service.

``run_service`` produces tickets at a steady rate in this process and runs the
consumer in a child process, so the crash fault ends a real process (no
offsets committed, no clean leave of the group, no ledger session-end) and the
supervisor starts a new one after ``restart_delay_s``.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any

import psycopg
from confluent_kafka import KafkaException

from auditor.demo.consumer import CRASH_EXIT_CODE, TicketConsumer
from auditor.demo.options import DeliveryMode, Faults, ProbeTopics
from auditor.demo.producer import TicketProducer
from auditor.demo.store import TicketStore
from auditor.probes import ensure_audit_topics

logger = logging.getLogger(__name__)

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@dataclass(frozen=True)
class DemoSettings:
    """Where the demo pipeline lives; picklable, so the consumer process gets a copy."""

    kafka_config: dict[str, Any]
    source_url: str
    table: str = "tickets"
    processed_table: str = "processed_keys"
    topic: str = "tickets"
    output_topic: str = "tickets.processed"
    group: str = "ticket-processor"
    probe_topics: ProbeTopics = field(default_factory=ProbeTopics)

    def store(self) -> TicketStore:
        return TicketStore(self.source_url, self.table, self.processed_table)


@dataclass(frozen=True)
class ConsumerSpec:
    settings: DemoSettings
    mode: DeliveryMode = DeliveryMode.AT_LEAST_ONCE
    faults: Faults = field(default_factory=Faults)
    batch_size: int = 100
    commit_every: int = 100
    commit_interval_s: float = 5.0

    def build(self, *, crash_exits_process: bool) -> TicketConsumer:
        s = self.settings
        return TicketConsumer(
            kafka_config=s.kafka_config,
            store=s.store(),
            topic=s.topic,
            group=s.group,
            mode=self.mode,
            faults=self.faults,
            output_topic=s.output_topic,
            batch_size=self.batch_size,
            commit_every=self.commit_every,
            commit_interval_s=self.commit_interval_s,
            probe_topics=s.probe_topics,
            crash_exits_process=crash_exits_process,
        )


@dataclass
class SetupResult:
    tables: list[str]
    topics_created: list[str]


def setup_demo(settings: DemoSettings, partitions: int = 3, replication_factor: int | None = None) -> SetupResult:
    """Create the source tables, the ticket topics and the probes' audit topics (idempotent).

    Topics get replication factor min(3, brokers) unless given; ones that exist are left alone.
    """
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    with settings.store() as store:
        store.ensure_schema()
    created = ensure_audit_topics(
        settings.kafka_config,
        [settings.topic, settings.output_topic],
        partitions=partitions,
        replication_factor=replication_factor,
    )
    probes = settings.probe_topics
    created += ensure_audit_topics(
        settings.kafka_config,
        [probes.producer_ledger, probes.consumer_ledger, probes.clients],
        replication_factor=replication_factor,
    )
    return SetupResult([settings.table, settings.processed_table], created)


def install_stop_handlers(stop: threading.Event) -> None:
    """SIGTERM (make stop) and SIGINT (Ctrl-C) end the loop at its next step."""

    def handle(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


def consumer_process_main(spec: ConsumerSpec) -> None:
    """Entry point of the consumer child process."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    stop = threading.Event()
    install_stop_handlers(stop)
    consumer = spec.build(crash_exits_process=True)
    logger.info("demo consumer %s started (%s, faults: %s)", consumer.session_id, spec.mode, spec.faults)
    result = consumer.run(stop=stop)
    logger.info("demo consumer %s stopped (%s) after %d records", result.session_id, result.stop_reason,
                len(result.handled))  # fmt: skip


@dataclass
class ServiceStats:
    consumer_starts: int = 0
    consumer_crashes: int = 0
    consumer_failures: int = 0
    producer_errors: int = 0


class DemoService:
    """Produces ``rate`` tickets per second and keeps one consumer process running until ``stop``."""

    def __init__(
        self,
        spec: ConsumerSpec,
        *,
        rate: float = 2.0,
        restart_delay_s: float = 5.0,
        stats_interval_s: float = 60.0,
    ) -> None:
        if rate < 0:
            raise ValueError(f"rate must be >= 0 tickets per second, got {rate}")
        self.spec = spec
        self.rate = rate
        self.restart_delay_s = restart_delay_s
        self.stats_interval_s = stats_interval_s
        self.stats = ServiceStats()
        self._context = multiprocessing.get_context("spawn")  # never fork a process with librdkafka threads
        self._child: BaseProcess | None = None

    def run(self, stop: threading.Event) -> None:
        s = self.spec.settings
        producer = TicketProducer(
            kafka_config=s.kafka_config,
            store=s.store(),
            topic=s.topic,
            faults=self.spec.faults,
            probe_topics=s.probe_topics,
        )
        logger.info(
            "demo pipeline: %s, faults: %s, %.3g tickets/s into %s -> topic %s",
            self.spec.mode, self.spec.faults, self.rate, s.table, s.topic,
        )  # fmt: skip
        interval = 1.0 / self.rate if self.rate else None
        next_ticket = time.monotonic()
        restart_at = time.monotonic()
        next_stats = time.monotonic() + self.stats_interval_s
        try:
            while not stop.is_set():
                now = time.monotonic()
                if interval is not None and now >= next_ticket:
                    next_ticket = max(next_ticket + interval, now - 1.0)  # no burst after a stall
                    if not self._create_ticket(producer):
                        next_ticket = now + 5.0  # back off while the database or broker is away
                producer.poll(0)
                restart_at = self._watch_consumer(now, restart_at)
                if now >= next_stats:
                    next_stats = now + self.stats_interval_s
                    self._log_stats(producer)
                wait = 0.2 if interval is None else min(0.2, max(0.0, next_ticket - time.monotonic()))
                stop.wait(wait)
        finally:
            self._stop_consumer()
            producer.close(10)
            self._log_stats(producer)

    def _create_ticket(self, producer: TicketProducer) -> bool:
        try:
            producer.create_ticket()
            return True
        except (psycopg.Error, KafkaException) as exc:
            self.stats.producer_errors += 1
            logger.error("demo producer: %s; retrying in 5s", exc)
            producer.store.close()
            return False

    def _watch_consumer(self, now: float, restart_at: float) -> float:
        child = self._child
        if child is not None and not child.is_alive():
            code = child.exitcode
            self._child = None
            if code == CRASH_EXIT_CODE:
                self.stats.consumer_crashes += 1
                logger.warning("demo consumer crashed (fault); restarting in %.0fs", self.restart_delay_s)
            else:
                self.stats.consumer_failures += 1
                logger.error("demo consumer exited with status %s; restarting in %.0fs", code, self.restart_delay_s)
            return now + self.restart_delay_s
        if child is None and now >= restart_at:
            self._child = self._context.Process(
                target=consumer_process_main, args=(self.spec,), name="demo-consumer", daemon=False
            )
            self._child.start()
            self.stats.consumer_starts += 1
        return restart_at

    def _stop_consumer(self) -> None:
        child = self._child
        if child is None:
            return
        if child.is_alive():
            child.terminate()  # SIGTERM: the child commits what it processed and leaves the group
            child.join(20)
            if child.is_alive():
                child.kill()
                child.join(5)
        self._child = None

    def _log_stats(self, producer: TicketProducer) -> None:
        p, s = producer.stats, self.stats
        logger.info(
            "demo: tickets inserted %d, produced %d, dropped %d, acked %d, failed %d; "
            "consumer starts %d, crashes %d, other exits %d",
            p.inserted, p.produced, p.dropped, p.acked, p.failed,
            s.consumer_starts, s.consumer_crashes, s.consumer_failures,
        )  # fmt: skip
