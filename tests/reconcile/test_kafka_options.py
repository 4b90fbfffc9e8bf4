"""librdkafka security settings → the Java client's (Spark's Kafka source): SASL PLAIN and SCRAM,
TLS with a PEM CA, mutual TLS with PEM or PKCS#12 material, and the settings refused."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from spark_jobs.kafka_options import KafkaOptionsError, java_client_config, java_kafka_options

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A real CA certificate, client certificate and PKCS#8 key, and a PKCS#1 (traditional) key."""
    folder = tmp_path_factory.mktemp("pem")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=ca")
    openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "client.key", "-out", "client.pem", "-subj", "/CN=c"
    )
    openssl("rsa", "-in", "client.key", "-traditional", "-out", "client-pkcs1.key")
    return {name: folder / name for name in ("ca.pem", "client.pem", "client.key", "client-pkcs1.key")}


def test_it_maps_sasl_scram_over_tls_with_a_pem_ca(pem: dict[str, Path]) -> None:
    options = java_kafka_options(
        "b:9093",
        {
            "security.protocol": "sasl_ssl",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "u",
            "sasl.password": 'p"w',
            "ssl.ca.location": str(pem["ca.pem"]),
            "linger.ms": "5",
        },
    )
    assert options["kafka.bootstrap.servers"] == "b:9093"
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["kafka.sasl.jaas.config"] == f'{SCRAM} required username="u" password="p\\"w";'
    assert options["kafka.ssl.truststore.type"] == "PEM"
    # inline, so executors on other machines need no copy of the file
    assert options["kafka.ssl.truststore.certificates"] == pem["ca.pem"].read_text()
    assert "kafka.ssl.truststore.location" not in options
    assert "kafka.linger.ms" not in options


def test_it_maps_sasl_plain_and_scram_sha_256() -> None:
    plain = java_client_config({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "a"})
    assert plain == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": f'{PLAIN} required username="a" password="";',
    }
    scram = java_client_config(
        {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "scram-sha-256", "sasl.username": "a"}
    )
    assert scram["sasl.mechanism"] == "SCRAM-SHA-256" and scram["sasl.jaas.config"].startswith(SCRAM)
    # librdkafka's default mechanism is GSSAPI, but a username without a mechanism means PLAIN here
    assert java_client_config({"sasl.username": "a", "sasl.password": "b"})["sasl.jaas.config"].startswith(PLAIN)


def test_it_maps_mutual_tls_from_pem_files(pem: dict[str, Path]) -> None:
    options = java_client_config(
        {
            "security.protocol": "SSL",
            "ssl.ca.location": str(pem["ca.pem"]),
            "ssl.certificate.location": str(pem["client.pem"]),
            "ssl.key.location": str(pem["client.key"]),
            "ssl.key.password": "kp",
        }
    )
    assert options["security.protocol"] == "SSL" and "sasl.jaas.config" not in options
    assert options["ssl.keystore.type"] == "PEM"
    assert options["ssl.keystore.certificate.chain"] == pem["client.pem"].read_text()
    assert options["ssl.keystore.key"] == pem["client.key"].read_text()
    assert options["ssl.key.password"] == "kp"


def test_it_maps_inline_pem_and_pkcs12_keystores(pem: dict[str, Path]) -> None:
    inline = java_client_config(
        {
            "security.protocol": "SSL",
            "ssl.ca.pem": pem["ca.pem"].read_text(),
            "ssl.certificate.pem": pem["client.pem"].read_text(),
            "ssl.key.pem": pem["client.key"].read_text(),
        }
    )
    assert inline["ssl.truststore.certificates"] == pem["ca.pem"].read_text()
    assert inline["ssl.keystore.key"] == pem["client.key"].read_text()
    pkcs12 = java_client_config(
        {"security.protocol": "SSL", "ssl.keystore.location": "/k.p12", "ssl.keystore.password": "ksp"}
    )
    assert pkcs12 == {
        "security.protocol": "SSL",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": "/k.p12",
        "ssl.keystore.password": "ksp",
    }


def test_it_translates_endpoint_identification_none_to_the_java_empty_value() -> None:
    assert java_client_config({"ssl.endpoint.identification.algorithm": "none"}) == {
        "ssl.endpoint.identification.algorithm": ""
    }
    assert java_client_config({"ssl.endpoint.identification.algorithm": "https"}) == {
        "ssl.endpoint.identification.algorithm": "https"
    }


def test_it_ignores_tls_files_when_the_protocol_does_not_use_tls(pem: dict[str, Path]) -> None:
    assert java_client_config({"ssl.ca.location": "/nowhere.pem"}) == {}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"security.protocol": "SSL", "ssl.ca.location": "/nowhere/ca.pem"}, "ssl.ca.location: cannot read"),
        ({"security.protocol": "SSL", "ssl.certificate.location": "{cert}"}, "ssl.key.location is not set"),
        (
            {"security.protocol": "SSL", "ssl.certificate.location": "{cert}", "ssl.key.location": "{pkcs1}"},
            "PKCS#8",
        ),
        ({"security.protocol": "SSL", "ssl.ca.location": "{key}"}, "holds no PEM certificate"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanisms": "GSSAPI", "sasl.username": "u"}, "GSSAPI"),
        ({"security.protocol": "TLS"}, "security.protocol must be one of"),
        ({"security.protocol": "SSL", "enable.ssl.certificate.verification": "false"}, "no Java client equivalent"),
    ],
)
def test_it_refuses_what_it_cannot_translate_faithfully(
    pem: dict[str, Path], config: dict[str, str], message: str
) -> None:
    paths = {"cert": pem["client.pem"], "key": pem["client.key"], "pkcs1": pem["client-pkcs1.key"]}
    filled = {k: v.format(**{name: str(path) for name, path in paths.items()}) for k, v in config.items()}
    with pytest.raises(KafkaOptionsError, match=message):
        java_client_config(filled)


def test_it_never_puts_the_password_anywhere_but_the_jaas_line() -> None:
    options = java_kafka_options(
        "b:1",
        {"security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN", "sasl.username": "u", "sasl.password": "pw-42"},
    )
    assert [key for key, value in options.items() if "pw-42" in value] == ["kafka.sasl.jaas.config"]


def test_bounded_reads_do_not_let_the_broker_hold_a_fetch_at_the_log_end() -> None:
    # The job's reads end at offsets it chose; a fetch there waiting for new records (the
    # client's 500 ms default) only delays each task.
    assert java_kafka_options("b:1", {})["kafka.fetch.max.wait.ms"] == "10"
