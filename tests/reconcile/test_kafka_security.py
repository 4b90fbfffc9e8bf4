"""Reasons read from the failures the clients report: librdkafka, the Java client (Spark), libpq
and the PostgreSQL JDBC driver, as they word them."""

from __future__ import annotations

import pytest

from spark_jobs.kafka_offsets import single_record_reader_config
from spark_jobs.kafka_security import (
    AUTHENTICATION_FAILED,
    CERTIFICATE_NOT_TRUSTED,
    MECHANISM_NOT_ENABLED,
    admin_config,
    connection_settings,
    explain,
    security_reason,
)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (
            "sasl_ssl://127.0.0.1:9392/bootstrap: SASL authentication error: Authentication failed during "
            "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
            AUTHENTICATION_FAILED,
        ),
        (
            "sasl_ssl://127.0.0.1:9392/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate "
            "verify failed: broker certificate could not be verified",
            CERTIFICATE_NOT_TRUSTED,
        ),
        (
            "SASL SCRAM-SHA-256 mechanism handshake failed: Broker: Unsupported SASL mechanism: broker's "
            "supported mechanisms: SCRAM-SHA-512",
            MECHANISM_NOT_ENABLED,
        ),
        (
            "org.apache.kafka.common.errors.SaslAuthenticationException: Authentication failed during "
            "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
            AUTHENTICATION_FAILED,
        ),
        (
            "org.apache.kafka.common.errors.SslAuthenticationException: SSL handshake failed Caused by: "
            "javax.net.ssl.SSLHandshakeException: PKIX path building failed",
            CERTIFICATE_NOT_TRUSTED,
        ),
        (
            "org.apache.kafka.common.errors.UnsupportedSaslMechanismException: Client SASL mechanism 'PLAIN' "
            "not enabled in the server",
            MECHANISM_NOT_ENABLED,
        ),
        ('connection failed: ... failed: FATAL:  password authentication failed for user "a"', AUTHENTICATION_FAILED),
        ("connection failed: ... failed: SSL error: certificate verify failed", CERTIFICATE_NOT_TRUSTED),
        ("org.postgresql.util.PSQLException: SSL error: PKIX path building failed", CERTIFICATE_NOT_TRUSTED),
        ("Failed to get metadata: Local: Broker transport failure", None),
        ("topic 'x' cannot be read: not found", None),
    ],
)
def test_it_reads_the_reason_of_a_refusal(text: str, reason: str | None) -> None:
    assert security_reason(text) == reason


def test_it_leads_the_text_with_its_reason_once() -> None:
    text = "SaslAuthenticationException: Authentication failed"
    assert explain(text) == f"{AUTHENTICATION_FAILED}: {text}"
    assert explain(explain(text)) == explain(text)
    assert explain("broker down") == "broker down"


def test_it_keeps_every_setting_of_how_to_reach_the_cluster_and_nothing_else() -> None:
    config = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.password": "s3cret",
        "ssl.ca.location": "/ca.pem",
        "enable.ssl.certificate.verification": "false",
        "enable.sasl.oauthbearer.unsecure.jwt": "true",
        "https.ca.location": "/oidc-ca.pem",
        "broker.address.family": "v4",
        "socket.keepalive.enable": "true",
        "client.dns.lookup": "use_all_dns_ips",
        "reconnect.backoff.max.ms": "5000",
        # an application's producer and consumer settings: none of them is the auditor's
        "acks": "all",
        "enable.idempotence": "true",
        "enable.auto.commit": "true",
        "group.id": "the-app",
        "auto.offset.reset": "latest",
        "isolation.level": "read_committed",
    }

    kept = connection_settings(config)

    assert set(kept) == {
        "security.protocol",
        "sasl.mechanisms",
        "sasl.password",
        "ssl.ca.location",
        "enable.ssl.certificate.verification",
        "enable.sasl.oauthbearer.unsecure.jwt",
        "https.ca.location",
        "broker.address.family",
        "socket.keepalive.enable",
        "client.dns.lookup",
        "reconnect.backoff.max.ms",
    }
    assert all(kept[k] == config[k] for k in kept)


def test_every_client_of_its_own_reaches_the_cluster_the_same_way() -> None:
    config = {"security.protocol": "SSL", "enable.ssl.certificate.verification": "false", "group.id": "the-app"}

    admin = admin_config("b:9093", config, timeout_s=3)
    reader = single_record_reader_config("b:9093", config, "auditor-x", "read_committed", timeout_s=3)

    for settings in (admin, reader):
        assert settings["bootstrap.servers"] == "b:9093"
        assert settings["enable.ssl.certificate.verification"] == "false"
        assert settings["socket.timeout.ms"] == 3000
    assert reader["group.id"] == "auditor-x" and reader["isolation.level"] == "read_committed"
    assert reader["enable.auto.commit"] is False and "group.id" not in admin
