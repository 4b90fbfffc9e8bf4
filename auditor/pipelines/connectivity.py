"""Can the auditor connect to a cluster or a source with its configured security, and if not, why?

Every path that connects (reconciliation, stuck diagnosis, lint scans, the canary) asks
here first when the connection is secured, so a wrong password, an untrusted certificate or
a mechanism the server does not offer fails the work at once with one clear message naming
the cluster or source and the reason, and nothing is stored. Other failures (a broker down)
are left to each path, which knows whether it can still say something (`unknown`) or must fail.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import psycopg

from auditor.lib.secrets import MissingEnvError, mask_db_error, mask_text
from auditor.pipelines.models import Cluster, SourceDatabase
from spark_jobs.kafka_options import KafkaOptionsError, java_client_config
from spark_jobs.kafka_security import KafkaConnectionError, check_kafka, explain, security_reason

PRE_CHECK_TIMEOUT_S = 10.0


class ConnectivityError(RuntimeError):
    """A cluster or source cannot be used; ``security`` is True for authentication, TLS and
    configuration errors (waiting will not cure them)."""

    def __init__(self, message: str, security: bool = True) -> None:
        super().__init__(message)
        self.security = security


def is_secured(config: dict[str, Any]) -> bool:
    """True when the client authenticates or encrypts (anything but PLAINTEXT)."""
    return str(config.get("security.protocol", "PLAINTEXT")).upper() != "PLAINTEXT"


def _resolved(cluster: Cluster) -> tuple[str, dict[str, Any]]:
    try:
        config = cluster.client_config()
    except MissingEnvError as exc:
        raise ConnectivityError(f"cluster {cluster.name}: {exc}") from None
    bootstrap = str(config.pop("bootstrap.servers"))
    return bootstrap, config


def check_cluster(cluster: Cluster, timeout_s: float = PRE_CHECK_TIMEOUT_S, spark: bool = False) -> None:
    """Raise ConnectivityError when the secured cluster refuses the auditor (or, with
    ``spark``, when its settings have no Java client translation). A plaintext cluster is
    not contacted: it has no security failure to explain."""
    bootstrap, config = _resolved(cluster)
    if spark:
        try:
            java_client_config({k: str(v) for k, v in config.items()})
        except KafkaOptionsError as exc:
            raise ConnectivityError(f"cluster {cluster.name}: {exc}") from None
    if not is_secured(config):
        return
    try:
        check_kafka(bootstrap, config, timeout_s)
    except KafkaConnectionError as exc:
        raise ConnectivityError(f"cluster {cluster.name}: {mask_text(str(exc))}", security=exc.security) from None


def check_source(source: SourceDatabase, timeout_s: float = PRE_CHECK_TIMEOUT_S) -> None:
    """Raise ConnectivityError when the source refuses the auditor's credentials or its
    certificate is not trusted. Other failures are left to the path (it reports them)."""
    try:
        url = source.resolved_url()
    except MissingEnvError as exc:
        raise ConnectivityError(f"source {source.name}: {exc}") from None
    if urlsplit(url).scheme not in ("postgresql", "postgres"):
        return
    try:
        psycopg.connect(url, connect_timeout=max(1, int(timeout_s)), application_name="auditor-check").close()
    except psycopg.Error as exc:
        text = mask_db_error(exc, url, whole=True)
        if isinstance(exc, psycopg.ProgrammingError):  # libpq could not parse the URL or an option in it
            raise ConnectivityError(f"source {source.name}: its URL is not valid: {text}") from None
        if security_reason(text):
            raise ConnectivityError(f"source {source.name}: {explain(text)}") from None
