"""The lab's applications: ticket producers and consumers, probed or plain, no Django.

Producers run in the lab's process and return what the client itself reported (delivery
reports: error, partition, offset), which is ground truth. Consumers run as their own
process (`python -m auditor.lab.workload consume …`) so a crash is a real one: the process
kills itself with SIGKILL at the chosen point, with no close, no flush and no commit after.
Every processing is written to the source database's `<table>_processed` log in the same
transaction as the status update, so what was processed, and how often, is known without
the auditor.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from auditor.probes import AuditedConsumer, AuditedProducer


@dataclass
class Delivery:
    key: str
    error: str | None
    partition: int
    offset: int


def ticket_value(ticket: int) -> bytes:
    return json.dumps({"ticket_id": ticket, "status": "NEW"}).encode()


def ticket_of(msg: Any) -> int:
    """The ticket a record carries: its value's ticket_id (every producer of the lab writes
    it), whatever the record key is."""
    value = msg.value()
    return int(json.loads(value)["ticket_id"]) if value else int(msg.key())


def produce(
    bootstrap: str,
    topic: str,
    tickets: Iterable[int],
    config: dict[str, Any] | None = None,
    probed: bool = False,
    flush_s: float | None = 60,
    producer: Any = None,
    reports: list[Delivery] | None = None,
    key: Callable[[int], str] = str,
    tombstones: bool = False,
    partition: int | None = None,
) -> list[Delivery]:
    """One produce() per ticket (record key `key(ticket)`, by default the ticket id; the value
    names the ticket either way, or, with `tombstones`, there is none: the application deleting
    the ticket from a compacted topic); every delivery report, in order, appended to `reports`
    (reports that arrive after a short flush land there later). A report's `key` is the
    ticket id. `partition`: every record to that partition, else as the producer's partitioner
    places it."""
    reports = [] if reports is None else reports

    def delivered(err: KafkaError | None, msg: Message) -> None:
        reports.append(
            Delivery(
                str(ticket_of(msg)),
                None if err is None else err.str(),
                -1 if msg.partition() is None else int(msg.partition() or 0),
                -1 if msg.offset() is None else int(msg.offset() or 0),
            )
        )

    own = producer is None
    # The truth needs every delivery report: a probed producer gives successes only when asked.
    if own:
        settings = {"bootstrap.servers": bootstrap, "linger.ms": 0, **(config or {})}
        producer = AuditedProducer(settings, delivery_reports="all") if probed else Producer(settings)
    for ticket in tickets:
        _produce_one(producer, topic, ticket, delivered, key=key(ticket), tombstone=tombstones, partition=partition)
        producer.poll(0)
    if flush_s is not None:  # None: the caller flushes (an application sending on, polling)
        producer.flush(flush_s)
    if own and probed:
        producer.close(30)
    return reports


def _produce_one(
    producer: Any,
    topic: str,
    ticket: int,
    delivered: Any,
    patience_s: float = 30,
    key: str | None = None,
    tombstone: bool = False,
    partition: int | None = None,
) -> None:
    """produce(), waiting out what a just-created topic causes: a broker whose metadata has not
    caught up yet answers "unknown topic", and a full queue while a broker is away."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            producer.produce(
                topic,
                key=(str(ticket) if key is None else key).encode(),
                value=None if tombstone else ticket_value(ticket),
                on_delivery=delivered,
                **({} if partition is None else {"partition": partition}),
            )
            return
        except BufferError:
            pass
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._UNKNOWN_TOPIC:
                raise
        if time.monotonic() > deadline:
            raise RuntimeError(f"could not hand ticket {ticket} to the producer within {patience_s:.0f}s")
        producer.poll(0.2)


# --- consumers (a process of their own) --------------------------------------------------------


def _process(conn: Any, table: str, ticket: int, session: str, update_fails: bool = False) -> None:
    """The application's work: the row goes NEW → DONE, and the processing is logged.

    With `update_fails` the work is done but the row update is lost (a failed write the
    application does not notice): the processing is logged, the row stays NEW.
    """
    with conn.transaction():
        if not update_fails:
            conn.execute(f"UPDATE {table} SET status = 'DONE' WHERE id = %s", (ticket,))
        conn.execute(
            f"INSERT INTO {table}_processed (id, session, updated) VALUES (%s, %s, %s)",
            (ticket, session, not update_fails),
        )


