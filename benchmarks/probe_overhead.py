"""Throughput cost of the audit probes against plain confluent-kafka clients.

Producer: AuditedProducer vs Producer, same config, same loop (produce; on a full
queue poll and retry; flush at the end, which for the audited arm includes writing
and acking its ledger). Consumer: AuditedConsumer (poll + mark_processed per
message, ledger flushed at the end) vs Consumer (poll), both reading the same
audited records from the beginning with assign(). Arms run interleaved
(A/B/A/B...) against the same broker; the ratios are audited/plain medians.

    .venv/bin/python benchmarks/probe_overhead.py --records 200000 [--floor] [--keys]

Each run also prints the process CPU per message (all threads, librdkafka's
included), steadier than msgs/s on a shared machine. ``--floor`` adds a producer
arm with only what the contract forces on any Python probe (four headers and a
per-message delivery callback) to show how much of the cost is confluent-kafka's.
Payloads (and keys) are generated before timing; every producer run writes to a
fresh topic that is deleted afterwards. The last line is always
``ratio producer=<x> consumer=<y>``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from auditor.probes import AuditedConsumer, AuditedProducer


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000, help="records per run (default 1,000,000)")
    parser.add_argument("--rounds", type=int, default=2, help="runs per arm, interleaved (default 2, minimum 2)")
    parser.add_argument("--value-size", type=int, default=100, help="payload bytes (default 100)")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--keys", action="store_true", help="give every record a key (else audit ids are UUIDs)")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="add an arm with only the contract's headers and a per-message delivery callback",
    )
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
        help="bootstrap servers (default $KAFKA_BOOTSTRAP_SERVERS or 127.0.0.1:9092)",
    )
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2")
    if args.records < 1:
        parser.error("--records must be positive")
    return args


class Topics:
    def __init__(self, bootstrap: str) -> None:
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.created: list[str] = []

    def create(self, prefix: str, partitions: int) -> str:
        name = f"bench-{prefix}-{uuid.uuid4().hex[:8]}"
        self.admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=-1)])[name].result(30)
        deadline = time.monotonic() + 30
        while name not in self.admin.list_topics(timeout=5).topics:
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {name} did not appear")
            time.sleep(0.2)
        self.created.append(name)
        return name

    def delete(self, names: list[str]) -> None:
        if names:
            for future in self.admin.delete_topics(names).values():
                try:
                    future.result(30)
                except Exception as exc:  # noqa: BLE001 - cleanup is best effort
                    print(f"warning: could not delete a topic: {exc}", file=sys.stderr)
            self.created = [name for name in self.created if name not in names]

    def delete_all(self) -> None:
        self.delete(list(self.created))


def produce_all(producer: Any, topic: str, values: list[bytes], keys: list[bytes] | None) -> float:
    """The same loop for both arms; returns seconds from first produce to flush()."""
    produce = producer.produce
    poll = producer.poll
    started = time.perf_counter()
    if keys is None:
        for value in values:
            while True:
                try:
                    produce(topic, value)
                    break
                except BufferError:
                    poll(0.05)
    else:
        for value, key in zip(values, keys, strict=True):
            while True:
                try:
                    produce(topic, value, key)
                    break
                except BufferError:
                    poll(0.05)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - started
    if remaining:
        raise RuntimeError(f"{remaining} messages not delivered")
    return elapsed


def consume_all(consumer: Any, topic: str, partitions: int, count: int, mark: bool) -> float:
    """Read ``count`` records from the beginning; returns seconds from the first record to the last."""
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    poll = consumer.poll
    seen = 0
    started = 0.0
    mark_processed: Callable[[Any], None] | None = consumer.mark_processed if mark else None
    while seen < count:
        msg = poll(1.0)
        if msg is None or msg.error() is not None:
            continue
        if not seen:
            started = time.perf_counter()
        seen += 1
        if mark_processed is not None:
            mark_processed(msg)
    if mark:
        consumer.flush_ledger(60)
    return time.perf_counter() - started


class ContractFloorProducer:
    """What any Python probe pays for the contract on confluent-kafka before its own
    logic: the four audit headers (fixed values) and a per-message delivery callback
    that records one tuple. Shown with --floor, never part of the final ratio."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._producer = Producer(config)
        self._headers = [("audit-id", b"0" * 32), ("audit-pid", b"0" * 32), ("audit-seq", b"1234567"),
                         ("audit-ts", b"1700000000000")]  # fmt: skip
        self.acks: list[tuple[int, int, int]] = []
        self._seq = 0

    def _on_delivery(self, seq: int, err: Any, msg: Any) -> None:
        self.acks.append((seq, msg.partition(), msg.offset()))

    def produce(self, topic: str, value: bytes, key: bytes | None = None) -> None:
        self._producer.produce(topic, value, key, -1, partial(self._on_delivery, self._seq), None, 0, self._headers)
        self._seq += 1

    def poll(self, timeout: float) -> int:
        return self._producer.poll(timeout)

    def flush(self, timeout: float) -> int:
        return self._producer.flush(timeout)


def cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def report(results: dict[str, list[float]], cpu: dict[str, list[float]], arm: str, round_no: int, n: int,
           elapsed: float, used_cpu: float) -> None:  # fmt: skip
    results[arm].append(n / elapsed)
    cpu[arm].append(used_cpu / n * 1e6)
    print(
        f"round {round_no + 1} {arm}: {n / elapsed:,.0f} msgs/s ({elapsed:.2f}s, process CPU {used_cpu / n * 1e6:.2f} us/msg)",
        flush=True,
    )


def main() -> int:
    args = parse_args()
    topics = Topics(args.bootstrap)
    ledger = {
        "ledger_topic": topics.create("ledger", 1),
        "clients_topic": topics.create("clients", 1),
    }
    consumer_ledger = {"ledger_topic": topics.create("cledger", 1), "clients_topic": ledger["clients_topic"]}
    values = [os.urandom(args.value_size // 2).hex().encode()[: args.value_size] for _ in range(args.records)]
    keys = [b"item-%08d" % i for i in range(args.records)] if args.keys else None
    producer_config = {"bootstrap.servers": args.bootstrap, "linger.ms": 5}
    producer_arms: dict[str, Callable[[], Any]] = {
        "plain producer": lambda: Producer(producer_config),
        "audited producer": lambda: AuditedProducer(producer_config, **ledger),
    }
    if args.floor:
        producer_arms["floor producer"] = lambda: ContractFloorProducer(producer_config)
    results: dict[str, list[float]] = defaultdict(list)
    cpu: dict[str, list[float]] = defaultdict(list)
    print(f"records={args.records} value_size={args.value_size} partitions={args.partitions} keys={args.keys}")
    try:
        for round_no in range(args.rounds):
            for arm, make in producer_arms.items():
                topic = topics.create("p", args.partitions)
                client = make()
                cpu_before = cpu_seconds()
                elapsed = produce_all(client, topic, values, keys)
                used_cpu = cpu_seconds() - cpu_before
                if isinstance(client, AuditedProducer):
                    client.close()
                topics.delete([topic])  # keeps the broker's disk use to one run's worth
                report(results, cpu, arm, round_no, args.records, elapsed, used_cpu)

        source = topics.create("c", args.partitions)
        seeder = AuditedProducer(producer_config, **ledger)
        produce_all(seeder, source, values, keys)
        seeder.close()
        for round_no in range(args.rounds):
            for arm in ("plain consumer", "audited consumer"):
                config = {
                    "bootstrap.servers": args.bootstrap,
                    "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                    "enable.auto.commit": False,
                }
                audited = arm.startswith("audited")
                consumer: Any = AuditedConsumer(config, **consumer_ledger) if audited else Consumer(config)
                cpu_before = cpu_seconds()
                elapsed = consume_all(consumer, source, args.partitions, args.records, mark=audited)
                used_cpu = cpu_seconds() - cpu_before
                consumer.close()
                report(results, cpu, arm, round_no, args.records, elapsed, used_cpu)
    finally:
        topics.delete_all()

    medians = {arm: statistics.median(rates) for arm, rates in results.items()}
    for arm, rate in medians.items():
        print(f"median {arm}: {rate:,.0f} msgs/s, process CPU {statistics.median(cpu[arm]):.2f} us/msg")
    if args.floor:
        floor_ratio = medians["floor producer"] / medians["plain producer"]
        print(f"floor producer/plain producer: {floor_ratio:.3f} (headers + per-message callback, no probe logic)")
    producer_ratio = medians["audited producer"] / medians["plain producer"]
    consumer_ratio = medians["audited consumer"] / medians["plain consumer"]
    print(f"ratio producer={producer_ratio:.3f} consumer={consumer_ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
