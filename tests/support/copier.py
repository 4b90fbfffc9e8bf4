"""An exactly-once copier, probed: a read_committed ``AuditedConsumer`` and a transactional
``AuditedProducer`` that sends the consumer's positions to its transactions. A test runs it in a
process of its own: ``python -m tests.support.copier [--transactional] MODE BOOTSTRAP SOURCE
OUTPUT GROUP CONSUMER_LEDGER PRODUCER_LEDGER CLIENTS COUNT``, and ``run_copier`` does that.

Without ``--transactional`` (the consumer learns it is a copier's at its first
``send_offsets_to_transaction``) it first copies COUNT records in a transaction it commits
(printed as ``first``). Then it copies the next COUNT records of partition 0 of SOURCE to
OUTPUT, marking each processed once its copy is produced, in one transaction, and sends the
positions after them to it (``send_offsets_to_transaction``).
MODE ``abort-then-commit``: aborts that transaction, seeks back to the group's committed offset,
copies the same records again in a new transaction and commits it; prints
``{"session", "aborted": [offsets], "committed": [offsets]}`` once the commit returned.
MODE ``abort-before-send-offsets``: as ``abort-then-commit``, but the transaction it aborts
never had the positions sent (processing failed before send_offsets_to_transaction).
MODE ``stop-mid-transaction``: waits past three ledger flush intervals with its transaction
open, prints ``{"session", "processed": [offsets]}`` and waits to be killed (-9).
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from typing import Any

from confluent_kafka import OFFSET_STORED, TopicPartition

from auditor.probes import AuditedConsumer, AuditedProducer
from tests.support.paths import ROOT


def run_copier(mode: str, *args: str, transactional: bool = False, kill_after_report: bool = False) -> dict[str, Any]:
    """Run the copier in a process of its own; what it printed. With ``kill_after_report`` it
    is killed (-9) once it printed, else it must exit 0 by itself."""
    command = [sys.executable, "-m", "tests.support.copier", *(["--transactional"] if transactional else []), mode]
    command += args
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line, "the copier printed nothing"
        report: dict[str, Any] = json.loads(line)
        if kill_after_report:
            child.send_signal(signal.SIGKILL)
        assert child.wait(60) == (-signal.SIGKILL if kill_after_report else 0)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(30)
    return report


def _copy(consumer: AuditedConsumer, producer: AuditedProducer, output: str, count: int) -> list[int]:
    """`count` records polled, copied and marked processed in the open transaction; their offsets."""
    offsets: list[int] = []
    deadline = time.monotonic() + 60
    while len(offsets) < count:
        assert time.monotonic() < deadline, f"polled {len(offsets)} of {count} records"
        msg = consumer.poll(0.5)
        if msg is None or msg.error() is not None:
            continue
        producer.produce(output, msg.value(), msg.key())
        consumer.mark_processed(msg)
        offsets.append(msg.offset())
    return offsets


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.copier")
    parser.add_argument("--transactional", action="store_true", help="AuditedConsumer(transactional=True)")
    parser.add_argument("mode", choices=["abort-then-commit", "abort-before-send-offsets", "stop-mid-transaction"])
    for name in ("bootstrap", "source", "output", "group", "consumer_ledger", "producer_ledger", "clients"):
        parser.add_argument(name)
    parser.add_argument("count", type=int)
    args = parser.parse_args(argv)
    consumer = AuditedConsumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        },
        ledger_topic=args.consumer_ledger,
        clients_topic=args.clients,
        **({"transactional": True} if args.transactional else {}),
    )
    producer = AuditedProducer(
        {"bootstrap.servers": args.bootstrap, "transactional.id": f"copier-{args.group}"},
        ledger_topic=args.producer_ledger,
        clients_topic=args.clients,
    )
    source = TopicPartition(args.source, 0, OFFSET_STORED)
    consumer.assign([source])
    producer.init_transactions(60)

    def copy_and_send_offsets() -> list[int]:
        producer.begin_transaction()
        offsets = _copy(consumer, producer, args.output, args.count)
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
        )
        return offsets

    told: dict[str, Any] = {"session": consumer.session_id}
    if not args.transactional:
        told["first"] = copy_and_send_offsets()
        producer.commit_transaction(30)
    if args.mode == "abort-before-send-offsets":
        producer.begin_transaction()
        aborted = _copy(consumer, producer, args.output, args.count)
    else:
        aborted = copy_and_send_offsets()
    if args.mode == "stop-mid-transaction":
        time.sleep(3.5)  # the ledger's background flush runs every second
        print(json.dumps({**told, "processed": aborted}), flush=True)
        time.sleep(600)
        return 1
    producer.abort_transaction(30)
    committed = consumer.committed([TopicPartition(args.source, 0)], 30)[0].offset
    consumer.seek(TopicPartition(args.source, 0, committed if committed >= 0 else aborted[0]))
    copied = copy_and_send_offsets()
    producer.commit_transaction(30)
    print(json.dumps({**told, "aborted": aborted, "committed": copied}), flush=True)
    consumer.close()
    producer.close(30)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
