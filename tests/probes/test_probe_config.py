"""mask_config and the ledger producer's derived config."""

from __future__ import annotations

import logging

import pytest

from auditor.probes import mask_config
from auditor.probes.config import ledger_producer_config
from spark_jobs.kafka_security import connection_settings


@pytest.mark.parametrize(
    "key",
    [
        "sasl.password",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.key.pem",
        "ssl.key.location",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.config",
        "SASL.PASSWORD",
        "schema.registry.basic.auth.user.info",
        "sasl.jaas.config",
        "custom.api.token",
    ],
)
def test_it_masks_secret_keys(key: str) -> None:
    assert mask_config({key: "hunter2"}) == {key: "****"}


def test_it_keeps_ordinary_settings_and_does_not_touch_the_input() -> None:
    config = {
        "bootstrap.servers": "a:9092,b:9092",
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "sasl.username": "app",
        "sasl.password": "hunter2",
    }
    original = dict(config)
    masked = mask_config(config)
    assert config == original
    assert masked == {**original, "sasl.password": "****"}


def test_it_masks_passwords_inside_urls_and_describes_non_json_values() -> None:
    def on_delivery(err: object, msg: object) -> None: ...

    masked = mask_config(
        {
            "sasl.oauthbearer.token.endpoint.url": "https://id:pw@idp.example/token",
            "schema.registry.url": "https://reg:s3cret@registry:8081",
            "on_delivery": on_delivery,
            "logger": logging.getLogger("x"),
            "default.topic.config": {"acks": 1, "ssl.key.password": "pw"},
        }
    )
    assert masked["sasl.oauthbearer.token.endpoint.url"] == "****"  # "token" in the key
    assert masked["schema.registry.url"] == "https://reg:****@registry:8081"
    assert masked["on_delivery"].startswith("<callable ") and "on_delivery" in masked["on_delivery"]
    assert masked["logger"] == "<Logger>"
    assert masked["default.topic.config"] == {"acks": 1, "ssl.key.password": "****"}


def test_it_gives_the_ledger_producer_the_connection_but_its_own_guarantees() -> None:
    app_config = {
        "bootstrap.servers": "b:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.password": "pw",
        "ssl.ca.location": "/ca.pem",
        "acks": "1",
        "enable.idempotence": False,
        "linger.ms": 500,
        "group.id": "processor",
        "on_delivery": print,
        "transactional.id": "tx",
    }
    config = ledger_producer_config(app_config, "app", {"linger.ms": 7})
    assert config == {
        "bootstrap.servers": "b:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.password": "pw",
        "ssl.ca.location": "/ca.pem",
        "client.id": "app.audit-ledger",
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 7,
        "compression.type": "lz4",
    }


def test_the_ledger_producer_reaches_the_cluster_as_the_auditors_own_clients_do() -> None:
    """One rule for what says how to reach a cluster: the ledger producer keeps what the
    auditor's own clients keep (spark_jobs.kafka_security), except the client's name, which
    is the ledger's own."""
    settings = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "enable.sasl.oauthbearer.unsecure.jwt": "true",
        "enable.ssl.certificate.verification": "false",
        "ssl.endpoint.identification.algorithm": "none",
        "https.ca.location": "/oidc-ca.pem",
        "client.dns.lookup": "use_all_dns_ips",
        "socket.keepalive.enable": "true",
        "socket.send.buffer.bytes": "1048576",
        "broker.address.family": "v4",
        "reconnect.backoff.max.ms": "5000",
        "connections.max.idle.ms": "60000",
        "api.version.request.timeout.ms": "5000",
        "acks": "1",
        "group.id": "processor",
        "enable.idempotence": "false",
    }

    ledger = ledger_producer_config({"bootstrap.servers": "b:9092", **settings}, "app")
    auditor = connection_settings(settings)

    copied = {k for k, v in settings.items() if ledger.get(k) == v}  # acks, idempotence: the ledger's own
    assert copied == set(auditor) == set(settings) - {"acks", "group.id", "enable.idempotence"}
