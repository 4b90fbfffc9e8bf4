"""The canary runner (a long-running process): produce to every partition at a fixed rate, consume, account, store.

One thread does everything (produce what is due, serve delivery reports, consume what
arrived, expire what the broker acknowledged but was not read within the SLA, close minutes), so the accounting needs no locks and the
database is only touched from the thread that owns the connection. The SLA and latencies run on
the monotonic clock; the wall clock only names the minutes stored and the time in each record.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from django.db import DatabaseError, close_old_connections, connection

from auditor.canary.accounting import CanaryAccounting, DeliveryCounts
from auditor.canary.alerting import alert_on_minute
from auditor.canary.models import CanaryPoint
from auditor.canary.payload import decode_record, encode_record
from auditor.canary.store import record_minute
from auditor.canary.topic import CanaryError, TopicLayout, ensure_canary_topic, leaders_from_stats, read_leaders
from auditor.lib.throttled_log import ThrottledLog
from auditor.probes.message import record_position

log = logging.getLogger(__name__)
# librdkafka's own log lines (broker down, reconnects), through logging rather than raw stderr.
kafka_log = logging.getLogger("auditor.canary.librdkafka")

DEFAULT_TOPIC = "_audit.canary"
MINUTE = 60.0
# A stalled loop (GC, slow database) must not turn into a burst that distorts latency:
# a partition more than this far behind its schedule skips the backlog.
MAX_SCHEDULE_LAG_S = 1.0


@dataclass(frozen=True)
class CanaryOptions:
    bootstrap_servers: str
    topic: str = DEFAULT_TOPIC
    cluster: str = ""  # the configured cluster (--cluster) the bootstrap servers are of; "" when none was named
    rate: float = 10.0  # records per second per partition
    sla_s: float = 20.0
    duration_s: float | None = None  # None: until stopped
    consumer_delay_s: float = 0.0  # start consuming late (tests make records disappear meanwhile)
    client_config: dict[str, Any] = field(default_factory=dict)  # extra librdkafka settings
    connect_timeout_s: float = 10.0
    manage_interval_s: float = 60.0  # how often leadership is re-checked
    drain_s: float = 5.0  # at the end, how long in-flight records are waited for
    store_points: bool = True


@dataclass
class CanaryResult:
    session: str
    options: CanaryOptions
    layout: TopicLayout
    leaders: dict[int, int]
    report: dict[str, Any]
    elapsed_s: float
    minutes_stored: int
    producers_replaced: int = 0  # producers abandoned after a fatal error (a new idempotent session each)

    def as_dict(self) -> dict[str, Any]:
        partitions = {
            key: {**value, "leader": self.leaders.get(int(key))} for key, value in self.report["partitions"].items()
        }
        return {
            "session": self.session,
            "topic": self.options.topic,
            "cluster": self.options.cluster or None,
            "bootstrap_servers": self.options.bootstrap_servers,
            "rate": self.options.rate,
            "sla_s": self.options.sla_s,
            "elapsed_s": round(self.elapsed_s, 3),
            "producers_replaced": self.producers_replaced,
            "brokers": self.layout.brokers,
            "brokers_leading_nothing": self.layout.leading_nothing,
            "actions": self.layout.actions,
            "partitions": partitions,
            "totals": self.report["totals"],
        }


def _kafka_error(exc: KafkaException) -> KafkaError | None:
    """The KafkaError a KafkaException carries, if any."""
    error = exc.args[0] if exc.args else None
    return error if isinstance(error, KafkaError) else None


def _kafka_error_text(exc: KafkaException) -> str:
    error = _kafka_error(exc)
    return error.str() if error is not None else str(exc)


def is_fatal(exc: KafkaException) -> bool:
    """Whether the client that raised ``exc`` is unusable from now on (librdkafka's fatal errors:
    an idempotent producer's sequence desynchronised by an unclean election, a fenced producer)."""
    error = _kafka_error(exc)
    # produce() on a producer already fatal raises _FATAL without the fatal flag set (2.16).
    return error is not None and (error.fatal() or error.code() == KafkaError._FATAL)


class InFlight:
    """The records one producer instance holds whose delivery report has not come (pure).

    When a producer is abandoned after a fatal error, the reports of what it held may never
    come: those records are settled as failed by whoever abandons it, and a report that still
    comes later is ignored, so each record is settled exactly once.
    """

    def __init__(self) -> None:
        self._keys: set[tuple[int, int]] = set()

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, partition: int, seq: int) -> None:
        self._keys.add((partition, seq))

    def settle(self, partition: int, seq: int) -> bool:
        """True the first time ``(partition, seq)`` is settled, False after (or if never added)."""
        try:
            self._keys.remove((partition, seq))
        except KeyError:
            return False
        return True

    def abandon(self) -> list[tuple[int, int]]:
        """What was still unsettled, in order; settled from now on."""
        left = sorted(self._keys)
        self._keys.clear()
        return left


