"""Kafka client options for Spark's Kafka source (the Java client) from a cluster's
librdkafka-style config, shared by every Spark job."""

from __future__ import annotations

import json


def java_kafka_options(bootstrap_servers: str, config: dict[str, str]) -> dict[str, str]:
    """Kafka source options from the cluster's librdkafka-style config."""
    options = {
        "kafka.bootstrap.servers": bootstrap_servers,
        "kafka.request.timeout.ms": "30000",
        "kafka.default.api.timeout.ms": "60000",
    }
    for key in ("security.protocol", "sasl.mechanism", "ssl.endpoint.identification.algorithm"):
        if key in config:
            options[f"kafka.{key}"] = config[key]
    if "sasl.mechanisms" in config:
        options["kafka.sasl.mechanism"] = config["sasl.mechanisms"]
    if "ssl.ca.location" in config:
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.location"] = config["ssl.ca.location"]
    if "sasl.username" in config:
        mechanism = options.get("kafka.sasl.mechanism", "PLAIN").upper()
        module = (
            "org.apache.kafka.common.security.scram.ScramLoginModule"
            if mechanism.startswith("SCRAM")
            else "org.apache.kafka.common.security.plain.PlainLoginModule"
        )
        user = json.dumps(config["sasl.username"])
        password = json.dumps(config.get("sasl.password", ""))
        options["kafka.sasl.jaas.config"] = f"{module} required username={user} password={password};"
    return options
