"""Kafka client options for Spark's Kafka source (the Java client) from a cluster's
librdkafka-style config, shared by every Spark job.

The translation covers what production clusters use: SASL (PLAIN, SCRAM-SHA-256/512) and TLS
with a PEM CA, mutual TLS with a PEM certificate and key (or a PKCS#12 keystore). PEM
material is handed to the Java client inline (ssl.truststore.certificates,
ssl.keystore.certificate.chain / ssl.keystore.key), read here on the driver: executors on
other machines then need no copy of the files. A setting that has no faithful Java
equivalent is refused with an error naming it, never dropped.
"""

from __future__ import annotations

import json
from pathlib import Path

SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Spark shows data source options in plans and errors; these option names (and any value
# matching spark.redaction.regex, e.g. a JAAS line with password=) are redacted there.
REDACTED_OPTIONS_REGEX = r"(?i)url|password|secret|token|jaas|keystore\.key|ssl\.key"


class KafkaOptionsError(ValueError):
    """A cluster setting cannot be translated for the Java client; the message names it."""


def _read_pem(path: str, setting: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise KafkaOptionsError(f"{setting}: cannot read {path}: {exc.strerror or exc}") from None


def _check_pkcs8(key: str, setting: str) -> str:
    if "-----BEGIN PRIVATE KEY-----" in key or "-----BEGIN ENCRYPTED PRIVATE KEY-----" in key:
        return key
    raise KafkaOptionsError(
        f"{setting}: the Java client reads PEM keys in PKCS#8 form only (BEGIN PRIVATE KEY or "
        "BEGIN ENCRYPTED PRIVATE KEY); convert it with `openssl pkcs8 -topk8`"
    )


def _jaas_config(mechanism: str, config: dict[str, str]) -> str:
    if mechanism not in SASL_MECHANISMS:
        raise KafkaOptionsError(
            f"sasl.mechanism {mechanism!r} is not translated for Spark (supported: {', '.join(SASL_MECHANISMS)})"
        )
    module = SCRAM_LOGIN if mechanism.startswith("SCRAM") else PLAIN_LOGIN
    user = json.dumps(config["sasl.username"])
    password = json.dumps(config.get("sasl.password", ""))
    return f"{module} required username={user} password={password};"


def _truststore(config: dict[str, str]) -> dict[str, str]:
    if "ssl.ca.pem" in config:
        return {"ssl.truststore.type": "PEM", "ssl.truststore.certificates": config["ssl.ca.pem"]}
    if "ssl.ca.location" in config:
        certificates = _read_pem(config["ssl.ca.location"], "ssl.ca.location")
        if "-----BEGIN CERTIFICATE-----" not in certificates:
            raise KafkaOptionsError(f"ssl.ca.location: {config['ssl.ca.location']} holds no PEM certificate")
        return {"ssl.truststore.type": "PEM", "ssl.truststore.certificates": certificates}
    return {}


def _keystore(config: dict[str, str]) -> dict[str, str]:
    """Mutual TLS: the client's certificate and key."""
    if "ssl.keystore.location" in config:  # librdkafka: a PKCS#12 file
        options = {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": config["ssl.keystore.location"]}
        if "ssl.keystore.password" in config:
            options["ssl.keystore.password"] = config["ssl.keystore.password"]
        return options
    certificate = config.get("ssl.certificate.pem")
    if certificate is None and "ssl.certificate.location" in config:
        certificate = _read_pem(config["ssl.certificate.location"], "ssl.certificate.location")
    key = config.get("ssl.key.pem")
    key_setting = "ssl.key.pem"
    if key is None and "ssl.key.location" in config:
        key_setting = "ssl.key.location"
        key = _read_pem(config["ssl.key.location"], key_setting)
    if certificate is None and key is None:
        return {}
    if certificate is None or key is None:
        missing = "ssl.certificate.location" if certificate is None else "ssl.key.location"
        raise KafkaOptionsError(f"mutual TLS needs both a certificate and a key: {missing} is not set")
    options = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": certificate,
        "ssl.keystore.key": _check_pkcs8(key, key_setting),
    }
    if "ssl.key.password" in config:
        options["ssl.key.password"] = config["ssl.key.password"]
    return options


def java_client_config(config: dict[str, str]) -> dict[str, str]:
    """The Java client's security settings (without the ``kafka.`` prefix of Spark options)."""
    options: dict[str, str] = {}
    protocol = config.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise KafkaOptionsError(f"security.protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, got {protocol!r}")
    if "security.protocol" in config:
        options["security.protocol"] = protocol
    mechanism = (config.get("sasl.mechanisms") or config.get("sasl.mechanism") or "").upper()
    if mechanism:
        options["sasl.mechanism"] = mechanism
    if "sasl.username" in config:
        options["sasl.jaas.config"] = _jaas_config(mechanism or "PLAIN", config)
    if protocol in ("SSL", "SASL_SSL"):
        options.update(_truststore(config))
        options.update(_keystore(config))
        if str(config.get("enable.ssl.certificate.verification", "true")).lower() in ("false", "0"):
            raise KafkaOptionsError(
                "enable.ssl.certificate.verification=false has no Java client equivalent: "
                "give the cluster's CA in ssl.ca.location instead"
            )
    identification = config.get("ssl.endpoint.identification.algorithm")
    if identification is not None:
        # librdkafka says "none" where the Java client takes an empty value.
        options["ssl.endpoint.identification.algorithm"] = "" if identification.lower() == "none" else identification
    return options


def java_kafka_options(bootstrap_servers: str, config: dict[str, str]) -> dict[str, str]:
    """Kafka source options from the cluster's librdkafka-style config."""
    options = {
        "kafka.bootstrap.servers": bootstrap_servers,
        # How long a client waits on a broker that accepted its connection but does not answer
        # (frozen, overloaded) before it asks another. The Java admin of Spark's source gives up
        # on such a node only after one or two of these (lab: with Kafka's 30 s it stayed on a
        # frozen broker for the whole 60-s call, and the run failed `Timed out waiting for a
        # node assignment`); at 10 s it moves on within the call. Each task's fetch is at most
        # one partition's max.partition.fetch.bytes (1 MiB), answered well within this.
        "kafka.request.timeout.ms": "10000",
        "kafka.default.api.timeout.ms": "60000",
        # Every read is bounded and most end at the log end, where a fetch has nothing to
        # return: with the default 500 ms the broker holds it, and each task waited that long
        # (a 101k-record tail read took 1.9 s instead of 0.8 s). The job never waits for new
        # records, so the broker may answer at once.
        "kafka.fetch.max.wait.ms": "10",
    }
    options.update({f"kafka.{key}": value for key, value in java_client_config(config).items()})
    return options
