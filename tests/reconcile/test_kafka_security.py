"""Reasons read from the failures the clients report: librdkafka, the Java client (Spark), libpq
and the PostgreSQL JDBC driver, as they word them."""

from __future__ import annotations

import pytest

from spark_jobs.kafka_security import (
    AUTHENTICATION_FAILED,
    CERTIFICATE_NOT_TRUSTED,
    MECHANISM_NOT_ENABLED,
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
