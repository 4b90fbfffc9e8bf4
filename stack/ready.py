"""Readiness probes used by stack.sh: exit 0 only when the service really answers."""

from __future__ import annotations

import sys


def kafka_ready(bootstrap: str, expected_brokers: int) -> bool:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000})
    metadata = admin.list_topics(timeout=5)
    if len(metadata.brokers) < expected_brokers:
        return False
    # The controller quorum must be able to create a topic before the cluster is usable.
    return metadata.controller_id >= 0 if hasattr(metadata, "controller_id") else True


def main() -> int:
    if sys.argv[1] == "kafka":
        try:
            return 0 if kafka_ready(sys.argv[2], int(sys.argv[3])) else 1
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready yet"
            print(exc, file=sys.stderr)
            return 1
    print(f"unknown service {sys.argv[1]}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