class _KafkaPythonConsumer:
    """kafka-python's KafkaConsumer behind the few calls the loop makes (one record per poll)."""

    def __init__(self, args: argparse.Namespace) -> None:
        from kafka import KafkaConsumer

        self._consumer = KafkaConsumer(
            bootstrap_servers=args.bootstrap.split(","),
            group_id=args.group,
            auto_offset_reset=args.auto_offset_reset,
            enable_auto_commit=args.mode == "auto",
            auto_commit_interval_ms=args.auto_commit_ms,
            max_poll_records=1,
        )
        self._pending: list[Any] = []

    def subscribe(self, topics: list[str]) -> None:
        self._consumer.subscribe(topics)

    def poll(self, timeout: float) -> Any:
        if not self._pending:
            for records in self._consumer.poll(timeout_ms=int(timeout * 1000)).values():
                self._pending.extend(records)
        return _KafkaPythonRecord(self._pending.pop(0)) if self._pending else None

    def commit(self, message: Any = None, offsets: Any = None, asynchronous: bool = False) -> None:
        self._consumer.commit()  # the position: just past the records polled

    def close(self) -> None:
        self._consumer.close()


class _KafkaPythonRecord:
    def __init__(self, record: Any) -> None:
        self._record = record

    def error(self) -> None:
        return None

    def key(self) -> bytes:
        return bytes(self._record.key)

    def value(self) -> bytes | None:
        return None if self._record.value is None else bytes(self._record.value)


ASYNC_CRASH_DELAY_S = 0.02  # an asynchronous commit's request leaves within it; the kill follows


