"""The stack's secured listener and TLS database admit only what production would: SCRAM over
TLS with the stack's CA, and for the TLS-only role an encrypted connection."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from tests.support.secured import Secured

pytestmark = pytest.mark.integration


def test_it_serves_every_broker_over_sasl_ssl(secured: Secured, kafka_brokers: int) -> None:
    metadata = AdminClient(secured.client_config()).list_topics(timeout=15)
    assert sorted(f"{b.host}:{b.port}" for b in metadata.brokers.values()) == sorted(secured.bootstrap.split(","))
    assert len(metadata.brokers) == kafka_brokers


@pytest.mark.parametrize(
    "overrides",
    [
        {"security.protocol": "SSL"},  # TLS without SASL
        {"security.protocol": "SASL_PLAINTEXT"},  # SASL without TLS
    ],
)
def test_it_refuses_a_client_that_skips_authentication_or_encryption(
    secured: Secured, overrides: dict[str, str]
) -> None:
    config = {
        k: v
        for k, v in secured.client_config(**overrides).items()
        if not k.startswith("sasl") or "SASL" in overrides["security.protocol"]
    }
    with pytest.raises(KafkaException, match="transport failure"):
        AdminClient({**config, "socket.timeout.ms": 3000}).list_topics(timeout=4)


def test_it_keeps_the_private_keys_private_and_the_ca_readable(secured: Secured) -> None:
    folder = Path(secured.ca_location).parent
    for key in ("ca.key", "server.key", "broker-keystore.pem"):
        assert stat.S_IMODE(os.stat(folder / key).st_mode) == 0o600, key
    assert "BEGIN CERTIFICATE" in Path(secured.ca_location).read_text()


def test_it_admits_the_tls_only_role_over_tls_alone() -> None:
    url = os.environ["SOURCE_DATABASE_TLS_URL"]
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone() == (True,)
    with pytest.raises(psycopg.OperationalError, match="no encryption"):
        psycopg.connect(url.replace("sslmode=verify-full", "sslmode=disable"))
