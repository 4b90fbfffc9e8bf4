"""Throughput cost of the audit probes against plain confluent-kafka clients, a floor
and OpenTelemetry's confluent-kafka instrumentation.

Producer arms, same config, same loop (produce; on a full queue poll and retry; flush at
the end, which for the audited arm includes resolving and acking its ledger):
- plain: ``Producer``;
- floor: the plain client plus one header of the size the contract writes (33 bytes, fixed
  value), no callback, no ledger: what any probe carrying the audit fields must pay;
- audited: ``AuditedProducer`` (contract version 2);
- otel: ``Producer`` instrumented by ``opentelemetry-instrumentation-confluent-kafka``
  with the OpenTelemetry SDK and an exporter that drops every span (the peer's cost).
Consumer: ``AuditedConsumer`` (poll + mark_processed per message, ledger flushed at the
end) vs ``Consumer`` (poll), both reading the same audited records from the beginning with
assign(). Arms run interleaved (plain/floor/audited/otel, seven times by default; each
ratio is the median of the per-round ratios, the table shows each arm's median) against the same broker.

The consumers run with ``fetch.queue.backoff.ms=10``. With librdkafka's default (1000 ms) a
consumer whose prefetch queue crosses its thresholds (queued.min.messages per partition,
queued.max.messages.kbytes: 300k records of a 3-partition topic do) stops fetching for a
second, then waits for the next fetch with an empty queue: a run of ~1.3 s then takes ~1 s
longer, or not, depending on whether the queue filled in time. Which runs stalled decided
the consumer ratio (0.72 in one run, 0.95 in the next: the plain arm stalled in the second),
not the probe's cost; with a short backoff both arms are measured on their own work.

    .venv/bin/python benchmarks/probe_overhead.py --records 300000 [--keys]

The OpenTelemetry arm is benchmark-only, never a runtime dependency of the auditor:

    .venv/bin/pip install -r requirements-bench.txt   # opentelemetry-sdk, opentelemetry-instrumentation-confluent-kafka

Without it the arm is skipped with a message and ``otel_added_cpu_ratio`` is ``n/a``.
Each run also prints the process CPU per message (all threads, librdkafka's included),
steadier than msgs/s on a shared machine. Payloads (and keys) are generated before timing;
every producer run writes to a fresh topic (replication factor 1 unless told otherwise)
that is deleted afterwards. The last line is always
``ratio producer=<audited/plain> consumer=<audited/plain> producer_vs_floor=<audited/floor>
otel_added_cpu_ratio=<(audited-plain)/(otel-plain) CPU per message>`` (throughput ratios
for the first three).
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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from auditor.probes import AUDIT, AuditedConsumer, AuditedProducer, pack_audit_header


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000, help="records per run (default 1,000,000)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=7,
        help="runs per arm, interleaved (default 7, minimum 2): rounds of ~0.4 s swing by ±20%% on a shared "
        "machine, and with three one disturbed round moved a median that far",
    )
    parser.add_argument("--value-size", type=int, default=100, help="payload bytes (default 100)")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--keys", action="store_true", help="give every record a key (else audit ids are UUIDs)")
    parser.add_argument("--replication-factor", type=int, default=1, help="of the benchmark topics (default 1)")
    parser.add_argument(
        "--fetch-queue-backoff-ms",
        type=int,
        default=10,
        help="the consumers' fetch.queue.backoff.ms (default 10; librdkafka's own is 1000, see above)",
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
    def __init__(self, bootstrap: str, replication_factor: int) -> None:
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.rf = replication_factor
        self.created: list[str] = []

    def create(self, prefix: str, partitions: int) -> str:
        name = f"bench-{prefix}-{uuid.uuid4().hex[:8]}"
        self.admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=self.rf)])[name].result(
            30
        )
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


def wait_for_leaders(client: Any, topic: str, partitions: int) -> None:
    """Until the client's own metadata names a leader for every partition of ``topic``.

    A topic just created is known to the brokers one after the other: a client whose first
    metadata lacks it queues its records and asks again later, so a round that starts then
    measures the metadata retry (up to ~0.5 s of a 0.3 s run), not the client."""
    # The floor and OpenTelemetry's proxy keep the real client as `_producer` (the proxy's own
    # Producer base is never opened); the audited producer delegates list_topics.
    list_topics = getattr(getattr(client, "_producer", client), "list_topics", None)
    if list_topics is None:
        return
    deadline = time.monotonic() + 30
    while True:
        metadata = list_topics(topic, timeout=5).topics.get(topic)
        if metadata is not None and metadata.error is None and len(metadata.partitions) == partitions:
            if all(p.leader >= 0 for p in metadata.partitions.values()):
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"no leader for every partition of {topic} within 30 s")
        time.sleep(0.1)


def wait_until_ready(client: Any, topic: str, partitions: int) -> None:
    """Untimed, for every arm: the client knows the topic's leaders, and its flush() has
    returned. For the audited producer that flush waits for the ledger's session-start,
    so its ledger producer (idempotent) holds a producer id before the round starts: a
    fresh one asked the broker for it while the round ran, and a broker answering "load in
    progress" (its block of producer ids not yet fetched from the controller) made it retry
    for up to ~0.55 s of a 0.4 s round. Plain, floor and OpenTelemetry clients have nothing
    queued, so their flush returns at once."""
    wait_for_leaders(client, topic, partitions)
    if client.flush(30):
        raise RuntimeError("a client did not get ready within 30 s")


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
                    # key by keyword in every arm: OpenTelemetry's wrapper misreads a positional key
                    produce(topic, value, key=key)
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


class FloorProducer:
    """The physical floor of a probe: the plain client plus one header as large as the
    contract's (fixed value), no callback, no ledger."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._producer = Producer(config)
        self._headers: list[tuple[str, str | bytes | None]] = [
            (AUDIT, pack_audit_header(uuid.uuid4().bytes, 1234567, 1700000000000))
        ]

    def produce(self, topic: str, value: bytes, key: bytes | None = None) -> None:
        self._producer.produce(topic, value, key, -1, None, None, 0, self._headers)

    def poll(self, timeout: float) -> int:
        return self._producer.poll(timeout)

    def flush(self, timeout: float) -> int:
        return self._producer.flush(timeout)


