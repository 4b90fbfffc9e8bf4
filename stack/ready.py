"""Readiness probes and set-up steps used by stack.sh: exit 0 only when the service really answers.

The SCRAM password comes from the environment (KAFKA_SASL_PASSWORD), never from the
command line, where `ps` would show it.
"""

from __future__ import annotations

import os
import sys


def kafka_ready(bootstrap: str, expected_brokers: int, extra: dict[str, str] | None = None) -> bool:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000, **(extra or {})})
    metadata = admin.list_topics(timeout=5)
    if len(metadata.brokers) < expected_brokers:
        return False
    # The controller quorum must be able to create a topic before the cluster is usable.
    return metadata.controller_id >= 0 if hasattr(metadata, "controller_id") else True


def secure_config(username: str, ca_location: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": username,
        "sasl.password": os.environ["KAFKA_SASL_PASSWORD"],
        "ssl.ca.location": ca_location,
    }


def upsert_scram_user(bootstrap: str, username: str) -> None:
    """Create (or reset the password of) the SCRAM-SHA-512 user; idempotent."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    upsertion = UserScramCredentialUpsertion(
        username,
        ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
        os.environ["KAFKA_SASL_PASSWORD"].encode(),
    )
    for future in admin.alter_user_scram_credentials([upsertion]).values():
        future.result(timeout=30)


def main() -> int:
    command = sys.argv[1]
    try:
        if command == "kafka":
            return 0 if kafka_ready(sys.argv[2], int(sys.argv[3])) else 1
        if command == "kafka-secure":
            bootstrap, brokers, username, ca = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
            return 0 if kafka_ready(bootstrap, brokers, secure_config(username, ca)) else 1
        if command == "scram-user":
            upsert_scram_user(sys.argv[2], sys.argv[3])
            return 0
    except Exception as exc:  # noqa: BLE001 - any failure means "not ready yet"
        print(exc, file=sys.stderr)
        return 1
    print(f"unknown command {command}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