def consumer_config(
    bootstrap: str,
    group: str,
    mode: str,
    group_protocol: str = "classic",
    auto_commit_ms: int = 5000,
    max_poll_interval_ms: int = 0,
    auto_offset_reset: str = "earliest",
) -> dict[str, Any]:
    """The ticket consumer's client config (the lab lints exactly this)."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": auto_offset_reset,
        "enable.auto.commit": mode == "auto",
    }
    if group_protocol == "consumer":
        config["group.protocol"] = "consumer"
    else:
        config["session.timeout.ms"] = 6000
    if mode == "auto":
        config["auto.commit.interval.ms"] = auto_commit_ms
    if max_poll_interval_ms:
        config["max.poll.interval.ms"] = max_poll_interval_ms
    return config


def consume(args: argparse.Namespace) -> int:
    """Consume until `--records` were received or the topic is idle; crash on request.

    Modes: at-most-once commits each record's offset before processing it; at-least-once
    processes, then commits; auto leaves commits to enable.auto.commit. `--crash-at N` kills
    the process with SIGKILL at the N-th record (1-based), after its commit in at-most-once,
    after its processing in at-least-once, `--slow-ms` after it was polled in auto.
    """
    import psycopg

    config = consumer_config(
        args.bootstrap,
        args.group,
        args.mode,
        args.group_protocol,
        args.auto_commit_ms,
        args.max_poll_interval_ms,
        args.auto_offset_reset,
    )
    consumer: Any
    if args.client == "kafka-python":
        consumer = _KafkaPythonConsumer(args)
    elif args.probed:
        ledger = {"ledger_topic": args.consumer_ledger} if args.consumer_ledger else {}
        consumer = AuditedConsumer(config, ledger_flush_interval_s=0.2, **ledger)
    else:
        consumer = Consumer(config)
    session = getattr(consumer, "session_id", None) or f"plain-{os.getpid()}"
    if args.partitions_by == "assign":
        # outside the group's membership (a catch-up script, a framework assigning its own
        # partitions): every partition, from the group's committed offsets
        topic = consumer.list_topics(args.topic, timeout=10).topics[args.topic]
        consumer.assign([TopicPartition(args.topic, p) for p in sorted(topic.partitions)])
    else:
        consumer.subscribe([args.topic])
    if args.workers > 1:
        return _consume_in_pool(consumer, args, session)
    received = 0
    idle_since = time.monotonic()
    batch: list[Any] = []
    commit_failures = 0
    with psycopg.connect(args.source_url, autocommit=True) as conn:
        while received < args.records and time.monotonic() - idle_since < args.idle_s:
            msg = consumer.poll(0.5)
            if msg is None and batch:
                # nothing more polled: the batch so far is processed and committed (a batching
                # consumer does not hold records back while the topic is quiet)
                commit_failures += _process_batch(consumer, conn, args, batch, session)
                received += len(batch)
                batch.clear()
                continue
            if msg is None or msg.error() is not None:
                continue
            idle_since = time.monotonic()
            if args.batch > 1:
                # A batch: poll up to --batch records, process them all (no poll meanwhile), then
                # commit once. A slow batch outlives max.poll.interval.ms and the group moves on.
                batch.append(msg)
                if len(batch) < args.batch:
                    continue
                commit_failures += _process_batch(consumer, conn, args, batch, session)
                received += len(batch)
                batch.clear()
                idle_since = time.monotonic()
                continue
            received += 1
            ticket = ticket_of(msg)
            crash_here = received == args.crash_at
            if args.mode == "at-most-once":
                commit_failures += _commit(consumer, msg, args, asynchronous=False)
                if crash_here and args.crash_after == "commit":
                    os.kill(os.getpid(), signal.SIGKILL)
            if args.mode == "auto" and crash_here:
                # Polled (its offset is stored for the next auto-commit), not yet processed.
                time.sleep(args.slow_ms / 1000)
                os.kill(os.getpid(), signal.SIGKILL)
            _process(conn, args.table, ticket, session, update_fails=received == args.fail_update_at)
            if args.probed:
                consumer.mark_processed(msg)
            if args.mode == "at-most-once" and crash_here:  # --crash-after processing
                os.kill(os.getpid(), signal.SIGKILL)  # the mark still in the probe's buffer
            if args.mode == "at-least-once":
                if crash_here and args.commit == "sync":
                    if args.probed:
                        consumer.flush_ledger(10)  # the mark is out; the commit never happens
                    os.kill(os.getpid(), signal.SIGKILL)
                commit_failures += _commit(consumer, msg, args, asynchronous=args.commit == "async")
                if crash_here:  # async: killed while the commit, and the ledger's marks, are on their way
                    time.sleep(ASYNC_CRASH_DELAY_S)
                    os.kill(os.getpid(), signal.SIGKILL)
            if args.slow_ms:
                time.sleep(args.slow_ms / 1000)
        if batch:
            commit_failures += _process_batch(consumer, conn, args, batch, session)
            received += len(batch)
    consumer.close()
    print(json.dumps({"received": received, "commit_failures": commit_failures}))
    return 0


def _consume_in_pool(consumer: Any, args: argparse.Namespace, session: str) -> int:
    """--workers N (with --mode auto): the poll loop hands each record to one of N worker threads,
    which process it (up to twice --slow-ms of work, at random) and mark it as they finish, in
    whatever order they finish; enable.auto.commit commits what was handed meanwhile. A kill takes
    the records in the workers' hands with it: those an auto-commit passed are skipped."""
    import psycopg

    rng = random.Random()
    lock = threading.Lock()  # one connection: a worker's transaction at a time

    def work(msg: Any) -> None:
        time.sleep(rng.uniform(0, 2 * args.slow_ms) / 1000)
        with lock:
            _process(conn, args.table, ticket_of(msg), session)
        if args.probed:
            consumer.mark_processed(msg)

    received = 0
    idle_since = time.monotonic()
    with psycopg.connect(args.source_url, autocommit=True) as conn, ThreadPoolExecutor(args.workers) as workers:
        while received < args.records and time.monotonic() - idle_since < args.idle_s:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            idle_since = time.monotonic()
            received += 1
            workers.submit(work, msg)
    consumer.close()
    print(json.dumps({"received": received, "commit_failures": 0}))
    return 0


def _commit(consumer: Any, msg: Any, args: argparse.Namespace, asynchronous: bool) -> int:
    """Commit the record's offset; 1 when that failed and --commit-failures continue (the next
    record's commit covers it, as an application going on would), else 0 or the error raised."""
    try:
        consumer.commit(message=msg, asynchronous=asynchronous)
    except KafkaException as exc:
        if args.commit_failures == "fail":
            raise
        print(json.dumps({"commit_failed": str(exc)}), file=sys.stderr, flush=True)
        return 1
    return 0


def _process_batch(consumer: Any, conn: Any, args: argparse.Namespace, batch: list[Any], session: str) -> int:
    """Process a polled batch, then commit its end on each partition; 1 when the commit failed (the group took the
    partitions away meanwhile: a rebalance mid-batch), else 0."""
    for msg in batch:
        _process(conn, args.table, ticket_of(msg), session)
        if args.probed:
            consumer.mark_processed(msg)
        if args.slow_ms:
            time.sleep(args.slow_ms / 1000)
    # the position after each partition's last record of the batch (it may span partitions)
    ends = {(msg.topic(), msg.partition()): msg for msg in batch}
    positions = [
        TopicPartition(t, p, msg.offset() + 1, leader_epoch=msg.leader_epoch())
        if msg.leader_epoch() is not None
        else TopicPartition(t, p, msg.offset() + 1)
        for (t, p), msg in ends.items()
    ]
    try:
        consumer.commit(offsets=positions, asynchronous=False)
    except KafkaException as exc:
        print(json.dumps({"commit_failed": str(exc)}), file=sys.stderr, flush=True)
        return 1
    return 0