def otel_producer_factory() -> Callable[[dict[str, Any]], Any] | None:
    """A factory of instrumented producers, or None (with the reason printed) when the
    OpenTelemetry packages are not installed."""
    try:
        from opentelemetry.instrumentation.confluent_kafka import ConfluentKafkaInstrumentor
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
    except ImportError as exc:
        print(
            f"otel arm skipped: {exc.name or exc} is not installed; for it run "
            "`.venv/bin/pip install -r requirements-bench.txt` (opentelemetry-sdk and "
            "opentelemetry-instrumentation-confluent-kafka) "
            "(benchmark-only, not an auditor dependency)"
        )
        return None

    class DropSpans(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(DropSpans()))
    instrumentor = ConfluentKafkaInstrumentor()

    def make(config: dict[str, Any]) -> Any:
        return instrumentor.instrument_producer(Producer(config), tracer_provider=provider)

    return make


def paired_ratio(results: dict[str, list[float]], arm: str, baseline: str) -> float:
    """The median over rounds of ``arm``'s throughput over ``baseline``'s in the same round."""
    return statistics.median(a / b for a, b in zip(results[arm], results[baseline], strict=True))


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
    topics = Topics(args.bootstrap, args.replication_factor)
    ledger: dict[str, Any] = {
        "ledger_topic": topics.create("ledger", 1),
        "clients_topic": topics.create("clients", 1),
    }
    consumer_ledger: dict[str, Any] = {
        "ledger_topic": topics.create("cledger", 1),
        "clients_topic": ledger["clients_topic"],
    }
    values = [os.urandom(args.value_size // 2).hex().encode()[: args.value_size] for _ in range(args.records)]
    keys = [b"item-%08d" % i for i in range(args.records)] if args.keys else None
    producer_config = {"bootstrap.servers": args.bootstrap, "linger.ms": 5}
    producer_arms: dict[str, Callable[[], Any]] = {
        "plain producer": lambda: Producer(producer_config),
        "floor producer": lambda: FloorProducer(producer_config),
        "audited producer": lambda: AuditedProducer(producer_config, **ledger),
    }
    make_otel = otel_producer_factory()
    if make_otel is not None:
        producer_arms["otel producer"] = lambda: make_otel(producer_config)
    results: dict[str, list[float]] = defaultdict(list)
    cpu: dict[str, list[float]] = defaultdict(list)
    print(
        f"records={args.records} value_size={args.value_size} partitions={args.partitions} keys={args.keys} "
        f"replication_factor={args.replication_factor} rounds={args.rounds} "
        f"fetch_queue_backoff_ms={args.fetch_queue_backoff_ms}"
    )
    try:
        for round_no in range(args.rounds):
            for arm, make in producer_arms.items():
                topic = topics.create("p", args.partitions)
                client = make()
                wait_until_ready(client, topic, args.partitions)  # not timed: every arm starts ready
                cpu_before = cpu_seconds()
                elapsed = produce_all(client, topic, values, keys)
                used_cpu = cpu_seconds() - cpu_before
                if isinstance(client, AuditedProducer):
                    client.close()
                del client  # an instrumented producer would otherwise outlive its topic
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
                    "fetch.queue.backoff.ms": args.fetch_queue_backoff_ms,
                }
                audited = arm.startswith("audited")
                consumer: Any = AuditedConsumer(config, **consumer_ledger) if audited else Consumer(config)
                if audited:
                    consumer.flush_ledger(30)  # not timed: its ledger producer holds a producer id (see above)
                cpu_before = cpu_seconds()
                elapsed = consume_all(consumer, source, args.partitions, args.records, mark=audited)
                used_cpu = cpu_seconds() - cpu_before
                consumer.close()
                report(results, cpu, arm, round_no, args.records, elapsed, used_cpu)
    finally:
        topics.delete_all()

    medians = {arm: statistics.median(rates) for arm, rates in results.items()}
    cpu_medians = {arm: statistics.median(values) for arm, values in cpu.items()}
    print("| arm | CPU per message | throughput |")
    print("|---|---|---|")
    for arm, rate in medians.items():
        print(f"| {arm} | {cpu_medians[arm]:.2f} us | {rate:,.0f} msgs/s |")
    # Each ratio is the median of its per-round ratios: the arms of a round ran minutes apart
    # at most, so a drift of the machine's speed (the same consumer loop's CPU per message
    # moved 1.0-1.7 us between rounds of one run) cancels within a pair.
    producer_ratio = paired_ratio(results, "audited producer", "plain producer")
    consumer_ratio = paired_ratio(results, "audited consumer", "plain consumer")
    floor_ratio = paired_ratio(results, "audited producer", "floor producer")
    otel_ratio = "n/a"
    if "otel producer" in cpu_medians:
        added = cpu_medians["audited producer"] - cpu_medians["plain producer"]
        otel_added = cpu_medians["otel producer"] - cpu_medians["plain producer"]
        otel_ratio = f"{added / otel_added:.3f}" if otel_added > 0 else "n/a"
    print(
        f"ratio producer={producer_ratio:.3f} consumer={consumer_ratio:.3f} producer_vs_floor={floor_ratio:.3f} "
        f"otel_added_cpu_ratio={otel_ratio}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
