"""The measurements behind record contract version 2 (docs/contracts.md): what the ways of
carrying the audit fields and of learning acks cost per message in confluent-kafka.

Each arm is the same produce loop over pre-built payloads into a fresh topic (flush at the
end), differing only in the headers and the delivery-report set-up; arms run interleaved,
and the figure is process CPU per message (all threads, librdkafka's included).

    .venv/bin/python benchmarks/header_alternatives.py --records 200000 [--rounds 2]

Arms:
- plain: no headers, no callback;
- v1-4-headers: the four text headers of contract version 1 (32-hex audit-id);
- packed-33: one ``audit`` header, ``struct.pack('>B16sQQ')`` (version, session, seq, ts);
- packed-33-id: the same plus a 32-byte audit-id after it (an id that is not the key);
- text-1: one header with the same fields as text (``b"2:<pid hex>:<seq>:<ts>"``);
- packed-33+callback: packed-33 with a per-message ``functools.partial`` delivery callback;
- packed-33+only-error: packed-33 with ``delivery.report.only.error=true`` and one
  config-level ``on_delivery`` (called for failures only);
- packed-33+partial+only-error: ``delivery.report.only.error=true`` and a per-message
  ``functools.partial`` carrying the sequence (confluent-kafka skips the Python call for
  successes in C, so only the partial is paid for them).
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import sys
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

PACK = struct.Struct(">B16sQQ").pack


def cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def run_arm(config: dict[str, Any], topic: str, values: list[bytes], arm: str) -> float:
    pid = uuid.uuid4()
    pid_bytes, pid_hex = pid.bytes, pid.hex.encode()
    acks: list[tuple[int, Any]] = []

    def on_delivery(seq: int, err: Any, msg: Any) -> None:
        acks.append((seq, err))

    def on_error(err: Any, msg: Any) -> None:
        acks.append((-1, err))

    conf = dict(config)
    if arm == "packed-33+partial+only-error":
        conf["delivery.report.only.error"] = True
    elif arm == "packed-33+only-error":
        conf.update({"delivery.report.only.error": True, "on_delivery": on_error})
    producer = Producer(conf)
    produce = producer.produce
    time_ns = time.time_ns
    audit_id = uuid.uuid4().hex.encode()
    build: Callable[[int], list[tuple[str, str | bytes | None]] | None]
    if arm == "plain":
        build = lambda seq: None  # noqa: E731
    elif arm == "v1-4-headers":
        build = lambda seq: [  # noqa: E731
            ("audit-id", audit_id),
            ("audit-pid", pid_hex),
            ("audit-seq", b"%d" % seq),
            ("audit-ts", b"%d" % (time_ns() // 1_000_000)),
        ]
    elif arm == "packed-33-id":
        build = lambda seq: [("audit", PACK(2, pid_bytes, seq, time_ns() // 1_000_000) + audit_id)]  # noqa: E731
    elif arm == "text-1":
        build = lambda seq: [("audit", b"2:%s:%d:%d" % (pid_hex, seq, time_ns() // 1_000_000))]  # noqa: E731
    else:
        build = lambda seq: [("audit", PACK(2, pid_bytes, seq, time_ns() // 1_000_000))]  # noqa: E731
    per_message_callback = arm in ("packed-33+callback", "packed-33+partial+only-error")
    before = cpu_seconds()
    for seq, value in enumerate(values):
        callback = partial(on_delivery, seq) if per_message_callback else None
        while True:
            try:
                produce(topic, value, None, -1, callback, None, 0, build(seq))
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError("messages left undelivered")
    return (cpu_seconds() - before) / len(values) * 1e6


ARMS = (
    "plain",
    "v1-4-headers",
    "packed-33",
    "packed-33-id",
    "text-1",
    "packed-33+callback",
    "packed-33+only-error",
    "packed-33+partial+only-error",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    args = parser.parse_args()
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    values = [os.urandom(50).hex().encode() for _ in range(args.records)]
    config = {"bootstrap.servers": args.bootstrap, "linger.ms": 5}
    results: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for round_no in range(args.rounds):
        for arm in ARMS:
            topic = f"bench-alt-{uuid.uuid4().hex[:8]}"
            admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(30)
            try:
                results[arm].append(run_arm(config, topic, values, arm))
            finally:
                admin.delete_topics([topic])[topic].result(30)
            print(f"round {round_no + 1} {arm}: {results[arm][-1]:.2f} us/msg CPU", flush=True)
    plain = statistics.median(results["plain"])
    print("| arm | CPU us/msg (median) | added over plain |")
    print("|---|---|---|")
    for arm in ARMS:
        value = statistics.median(results[arm])
        print(f"| {arm} | {value:.2f} | {value - plain:+.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
