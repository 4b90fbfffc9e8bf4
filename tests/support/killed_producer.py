"""An audited producer to kill -9 between two ledger flushes (a test runs it in a process of its
own: ``python -m tests.support.killed_producer [--v1] BOOTSTRAP TOPIC LEDGER CLIENTS
[RECORD_KEY]``), and ``start_ledgered_session`` and ``send_untraced_and_kill``, which run it
for a test (tests that start several sessions first wait out their minute once).

It writes record contract version 2 (``AuditedProducer``), or version 1 with ``--v1``
(``AuditedProducerV1``). A record's key is its ticket, its value ``{}``; given RECORD_KEY, every
record has that key and carries its ticket in its value (``{"ticket_id": ...}``), its audit-id
(``audit_value``).

It sends ticket 1 and ledgers it with flush(), prints ``ledgered <session> <start ms>``, then
waits for ``send <ticket>`` on stdin: it sends that ticket, serves the delivery report with
poll() (never flush(): the ledger must not learn of it) and prints the report as JSON, then
waits to be killed. Its background ledger flush runs every 600 s, so none comes in between.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, NamedTuple

import psycopg

from auditor.probes import AuditedProducer, AuditedProducerV1
from tests.support.paths import ROOT


def audit_value(value: Any, key: Any) -> str:
    """The ticket a record with the shared record key carries (the audit-id key_fn)."""
    return str(json.loads(value)["ticket_id"])


class KilledSession(NamedTuple):
    """What the killed producer told before it died: its session and ticket 2's delivery report
    (``{"key", "error", "partition", "offset"}``, None when none came within 30 s)."""

    session: str
    delivered: dict[str, Any] | None


class RunningSession(NamedTuple):
    """The producer process, started and ledgered (ticket 1), waiting for ``send <ticket>``."""

    child: subprocess.Popen[str]
    session: str
    started_ms: int


def start_ledgered_session(
    bootstrap: str, topic: str, ledger: str, clients: str, *, record_key: str | None = None, v1: bool = False
) -> RunningSession:
    """Start the producer below in a process of its own; returns once it ledgered ticket 1."""
    command = [sys.executable, "-m", "tests.support.killed_producer", *(["--v1"] if v1 else [])]
    command += [bootstrap, topic, ledger, clients, *([record_key] if record_key is not None else [])]
    child = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        word, session, started_ms = child.stdout.readline().split()
        assert word == "ledgered", "the producer did not start"
    except BaseException:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        raise
    return RunningSession(child, session, int(started_ms))


def send_untraced_and_kill(running: RunningSession, table: str, speaks_after_s: float) -> KilledSession:
    """Once the session's ledger speaks for new rows (`speaks_after_s` after it started: the
    stuck verdicts' clock margin, tests.support.clock.shared_clock_slack), insert ticket 2's row (``NEW``, created
    now) into ``table`` of ``SOURCE_DATABASE_URL``, have the producer send ticket 2, and kill it
    (-9) once it printed the delivery report, before any ledger flush after ticket 1's.
    Sessions started together wait out their margin together."""
    child = running.child
    try:
        assert child.stdin is not None and child.stdout is not None
        time.sleep(max(0.0, running.started_ms / 1000 + speaks_after_s - time.time()))
        with psycopg.connect(os.environ["SOURCE_DATABASE_URL"], autocommit=True) as conn:
            conn.execute(f"INSERT INTO {table} (ticket_id, created_at, status) VALUES (2, now(), 'NEW')")
        child.stdin.write("send 2\n")
        child.stdin.flush()
        delivered = json.loads(child.stdout.readline())
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    return KilledSession(running.session, delivered)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.killed_producer")
    parser.add_argument("--v1", action="store_true", help="record contract version 1 (AuditedProducerV1)")
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("ledger")
    parser.add_argument("clients")
    parser.add_argument("record_key", nargs="?")
    args = parser.parse_args(argv)
    topic = args.topic
    shared_key = args.record_key.encode() if args.record_key is not None else None

    def record(ticket: str) -> tuple[bytes, bytes]:
        """(value, key) of a ticket's record."""
        if shared_key is None:
            return b"{}", ticket.encode()
        return json.dumps({"ticket_id": ticket}).encode(), shared_key

    reports: list[dict[str, Any]] = []

    def report(err: Any, msg: Any) -> None:
        reports.append(
            {
                "key": msg.key().decode() if shared_key is None else audit_value(msg.value(), msg.key()),
                "error": None if err is None else str(err),
                "partition": msg.partition(),
                "offset": msg.offset(),
            }
        )

    started_ms = time.time_ns() // 1_000_000
    config = {"bootstrap.servers": args.bootstrap, "linger.ms": 0, "on_delivery": report}
    key_fn = None if shared_key is None else audit_value
    producer: AuditedProducer | AuditedProducerV1
    if args.v1:
        producer = AuditedProducerV1(
            config, ledger_topic=args.ledger, clients_topic=args.clients, ledger_flush_interval_s=600.0, key_fn=key_fn
        )
    else:
        producer = AuditedProducer(
            config,
            ledger_topic=args.ledger,
            clients_topic=args.clients,
            ledger_flush_interval_s=600.0,
            delivery_reports="all",
            key_fn=key_fn,
        )
    producer.produce(topic, *record("1"))
    assert producer.flush(30) == 0 and reports and reports[0]["error"] is None, reports
    print("ledgered", producer.session_id, started_ms, flush=True)
    for line in sys.stdin:
        command, ticket = line.split()
        assert command == "send", line
        reports.clear()
        producer.produce(topic, *record(ticket))
        deadline = time.monotonic() + 30
        while not reports and time.monotonic() < deadline:
            producer.poll(0.1)
        print(json.dumps(reports[0] if reports else None), flush=True)
    time.sleep(600)  # killed with SIGKILL long before this ends
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
