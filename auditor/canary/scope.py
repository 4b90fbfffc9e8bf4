"""Which cluster a canary point belongs to, as one string: alerts, metrics and the page tell
canaries on different clusters (which all default to the same topic) apart by it."""

from __future__ import annotations

from django.conf import settings


def bootstrap_hosts(bootstrap: str) -> set[str]:
    """The hosts of a bootstrap servers list, as compared: trimmed, lower case."""
    return {part.strip().lower() for part in bootstrap.split(",") if part.strip()}


def cluster_scope(cluster: str, bootstrap_servers: str) -> str:
    """The configured cluster's name (``--cluster``, a slug); without one, ``servers=<hosts>``
    for bootstrap servers other than KAFKA_BOOTSTRAP_SERVERS; nothing for the default
    servers (or points that did not record them), whose fingerprints stay as they were.
    """
    if cluster:
        return cluster
    hosts = bootstrap_hosts(bootstrap_servers)
    if not hosts or hosts == bootstrap_hosts(str(getattr(settings, "KAFKA_BOOTSTRAP_SERVERS", ""))):
        return ""
    return "servers=" + ",".join(sorted(hosts))
