"""Why a connection to a secured Kafka cluster or database failed, in words a user acts on.

librdkafka reports authentication and TLS failures only through its error callback (a call
then merely times out with "Broker transport failure"); the Java client and the database
drivers put them in exception text. Both are read here into one of a few reasons, so every
path (reconciliation, stuck diagnosis, lint scans, the canary) says the same thing:
authentication failed, certificate not trusted, or SASL mechanism not enabled.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

AUTHENTICATION_FAILED = "authentication failed"
CERTIFICATE_NOT_TRUSTED = "certificate not trusted"
MECHANISM_NOT_ENABLED = "SASL mechanism not enabled on the server"

# Order matters: a mechanism refusal is also an authentication error to librdkafka.
_REASONS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (MECHANISM_NOT_ENABLED, re.compile(r"Unsupported SASL mechanism|UnsupportedSaslMechanism", re.I)),
    (
        CERTIFICATE_NOT_TRUSTED,
        re.compile(
            r"certificate verify failed|PKIX path building failed|unable to find valid certification path"
            r"|No subject alternative (names|DNS name|IP address)|certificate could not be verified"
            r"|SslAuthenticationException|SSLHandshakeException",
            re.I,
        ),
    ),
    (
        AUTHENTICATION_FAILED,
        re.compile(
            r"Authentication failed|SaslAuthenticationException|invalid credentials"
            r"|password authentication failed|SASL authentication error",
            re.I,
        ),
    ),
)
# The librdkafka settings of a cluster's config that say how to reach it (network, TLS, SASL):
# every client the auditor makes of a cluster keeps these and nothing else (Cluster.client_config
# takes these alone; the Spark jobs' admin clients and one-off readers filter again, as they are
# handed a binding's config). The rest of a cluster's config may be producer- or consumer-only
# and would be rejected or warned about, or change what the client does (a transactional.id).
# The probes' ledger producers copy the same prefixes (auditor.probes.config).
# enable.ssl.certificate.verification and enable.sasl.oauthbearer.unsecure.jwt are here: a
# client that dropped them would fail where the pre-check (check_kafka) connected.
CONNECTION_KEY_PREFIXES = (
    "security.",
    "sasl.",
    "ssl.",
    "enable.ssl.",
    "enable.sasl.",
    "https.",  # the OIDC token endpoint's TLS
    "client.",
    "socket.",
    "broker.",
    "reconnect.",
    "connections.max.idle.ms",
    "api.version.",
)


def connection_settings(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The settings of a cluster's client config that say how to reach the cluster."""
    return {k: v for k, v in (config or {}).items() if k.startswith(CONNECTION_KEY_PREFIXES)}


class KafkaConnectionError(RuntimeError):
    """Kafka could not be reached; ``security`` is True when the cause is authentication or TLS
    (a configuration error that waiting will not cure)."""

    def __init__(self, message: str, security: bool) -> None:
        super().__init__(message)
        self.security = security


def security_reason(text: str) -> str | None:
    """authentication failed / certificate not trusted / SASL mechanism not enabled, or None."""
    for reason, pattern in _REASONS:
        if pattern.search(text):
            return reason
    return None


def explain(text: str) -> str:
    """``text`` led by its reason when it is a security failure (once), else unchanged."""
    reason = security_reason(text)
    if reason is None or text.startswith(reason):
        return text
    return f"{reason}: {text}"


@dataclass
class ErrorCollector:
    """A librdkafka ``error_cb``: keeps what the client reported, for the error message."""

    errors: list[str] = field(default_factory=list)

    def __call__(self, error: KafkaError) -> None:
        if len(self.errors) < 20:
            self.errors.append(error.str())

    def security_failure(self) -> str | None:
        """The first authentication or TLS failure reported, led by its reason."""
        for text in self.errors:
            if security_reason(text):
                return explain(text)
        return None


def admin_config(
    bootstrap_servers: str, config: Mapping[str, Any] | None = None, timeout_s: float = 10.0
) -> dict[str, Any]:
    """The settings of an admin client of these servers: the cluster's connection settings,
    socket timeouts of `timeout_s`."""
    conf = connection_settings(config)
    conf.update(
        {
            "bootstrap.servers": bootstrap_servers,
            "socket.timeout.ms": int(timeout_s * 1000),
            "socket.connection.setup.timeout.ms": int(timeout_s * 1000),
        }
    )
    return conf


# librdkafka settings naming a file the client must read before it connects.
FILE_KEYS = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.keystore.location")


def unreadable_files(config: dict[str, Any]) -> list[str]:
    """``key path: reason`` for each TLS file the config names that cannot be read.
    (ssl.ca.location may also be a directory or librdkafka's ``probe``.)"""
    problems = []
    for key in FILE_KEYS:
        value = config.get(key)
        if not value or (key == "ssl.ca.location" and str(value) == "probe"):
            continue
        path = str(value)
        if key == "ssl.ca.location" and os.path.isdir(path):
            continue
        if not os.path.isfile(path):
            problems.append(f"{key} {path}: no such file")
        elif not os.access(path, os.R_OK):
            problems.append(f"{key} {path}: not readable")
    return problems


def check_kafka(bootstrap_servers: str, config: dict[str, Any], timeout_s: float = 10.0) -> None:
    """Get the cluster's metadata with the cluster's own security settings, or raise
    KafkaConnectionError saying why not. An authentication or TLS failure is reported as soon
    as the first broker refuses, not after the timeout."""
    problems = unreadable_files(config)
    if problems:
        raise KafkaConnectionError("cannot read the TLS files: " + "; ".join(problems), security=True)
    collector = ErrorCollector()
    settings: dict[str, Any] = {**admin_config(bootstrap_servers, config, timeout_s), "error_cb": collector}
    try:
        admin = AdminClient(settings)
    except KafkaException as exc:
        detail = exc.args[0].str() if exc.args and isinstance(exc.args[0], KafkaError) else str(exc)
        raise KafkaConnectionError(f"the client settings were refused: {detail}", security=True) from None
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin.list_topics(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            return
        except KafkaException as exc:
            admin.poll(0)  # serves error_cb
            failure = collector.security_failure()
            if failure:
                raise KafkaConnectionError(failure, security=True) from None
            if time.monotonic() >= deadline:
                last = f" (last error: {collector.errors[-1]})" if collector.errors else ""
                detail = exc.args[0].str() if exc.args and isinstance(exc.args[0], KafkaError) else str(exc)
                raise KafkaConnectionError(
                    f"cannot reach {bootstrap_servers}: {detail}{last}", security=False
                ) from None
