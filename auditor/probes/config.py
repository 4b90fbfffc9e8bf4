"""Client configuration helpers: secret masking and the ledger producer's config."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

MASK = "****"

# The one list of secret-looking key parts in the project: the probes, the dashboard
# (auditor.lib.secrets) and the lint engine (auditor.lint.engine.masking) all read it, so a key
# masked in one place is masked everywhere. docs/contracts.md names the first five; the
# rest also carry secrets in practice (Java JAAS lines, schema-registry basic auth
# `user:password`, credential blobs, private keys, API keys). Keys are compared after
# normalise_key, so Spring's `ssl.key-store-password` and `SASL_PASSWORD` match too.
SECRET_KEY_MARKERS: tuple[str, ...] = (
    "password",
    "secret",
    "sasl.oauthbearer.config",
    "ssl.key",
    "token",
    "jaas",
    "user.info",
    "userinfo",
    "credential",
    "private.key",
    "api.key",
    "apikey",
)

_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:/@\s]*):[^@/\s]*@")

# Settings a ledger producer copies from the application's client so it reaches
# the same cluster the same way (network, TLS, SASL) and logs the same way.
# Everything else (acks, batching, consumer settings, delivery callbacks) stays
# the probe's own. The prefixes are those of the auditor's own clients
# (spark_jobs.kafka_security.CONNECTION_KEY_PREFIXES, kept in step by hand: the probes import
# nothing outside this package; `client.` is narrowed so the ledger producer keeps its own
# client.id), plus the callables and log settings an application hands its clients.
_CONNECTION_KEYS = frozenset(
    {
        "bootstrap.servers",
        "metadata.broker.list",
        "oauth_cb",
        "log_level",
        "logger",
    }
)
_CONNECTION_PREFIXES: tuple[str, ...] = (
    "security.",
    "sasl.",
    "ssl.",
    "ssl_",
    "enable.ssl.",
    "enable.sasl.",
    "https.",
    "client.dns.",
    "client.rack",
    "socket.",
    "broker.",
    "reconnect.",
    "connections.max.idle.ms",
    "api.version.",
)


def normalise_key(key: str) -> str:
    """Lower case, with '-' and '_' read as '.': librdkafka, Java and Spring spellings compare equal."""
    return re.sub(r"[-_]", ".", key.lower())


def is_secret_key(key: str) -> bool:
    """True for a config key whose value is a credential (see ``SECRET_KEY_MARKERS``)."""
    normalised = normalise_key(key)
    return any(marker in normalised for marker in SECRET_KEY_MARKERS)


def _describe(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return _URL_USERINFO.sub(rf"\g<scheme>\g<user>:{MASK}@", value)
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if callable(value):
        name = getattr(value, "__qualname__", None) or type(value).__name__
        return f"<callable {name}>"
    if isinstance(value, Mapping):
        return mask_config(value)
    return f"<{type(value).__name__}>"


def mask_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a client config that is safe to publish.

    Values of secret-looking keys (see ``SECRET_KEY_MARKERS``) become ``"****"``;
    passwords embedded in URLs (``scheme://user:pw@host``) are masked too;
    callables and other non-JSON values are replaced by a short description.
    Plain values (str, int, float, bool, None) are kept as they are.
    """
    masked: dict[str, Any] = {}
    for key, value in config.items():
        key_text = str(key)
        masked[key_text] = MASK if is_secret_key(key_text) else _describe(value)
    return masked


TOPIC_CONFIG = "default.topic.config"


def applied_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A confluent-kafka config in the order librdkafka applies it: the nested
    ``default.topic.config`` after every other key, wherever it is written (confluent-kafka sets
    it last), its keys moved to the end so they win over the same key or an alias set at the top
    level. Of aliases (``acks``/``request.required.acks``, ``message.timeout.ms``/
    ``delivery.timeout.ms``), the one applied last wins: ``applied_setting``."""
    flat: dict[str, Any] = {}
    nested: Mapping[str, Any] = {}
    for key, value in config.items():
        if key == TOPIC_CONFIG and isinstance(value, Mapping):
            nested = value
            continue
        flat[key] = value
    for key, value in nested.items():
        flat.pop(key, None)
        flat[key] = value
    return flat


def applied_setting(config: Mapping[str, Any], names: tuple[str, ...]) -> Any:
    """The value librdkafka runs with of the setting spelt `names` (aliases), None when unset:
    of those set in ``applied_config(config)``, the last."""
    value: Any = None
    for key, setting in applied_config(config).items():
        if key in names:
            value = setting
    return value


def librdkafka_bool(value: Any) -> bool | None:
    """A boolean setting as librdkafka parses it (true/t/1, false/f/0, any case; a Python bool);
    None for a value it refuses (the client then fails to start: left for it to say)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "t", "1"):
        return True
    if text in ("false", "f", "0"):
        return False
    return None


def connection_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The subset of a client config needed to reach the same cluster."""
    return {
        key: value for key, value in config.items() if key in _CONNECTION_KEYS or key.startswith(_CONNECTION_PREFIXES)
    }


def ledger_producer_config(
    client_config: Mapping[str, Any],
    client_id: str,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Config for a probe's internal ledger producer.

    acks=all and idempotence make every ledger batch durable and in order once
    acked; lz4 keeps the JSON batches small on the wire. ``overrides`` (e.g.
    from tests) win over everything.
    """
    config = connection_config(client_config)
    config.update(
        {
            "client.id": f"{client_id}.audit-ledger",
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 50,
            "compression.type": "lz4",
        }
    )
    if overrides:
        config.update(overrides)
    return config