def transact(args: argparse.Namespace) -> int:
    """A transactional producer: the first `--commit` tickets in one committed transaction, the
    rest in a second one that the process never ends (SIGKILL after the records are written)."""
    config = {
        "bootstrap.servers": args.bootstrap,
        "transactional.id": args.transactional_id,
        "transaction.timeout.ms": args.transaction_timeout_ms,
        "linger.ms": 0,
    }
    producer: Any = AuditedProducer(config, ledger_flush_interval_s=0.2) if args.probed else Producer(config)
    producer.init_transactions(30)
    tickets = list(range(1, args.tickets + 1))
    for batch, ends in ((tickets[: args.commit], True), (tickets[args.commit :], False)):
        producer.begin_transaction()
        for ticket in batch:
            _produce_one(producer, args.topic, ticket, None)
        producer.flush(30)  # written to the log, inside the open transaction
        if not ends:
            print(json.dumps({"open": batch}), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        producer.commit_transaction(30)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m auditor.lab.workload")
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("consume")
    c.add_argument("--bootstrap", required=True)
    c.add_argument("--topic", required=True)
    c.add_argument("--group", required=True)
    c.add_argument("--table", required=True)
    c.add_argument("--mode", choices=("at-most-once", "at-least-once", "auto"), required=True)
    c.add_argument("--records", type=int, default=10**9)
    c.add_argument("--crash-at", type=int, default=0)
    c.add_argument("--idle-s", type=float, default=4.0)
    c.add_argument("--probed", action="store_true")
    c.add_argument("--consumer-ledger", default="", help="the probe's ledger topic (default: the contract's)")
    c.add_argument("--group-protocol", choices=("classic", "consumer"), default="classic")
    c.add_argument("--auto-commit-ms", type=int, default=5000)
    c.add_argument("--slow-ms", type=int, default=0)
    c.add_argument("--fail-update-at", type=int, default=0, help="the N-th record's row update is lost")
    c.add_argument("--client", choices=("confluent-kafka", "kafka-python"), default="confluent-kafka")
    c.add_argument("--batch", type=int, default=1, help="process N polled records, then commit once")
    c.add_argument("--max-poll-interval-ms", type=int, default=0)
    c.add_argument(
        "--workers", type=int, default=1, help="--mode auto: process in N worker threads, marking as they finish"
    )
    c.add_argument("--auto-offset-reset", choices=("earliest", "latest"), default="earliest")
    c.add_argument(
        "--commit",
        choices=("sync", "async"),
        default="sync",
        help="at-least-once: commit synchronously, or asynchronously (--crash-at: killed just after the commit)",
    )
    c.add_argument(
        "--crash-after",
        choices=("commit", "processing"),
        default="commit",
        help="at-most-once --crash-at: killed after the commit (the record skipped), or after processing and "
        "marking it (its mark not yet flushed)",
    )
    c.add_argument(
        "--commit-failures",
        choices=("fail", "continue"),
        default="fail",
        help="one record at a time: a failed commit ends the consumer, or is counted and passed",
    )
    c.add_argument(
        "--partitions-by",
        choices=("subscribe", "assign"),
        default="subscribe",
        help="join the group, or assign every partition (plain confluent-kafka only: no membership)",
    )
    t = sub.add_parser("transact")
    t.add_argument("--bootstrap", required=True)
    t.add_argument("--topic", required=True)
    t.add_argument("--transactional-id", required=True)
    t.add_argument("--tickets", type=int, required=True)
    t.add_argument("--commit", type=int, required=True, help="tickets in the committed transaction")
    t.add_argument("--transaction-timeout-ms", type=int, default=10000)
    t.add_argument("--probed", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "transact":
        return transact(args)
    if args.commit == "async" and (args.mode != "at-least-once" or args.batch > 1):
        parser.error("--commit async is for --mode at-least-once, one record at a time (no --batch)")
    if args.partitions_by == "assign" and (args.probed or args.client != "confluent-kafka"):
        parser.error("--partitions-by assign takes a plain confluent-kafka consumer (no --probed, no --client)")
    args.source_url = os.environ["LAB_SOURCE_URL"]  # from the environment: never on a command line
    return consume(args)


if __name__ == "__main__":
    sys.exit(main())