class CanaryService:
    def __init__(
        self,
        options: CanaryOptions,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if options.rate <= 0:
            raise CanaryError(f"--rate must be positive, got {options.rate}")
        if options.sla_s <= 0:
            raise CanaryError(f"--sla must be positive, got {options.sla_s}")
        if options.duration_s is not None and options.duration_s <= 0:
            raise CanaryError(f"--duration must be positive, got {options.duration_s}")
        self.options = options
        self.session = uuid.uuid4().hex
        self._clock = clock
        self._monotonic = monotonic
        self._stop = threading.Event()
        self._next_send: dict[int, float] = {}
        # partition -> leader broker as last read (set up in run(), refreshed in place by the producer's
        # statistics each second and the metadata at each minute close and topic check): records
        # remember the leader they were sent to, so a loss found later is not blamed on its successor.
        self._leaders: dict[int, int] = {}
        self._minutes_stored = 0
        # While a cluster refuses records every send fails: one line a minute per partition and
        # error, not one per record (delivery reports and consumer errors come on the loop's thread).
        self._warnings = ThrottledLog(log, clock=monotonic)
        # The producer in use and the records it holds; a fatal error (an idempotent producer's
        # sequence refused after an unclean election) replaces both (_replace_producer).
        self._producer: Producer | None = None
        self._in_flight = InFlight()
        self._fatal: KafkaError | None = None  # a fatal error reported and not yet acted on
        self._producers_replaced = 0

    def _producer_stats(self, stats_json: str) -> None:
        self._leaders.update(leaders_from_stats(stats_json, self.options.topic))

    def _client_error(self, error: KafkaError) -> None:
        # Served by poll()/flush() on the loop's thread. Transient errors (a broker down) are
        # librdkafka's own log lines already; a fatal one makes the producer unusable.
        if error.fatal():
            self._fatal = error
        else:
            log.debug("canary producer: %s", error.str())

    def stop(self) -> None:
        """Ask the loop to finish (safe from a signal handler or another thread)."""
        self._stop.set()

    # -- set-up --------------------------------------------------------------------------

    def _check_database(self) -> None:
        if not self.options.store_points:
            return
        try:
            CanaryPoint.objects.order_by().values_list("id")[:1].exists()
        except DatabaseError as exc:
            raise CanaryError(f"cannot store canary points in the database: {exc}".strip()) from None

    def _client_config(self) -> dict[str, Any]:
        return {**self.options.client_config, "bootstrap.servers": self.options.bootstrap_servers}

    def _start_offsets(self, consumer: Consumer, partitions: list[int]) -> dict[int, int]:
        """Where this session's records will start: the current end of every partition.

        A topic created a moment ago may not be served by its leaders yet: transient
        errors are retried until the connect timeout.
        """
        deadline = self._monotonic() + self.options.connect_timeout_s
        offsets = {}
        for partition in partitions:
            tp = TopicPartition(self.options.topic, partition)
            while partition not in offsets:
                try:
                    offsets[partition] = consumer.get_watermark_offsets(tp, timeout=self.options.connect_timeout_s)[1]
                except KafkaException as exc:
                    if self._monotonic() >= deadline:
                        raise CanaryError(
                            f"cannot read the end offset of {self.options.topic}/{partition} "
                            f"at {self.options.bootstrap_servers}: {_kafka_error_text(exc)}"
                        ) from None
                    time.sleep(0.2)
        return offsets

    def _new_producer(self) -> Producer:
        return Producer(
            {
                **self._client_config(),
                "client.id": f"auditor-canary-{self.session[:8]}",
                "logger": kafka_log,
                "enable.idempotence": True,  # a duplicate or reordering seen is then the cluster's doing
                "acks": "all",
                "linger.ms": 0,
                # Each second, the leaders the producer sends to (served by poll() on this thread):
                # a record is blamed on the broker it went to, within a second of a failover.
                "statistics.interval.ms": 1000,
                "stats_cb": self._producer_stats,
                "error_cb": self._client_error,
            }
        )

    def _replace_producer(self, accounting: CanaryAccounting) -> Producer:
        """Abandon the producer after a fatal error and carry on with a new one (a new idempotent session).

        What the old one held is failed: its reports (purged) count as produce errors, and so
        does every record whose report does not come while it closes. None is lost (never
        acknowledged) nor received (a copy the broker wrote anyway is counted when read).
        """
        old, fatal = self._producer, self._fatal
        self._fatal = None
        self._producers_replaced += 1
        held = len(self._in_flight)
        if old is not None:
            # Closing serves the fatal error again: its own words, when produce() only said _FATAL.
            cause = self._close_producer(old)  # its records' reports come now, purged: produce errors
            if cause is not None and cause.fatal() and (fatal is None or fatal.code() == KafkaError._FATAL):
                fatal = cause
            for partition, seq in self._in_flight.abandon():  # reports that did not come
                accounting.record_produce_error(partition, seq)
        log.error(
            "the canary producer hit a fatal error (%s): %d record(s) it held counted as produce errors; "
            "carrying on with a new producer (%d replaced in this session)",
            fatal.str() if fatal is not None else "unknown",
            held,
            self._producers_replaced,
        )
        self._in_flight = InFlight()
        self._producer = self._new_producer()
        return self._producer

    @staticmethod
    def _close_producer(producer: Producer) -> KafkaError | None:
        """Close ``producer`` without waiting on what it still queues; the error closing raised, if any.

        close() waits for every queued record (forever while the cluster is down): what is
        still queued is dropped first, and the reports of what was dropped come during close().
        A producer in a fatal state raises its error from close(); it is asked again.
        """
        raised: KafkaError | None = None
        try:
            producer.purge(in_queue=True, in_flight=True, blocking=False)
        except (KafkaException, RuntimeError) as exc:
            log.debug("could not purge the canary producer: %s", exc)
        for _attempt in range(3):
            try:
                producer.close()
                return raised
            except KafkaException as exc:
                raised = _kafka_error(exc) or raised
            except RuntimeError:  # closed already
                return raised
        log.warning("could not close the canary producer: %s", raised.str() if raised else "unknown error")
        return raised

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> CanaryResult:
        opts = self.options
        self._check_database()
        admin = AdminClient(
            {
                **self._client_config(),
                "socket.timeout.ms": int(opts.connect_timeout_s * 1000),
                "log_level": 2,  # its failures surface as exceptions, reported once with the bootstrap servers
            }
        )
        layout = ensure_canary_topic(admin, opts.bootstrap_servers, opts.topic, timeout=opts.connect_timeout_s)
        leaders = self._leaders
        leaders.update(layout.leaders)
        accounting = CanaryAccounting(self.session, layout.partitions, sla_ms=opts.sla_s * 1000)
        consumer = Consumer(
            {
                **self._client_config(),
                "logger": kafka_log,
                "group.id": f"_audit.canary.{self.session}",  # assign() only: the group never joins or commits
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",  # deleted records are skipped, then counted lost (they were acked)
                "fetch.wait.max.ms": 100,
            }
        )
        self._producer = self._new_producer()
        try:
            start_offsets = self._start_offsets(consumer, layout.partitions)
            log.info(
                "canary session %s on %s (%d partitions, leaders %s) at %s/s per partition, SLA %ss",
                self.session,
                opts.topic,
                len(leaders),
                leaders,
                opts.rate,
                opts.sla_s,
            )
            started = self._monotonic()
            self._loop(admin, consumer, accounting, leaders, start_offsets, started)
            elapsed = self._monotonic() - started
        finally:
            consumer.close()
            if self._producer is not None:
                # Stored and reported as pending already: their purged reports change nothing.
                self._in_flight.abandon()
                self._close_producer(self._producer)
        return CanaryResult(
            self.session,
            opts,
            layout,
            leaders,
            accounting.report(),
            elapsed,
            self._minutes_stored,
            self._producers_replaced,
        )

    def _loop(
        self,
        admin: AdminClient,
        consumer: Consumer,
        accounting: CanaryAccounting,
        leaders: dict[int, int],
        start_offsets: dict[int, int],
        started: float,
    ) -> None:
        opts = self.options
        interval = 1.0 / opts.rate
        end = None if opts.duration_s is None else started + opts.duration_s
        assign_at = started + opts.consumer_delay_s
        assigned = False
        for partition in accounting.partitions:
            self._next_send[partition] = started
        minute_start = math.floor(self._clock() / MINUTE) * MINUTE
        minute_ends = self._minute_ends(minute_start)
        next_manage = started + opts.manage_interval_s

        # Whatever leaves the loop (a stop, the duration, or an error nobody foresaw), the open
        # minute is stored: its counts (losses already found included) are not thrown away.
        try:
            while not self._stop.is_set():
                now = self._monotonic()
                if end is not None and now >= end:
                    break
                if not assigned and now >= assign_at:
                    consumer.assign([TopicPartition(opts.topic, p, o) for p, o in start_offsets.items()])
                    assigned = True
                self._produce_due(accounting, now)
                self._poll_producer(accounting)
                wait = max(0.0, min(min(self._next_send.values()) - self._monotonic(), interval, 0.1))
                if assigned:
                    self._consume(consumer, accounting, wait)
                else:
                    self._stop.wait(wait)
                accounting.expire(self._monotonic() * 1000)
                if self._monotonic() >= minute_ends:
                    self._close_minute(admin, accounting, leaders, minute_start, partial=False)
                    minute_start = math.floor(self._clock() / MINUTE) * MINUTE
                    minute_ends = self._minute_ends(minute_start)
                if self._monotonic() >= next_manage:
                    next_manage = self._monotonic() + opts.manage_interval_s
                    self._manage_topic(admin, consumer, accounting, leaders, start_offsets, assigned)
        except BaseException:
            log.exception("the canary loop failed: storing the open minute before stopping")
            try:
                self._finish(admin, consumer, accounting, leaders, start_offsets, assigned, minute_start)
            except Exception:  # the loop's own error is the one raised
                log.exception("could not store the open minute")
            raise
        self._finish(admin, consumer, accounting, leaders, start_offsets, assigned, minute_start)

    def _minute_ends(self, minute_start: float) -> float:
        """When (monotonic clock) the minute labelled `minute_start` closes: at the wall clock's
        next minute, and at most a minute from now. A wall clock stepped back (NTP, a restored
        VM) neither holds the minute open until it catches up, storing and alerting nothing
        meanwhile, nor labels what follows by the minute it left: the minutes after the step
        are labelled by the clock as it is now, and one labelled twice is summed (record_minute).
        """
        remaining = minute_start + MINUTE - self._clock()
        return self._monotonic() + min(max(remaining, 0.0), MINUTE)

    def _current_producer(self, accounting: CanaryAccounting) -> Producer:
        """The producer to use now: a new one when the last one hit a fatal error."""
        if self._fatal is not None or self._producer is None:
            return self._replace_producer(accounting)
        return self._producer

    def _poll_producer(self, accounting: CanaryAccounting, timeout: float = 0.0, flush: bool = False) -> None:
        """Serve delivery reports, statistics and errors (``flush``: wait for what is in flight);
        a fatal error replaces the producer."""
        producer = self._current_producer(accounting)
        try:
            if flush:
                producer.flush(timeout)
            else:
                producer.poll(timeout)
        except KafkaException as exc:
            # A fatal error is raised by poll() as well as handed to error_cb (2.16).
            if not is_fatal(exc):
                raise
            self._fatal = self._fatal or _kafka_error(exc)
        if self._fatal is not None:
            self._replace_producer(accounting)

    def _produce_due(self, accounting: CanaryAccounting, now: float) -> None:
        interval = 1.0 / self.options.rate
        for partition, due in self._next_send.items():
            if now - due > MAX_SCHEDULE_LAG_S:
                log.warning("canary fell %.1fs behind on partition %d; skipping the backlog", now - due, partition)
                due = now
            while due <= now:
                if not self._produce_one(self._current_producer(accounting), accounting, partition):
                    due = now + interval  # the local queue is full, or the producer is replaced: next tick
                    break
                due += interval
            self._next_send[partition] = due

    def _produce_one(self, producer: Producer, accounting: CanaryAccounting, partition: int) -> bool:
        # The accounting (the SLA, latency) runs on the monotonic clock: a step of the wall
        # clock (NTP, a resume from suspend) would expire records acked but not read yet.
        # The record carries the wall time, for whoever reads the topic.
        record = accounting.next_record(partition, self._monotonic() * 1000)
        in_flight = self._in_flight

        # Delivery reports are served by producer.poll()/flush() on this thread, after
        # record_sent below: the accounting needs no lock. A report of a producer abandoned
        # after a fatal error whose records were settled already is ignored.
        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if not in_flight.settle(partition, record.seq):
                return
            if err is None:
                accounting.record_acked(partition, record.seq, self._monotonic() * 1000)
                return
            accounting.record_produce_error(partition, record.seq)
            self._warnings.warning(
                ("send", partition, err.code()),
                "canary record to %s/%d failed: %s",
                self.options.topic,
                partition,
                err.str(),
            )

        try:
            producer.produce(
                self.options.topic,
                value=encode_record(replace(record, sent_ms=self._clock() * 1000)),
                partition=partition,
                on_delivery=delivered,
            )
        except BufferError:
            self._warnings.warning("queue", "the producer's queue is full: the cluster does not take canary records")
            return False
        except KafkaException as exc:
            error = _kafka_error(exc)
            if is_fatal(exc):
                # Nothing was handed over: the record goes out again through the next producer.
                self._fatal = error or KafkaError(KafkaError._FATAL)
                return False
            # Refused at once (_MSG_SIZE_TOO_LARGE, _UNKNOWN_PARTITION): a send that failed.
            accounting.record_sent(record, self._leaders.get(partition))
            accounting.record_produce_error(partition, record.seq)
            self._warnings.warning(
                ("produce", partition, error.code() if error is not None else None),
                "canary record to %s/%d refused by the producer: %s",
                self.options.topic,
                partition,
                _kafka_error_text(exc),
            )
            return True
        accounting.record_sent(record, self._leaders.get(partition))
        in_flight.add(partition, record.seq)
        return True

    def _consume(self, consumer: Consumer, accounting: CanaryAccounting, timeout: float) -> None:
        # poll() returns as soon as a record is there (consume() would wait out its timeout,
        # adding that wait to the latency); what else is already fetched follows at once.
        first = consumer.poll(timeout)
        if first is None:
            return
        now_ms = self._monotonic() * 1000
        messages = [first, *consumer.consume(num_messages=1000, timeout=0)]
        for msg in messages:
            error = msg.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    self._warnings.warning(("consume", error.code()), "canary consumer: %s", error.str())
                continue
            _, partition, offset = record_position(msg)
            accounting.record_received(decode_record(msg.value()), partition, now_ms, offset)

    def _close_minute(
        self,
        admin: AdminClient,
        accounting: CanaryAccounting,
        leaders: dict[int, int],
        minute_start: float,
        partial: bool,
    ) -> None:
        counts = accounting.close_window()
        fresh = read_leaders(admin, self.options.topic, timeout=2.0)
        if fresh:
            leaders.update(fresh)
        minute = datetime.fromtimestamp(minute_start, UTC)
        total = DeliveryCounts()
        for c in counts.values():
            total.merge(c)
        log.info(
            "minute %s%s %s: sent %d received %d lost %d truncated %d duplicated %d out of order %d "
            "produce errors %d unacked past the SLA %d",
            f"{minute:%H:%M}",
            " (partial)" if partial else "",
            self.options.topic,
            total.sent,
            total.received,
            total.lost,
            total.truncated,
            total.duplicated,
            total.out_of_order,
            total.produce_errors,
            total.unacked,
        )
        if not self.options.store_points:
            return
        if not connection.in_atomic_block:
            close_old_connections()  # a long-running process outlives database restarts
        try:
            points = record_minute(
                self.session,
                self.options.topic,
                minute,
                counts,
                leaders,
                partial=partial,
                cluster=self.options.cluster,
                bootstrap_servers=self.options.bootstrap_servers,
            )
            self._minutes_stored += 1
        except DatabaseError:
            log.exception("could not store the canary points of minute %s", f"{minute:%H:%M}")
            return
        alert_on_minute(points)

    def _manage_topic(
        self,
        admin: AdminClient,
        consumer: Consumer,
        accounting: CanaryAccounting,
        leaders: dict[int, int],
        start_offsets: dict[int, int],
        assigned: bool,
    ) -> None:
        """Re-check leadership; partitions added meanwhile join the canary."""
        opts = self.options
        try:
            layout = ensure_canary_topic(admin, opts.bootstrap_servers, opts.topic, timeout=opts.connect_timeout_s)
        except (CanaryError, KafkaException) as exc:
            log.warning("could not check the leadership of %s: %s", opts.topic, exc)
            return
        leaders.update(layout.leaders)
        added = [p for p in layout.partitions if p not in accounting.partitions]
        if not added:
            return
        try:  # so it can produce to them
            self._current_producer(accounting).list_topics(topic=opts.topic, timeout=opts.connect_timeout_s)
        except KafkaException as exc:
            log.warning("could not read the metadata of %s: %s", opts.topic, _kafka_error_text(exc))
        now = self._monotonic()
        for partition in added:
            accounting.add_partition(partition)
            start_offsets[partition] = OFFSET_BEGINNING  # a new partition holds only this session's records
            self._next_send[partition] = now
        if assigned:
            consumer.incremental_assign([TopicPartition(opts.topic, p, OFFSET_BEGINNING) for p in added])
        log.info("partitions %s of %s joined the canary", added, opts.topic)

    def _finish(
        self,
        admin: AdminClient,
        consumer: Consumer,
        accounting: CanaryAccounting,
        leaders: dict[int, int],
        start_offsets: dict[int, int],
        assigned: bool,
        minute_start: float,
    ) -> None:
        """Stop sending, wait a little for what is in flight, store the last (partial) minute.

        Records still in flight afterwards are reported as pending, not lost: their SLA
        has not run out or the broker has not acknowledged them, and the next session does
        not count them at all.
        """
        opts = self.options
        deadline = self._monotonic() + min(opts.drain_s, opts.sla_s)
        self._poll_producer(accounting, max(0.0, deadline - self._monotonic()), flush=True)
        if not assigned:
            consumer.assign([TopicPartition(opts.topic, p, o) for p, o in start_offsets.items()])
        while accounting.pending_total() and self._monotonic() < deadline:
            self._consume(consumer, accounting, 0.1)
            self._poll_producer(accounting)
            accounting.expire(self._monotonic() * 1000)
        accounting.expire(self._monotonic() * 1000)
        self._warnings.flush()
        self._close_minute(admin, accounting, leaders, minute_start, partial=True)
