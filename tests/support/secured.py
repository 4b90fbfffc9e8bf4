"""The stack's secured listener (SASL_SSL, SCRAM-SHA-512) and TLS database, as tests use them."""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Secured:
    """The stack's SASL_SSL listener and TLS PostgreSQL, as a user configures them: the YAML
    holds ${ENV} references, the environment holds the values (written by stack.sh)."""

    bootstrap: str
    username: str
    password: str
    ca_location: str
    source_url: str  # the source database with sslmode=verify-full, password as ${APP_DB_PASSWORD}

    def client_config(self, **overrides: str) -> dict[str, str]:
        """librdkafka settings of the secured listener, resolved (for test clients)."""
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": self.username,
            "sasl.password": self.password,
            "ssl.ca.location": self.ca_location,
            **overrides,
        }

    def yaml(self, name: str, topic: str, table: str, *, config: dict[str, str] | None = None, extra: str = "") -> str:
        """An `audit apply` file: a SASL_SSL cluster and a TLS source with secrets as ${ENV}."""
        settings = {
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "${KAFKA_SASL_USERNAME}",
            "sasl.password": "${KAFKA_SASL_PASSWORD}",
            "ssl.ca.location": "${KAFKA_CA_LOCATION}",
        } | (config or {})
        lines = "\n".join(f"      {key}: {json.dumps(value)}" for key, value in settings.items())
        return (
            f"clusters:\n  {name}:\n    bootstrap_servers: ${{KAFKA_SECURE_BOOTSTRAP_SERVERS}}\n    config:\n{lines}\n"
            f"sources:\n  {name}:\n    url: {json.dumps(self.source_url)}\n"
            f"bindings:\n  {name}:\n    cluster: {name}\n    topic: {topic}\n    source: {name}\n"
            f"    table: public.{table}\n    key_column: id\n    created_column: created_at\n    grace: 30s\n"
            f"{extra}"
        )
