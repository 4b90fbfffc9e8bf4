"""An audited (contract v2) consumer to kill -9 after asynchronous commits whose marks its ledger
producer has not sent yet (a test runs it in a process of its own: ``python -m
tests.support.async_committer BOOTSTRAP TOPIC GROUP LEDGER CLIENTS SKIP FIRST SECOND``), and
``run_and_kill``, which runs it for a test.

It reads partition 0 of TOPIC in GROUP from the start. First it is handed FIRST records and
processes each but the one at offset SKIP (a poison record the application gives up on), marks
them and commits synchronously past the last (the probe waits for the marks to be written). It
prints ``{"session", "processed"}`` as JSON. Then it is handed SECOND more records and, for
each, processes it, marks it and commits past it asynchronously, as
``commit(msg, asynchronous=True)`` after every record does. Its ledger producer lingers two
minutes (``linger.ms``) and its background flush runs every 600 s, so those marks wait in the
process. Once the broker holds the last commit it prints the second batch's processed offsets
and waits to be killed: the kill takes the marks of several commits with it, not only its
last's (lab ``live-consumer-crash-loop-async``, stop 82)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from typing import Any, NamedTuple

from confluent_kafka import Message, TopicPartition

from auditor.probes import AuditedConsumer
from tests.support.paths import ROOT
from tests.support.waiting import handed


class KilledConsumer(NamedTuple):
    """What the consumer said before it was killed: its session, and the offsets it processed
    before its synchronous commit and after it (the application's own account)."""

    session: str
    processed_synced: list[int]
    processed_async: list[int]


def run_and_kill(bootstrap: str, topic: str, group: str, ledger: str, clients: str, skip: int, first: int, second: int) -> KilledConsumer:  # fmt: skip
    """Run the consumer below, and kill it (-9) once its last asynchronous commit is held."""
    command = [sys.executable, "-m", "tests.support.async_committer", bootstrap, topic, group, ledger, clients]
    command += [str(skip), str(first), str(second)]
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        synced = json.loads(child.stdout.readline() or "null")
        handed = json.loads(child.stdout.readline() or "null")
        assert synced is not None and handed is not None, "the consumer ended before its commits were held"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    return KilledConsumer(synced["session"], synced["processed"], handed["processed"])


def _handed(consumer: AuditedConsumer, count: int) -> list[Message]:
    got = handed(consumer, count)
    if len(got) < count:
        raise SystemExit(f"handed {len(got)} of {count} records")
    return got


def main(argv: list[str]) -> int:
    bootstrap, topic, group, ledger, clients, skip, first, second = argv
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        # the broker's least: once killed, it leaves the group within seconds for a successor
        "session.timeout.ms": 6000,
    }
    consumer = AuditedConsumer(
        config,
        ledger_topic=ledger,
        clients_topic=clients,
        ledger_flush_interval_s=600.0,
        ledger_config={"linger.ms": 120_000},
    )
    consumer.subscribe([topic])
    batch = _handed(consumer, int(first))
    processed = [m.offset() for m in batch if m.offset() != int(skip)]
    for msg in batch:
        if msg.offset() != int(skip):
            consumer.mark_processed(msg)
    consumer.commit(message=batch[-1], asynchronous=False)
    print(json.dumps({"session": consumer.session_id, "processed": processed}), flush=True)
    batch = _handed(consumer, int(second))
    for msg in batch:
        consumer.mark_processed(msg)
        consumer.commit(message=msg, asynchronous=True)
    last = batch[-1].offset() + 1
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        consumer.poll(0.2)  # serves the commits' callbacks
        (held,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        if held.offset == last:
            print(json.dumps({"processed": [m.offset() for m in batch]}), flush=True)
            time.sleep(3600)  # killed here
    raise SystemExit("the last asynchronous commit was not held within 60 s")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
