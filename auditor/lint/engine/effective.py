"""From a pasted config to the values the client will really run with.

Three steps: key aliases are folded into one name (librdkafka's request.required.acks is
acks), values are read into their types (a non-number where a number is needed is a
LintInputError naming the input and line), and unset keys take the client's default,
including the defaults the clients derive from other keys (librdkafka turns idempotence
on for a transactional.id; Java 3.x+ turns its default idempotence off when acks≠all, Java
before 3.0.1 turns it on for a transactional.id and then sets an unset acks to all; Java
before 2.1 has no delivery.timeout.ms, whose value is then None even when the config sets it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from auditor.lint.engine import defaults as d
from auditor.lint.engine.errors import LintInputError
from auditor.lint.engine.masking import mask_value
from auditor.lint.engine.terms import Setting

# read leniently, for what the user meant (librdkafka also takes t and f; Spring Boot's named
# properties yes/no and on/off); client_refusal says which of them the client refuses
_TRUE = {"true", "1", "yes", "on", "t"}
_FALSE = {"false", "0", "no", "off", "f"}
_RESET = {
    "smallest": "earliest",
    "earliest": "earliest",
    "beginning": "earliest",
    "largest": "latest",
    "latest": "latest",
    "end": "latest",
    "error": "none",
    "none": "none",
}


def _shown_for_error(key: str, raw: Any) -> str:
    text = repr(mask_value(key, raw))
    return text if len(text) <= 60 else text[:57] + "...'"


def normalise_value(key: str, raw: Any, *, source: str, line: int | None = None, name: str | None = None) -> Any:
    """``raw`` read as the type the engine needs for ``key``; LintInputError if it can't be.

    ``name`` is the key as the user wrote it (an alias of ``key``), for the error message.
    """
    kind = d.KEY_TYPES.get(key)
    if kind is None or raw is None:
        return raw
    written = name or key

    def fail(expected: str) -> LintInputError:
        shown = _shown_for_error(written, raw)
        return LintInputError(f"{written}: expected {expected}, got {shown}", source=source, line=line)

    text = str(raw).strip()
    if kind in ("int", "number"):
        if isinstance(raw, bool):
            raise fail("a number")
        if isinstance(raw, int):
            return raw
        if isinstance(raw, float):
            if kind == "int" and not raw.is_integer():
                raise fail("a whole number")
            return int(raw) if raw.is_integer() else raw
        try:
            return int(text)
        except ValueError:
            pass
        if kind == "number":
            try:
                number = float(text)
            except ValueError:
                raise fail("a number") from None
            return int(number) if number.is_integer() else number
        raise fail("a whole number")
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise fail("true or false")
    if kind == "acks":
        if isinstance(raw, bool):
            raise fail("all, -1, 0 or 1")
        if text.lower() in ("all", "-1"):
            return "all"
        if text.isdigit():
            return str(int(text))
        raise fail("all, -1, 0 or 1")
    if kind == "isolation":
        level = text.lower().replace("-", "_")
        if level not in ("read_committed", "read_uncommitted"):
            raise fail("read_committed or read_uncommitted")
        return level
    if kind == "reset":
        reset = text.lower()
        if reset in _RESET:
            return _RESET[reset]
        if reset.startswith("by_duration:"):  # KIP-1106 (Java 4.0+)
            return "by_duration"
        raise fail("earliest, latest or none (librdkafka: smallest, largest, error)")
    if kind == "protocol":
        protocol = text.lower()
        if protocol not in d.GROUP_PROTOCOLS:
            raise fail("classic or consumer")
        return protocol
    if kind == "ack_mode":
        # Spring Boot binds an enum leniently: case and any character but letters and digits
        # are ignored (LenientStringToEnumConverterFactory), so manual-immediate is MANUAL_IMMEDIATE
        wanted = re.sub(r"[^0-9a-z]", "", text.lower())
        for mode in d.SPRING_ACK_MODES:
            if mode.replace("_", "").lower() == wanted:
                return mode
        raise fail(f"one of {', '.join(d.SPRING_ACK_MODES)}")
    if kind == "processing":
        guarantee = text.lower()
        if guarantee not in d.PROCESSING_GUARANTEES:
            raise fail("at_least_once or exactly_once_v2")
        return guarantee
    return text


def canonical_key(client: str, key: str) -> str:
    # not stripped: java.util.Properties keeps "\\ acks" as " acks", which no client knows
    key = str(key)
    if client == "librdkafka":
        return d.LIBRDKAFKA_ALIASES.get(key, key)
    return key


def _display_name(client: str, key: str) -> str:
    if client == "librdkafka":
        return d.LIBRDKAFKA_DISPLAY_NAMES.get(key, key)
    return key


def read_explicit(
    config: Mapping[str, Any],
    *,
    client: str,
    source: str,
    lines: Mapping[str, int] | None = None,
    kind: str | None = None,
    java_version: tuple[int, int, int] = d.DEFAULT_JAVA_VERSION,
) -> dict[str, Setting]:
    """The keys the user set, folded to one name each; later keys win, as in the clients.

    For a producer or consumer ``kind``, each setting also says whether ``client`` (at
    ``java_version``) refuses the value as written (client_refusal)."""
    lines = lines or {}
    explicit: dict[str, Setting] = {}
    for raw_key, raw_value in config.items():
        if raw_value is None:
            continue
        key = canonical_key(client, raw_key)
        value = normalise_value(key, raw_value, source=source, line=lines.get(str(raw_key)), name=str(raw_key))
        shown = raw_value.strip() if isinstance(raw_value, str) else raw_value
        refusal = None
        if kind in ("producer", "consumer"):
            refusal = client_refusal(client, key, raw_value, java_version, name=str(raw_key))
        ignored = ""
        if kind in ("producer", "consumer") and str(raw_key) != str(raw_key).strip():
            refusal, ignored = _blank_key(client, str(raw_key), kind)
        refused, accepted = refusal or ("", "")
        explicit[key] = Setting(
            key=key,
            name=str(raw_key),
            value=value,
            shown=shown,
            source="explicit",
            refused=refused,
            refused_expected=accepted,
            ignored=ignored,
        )
    return explicit


def _blank_key(client: str, key: str, kind: str) -> tuple[tuple[str, str] | None, str]:
    """(refusal, why ignored) of a key with blanks around it: librdkafka refuses it at creation
    ('No such configuration property: " acks"', confluent-kafka 2.16); the Java client takes it
    for a config it does not know, warns ("supplied but isn't a known config") and ignores it."""
    meant = key.strip()
    if client == "librdkafka":
        return (f'No such configuration property: "{key}"', f"the key without blanks: {meant}"), ""
    return None, f"the Java {kind} knows no key {key!r} (blanks around it) and ignores it"


# What each client accepts, where normalise_value reads more (it reads what the user meant, so
# that the other rules judge it; this says whether the client starts with it). Measured with
# confluent-kafka 2.16 (librdkafka 2.16.0, rdkafka_conf.c) and kafka-clients 3.7.2, 3.9.2,
# 4.0.0 and 4.3.1 (ConfigDef: Type.BOOLEAN, ValidString): tests/lint/test_startup_rejections.py.
_JAVA_ACCEPTS: Mapping[str, tuple[str, ...]] = {
    "acks": ("all", "-1", "0", "1"),  # ValidString.in: case-sensitive, after trimming
    "isolation": ("read_committed", "read_uncommitted"),
    "reset": ("latest", "earliest", "none"),  # and by_duration:<ISO-8601> from 4.0 (KIP-1106)
}
_RK_ENUMS: Mapping[str, tuple[str, ...]] = {
    # rd_kafka_anyconf_set_prop0's string-to-int table: any case, leading blanks skipped
    "isolation": ("read_committed", "read_uncommitted"),
    "reset": ("smallest", "earliest", "beginning", "largest", "latest", "end", "error"),
}
_RK_MAX_ACKS = 1000  # request.required.acks: -1 .. 1000, or "all"


def client_refusal(
    client: str, key: str, raw: Any, java_version: tuple[int, int, int], *, name: str | None = None
) -> tuple[str, str] | None:
    """(why, what it accepts) when ``client`` refuses to start with ``raw`` for ``key``, though
    normalise_value reads it: Java refuses acks=ALL, isolation.level=read-committed,
    auto.offset.reset=smallest or enable.auto.commit=yes; librdkafka refuses
    enable.auto.commit=yes, auto.offset.reset=none and acks=1001. None when it accepts it."""
    kind = d.KEY_TYPES.get(key)
    if raw is None or kind not in ("bool", "acks", "isolation", "reset"):
        return None
    # what the client is handed: confluent-kafka passes True as "true"; Spring Boot's map and a
    # .properties file hand Java strings
    text = str(raw).lower() if isinstance(raw, bool) else str(raw)
    if client == "java":
        return _java_refusal(kind, name or key, text, java_version)
    return _librdkafka_refusal(kind, name or key, text)


def _java_refusal(kind: str, key: str, text: str, java_version: tuple[int, int, int]) -> tuple[str, str] | None:
    value = text.strip()  # ConfigDef trims a string before it parses or validates it
    if kind == "bool":
        if value.lower() in ("true", "false"):
            return None
        return (
            f"Invalid value {value} for configuration {key}: Expected value to be either true or false",
            "true or false",
        )
    accepted = _JAVA_ACCEPTS[kind]
    if value in accepted:
        return None
    if kind == "reset" and value.startswith("by_duration:"):
        if java_version >= (4, 0, 0):
            return None
        return (
            f"Invalid value {value} for configuration {key}: by_duration is known from Java 4.0 (KIP-1106)",
            ", ".join(accepted),
        )
    shown = ", ".join(accepted)
    return (f"Invalid value {value} for configuration {key}: String must be one of: {shown}", f"one of {shown}")


def _librdkafka_refusal(kind: str, key: str, text: str) -> tuple[str, str] | None:
    if kind == "bool":
        # true, t, false, f in any case, or 1 or 0: nothing else, not even a blank
        if text.lower() in ("true", "t", "false", "f") or text in ("1", "0"):
            return None
        return (f'Expected bool value for "{key}": true or false', "true or false")
    if kind == "acks":
        if text.lower() == "all":
            return None
        try:
            acks = int(text.strip())
        except ValueError:
            return (f'Invalid value for configuration property "{key}"', "all, or -1 to 1000")
        if -1 <= acks <= _RK_MAX_ACKS:
            return None
        return (f'value {acks} of "{key}" is outside the allowed range -1..{_RK_MAX_ACKS}', "all, or -1 to 1000")
    accepted = _RK_ENUMS[kind]
    if text.lstrip().lower() in accepted:
        return None
    return (f'Invalid value "{text}" for configuration property "{key}"', f"one of {', '.join(accepted)}")


def _default(client: str, key: str, value: Any, note: str = "") -> Setting:
    normalised = normalise_value(key, value, source="defaults")
    return Setting(key=key, name=_display_name(client, key), value=normalised, shown=value, source="default", note=note)


def _derived(setting: Setting, value: Any, note: str) -> Setting:
    return Setting(key=setting.key, name=setting.name, value=value, shown=value, source="default", note=note)


def effective_settings(
    explicit: Mapping[str, Setting],
    *,
    client: str,
    kind: str,
    java_version: tuple[int, int, int],
    broker: Mapping[str, Setting] | None = None,
    framework: str | None = None,
) -> dict[str, Setting]:
    """Every key a rule reads, explicit or defaulted, after the client's own adjustments.

    ``framework`` is what creates the client (``d.SPRING_KAFKA`` for a Spring Boot config),
    when it sets its own values for keys the config leaves unset.
    """
    table = d.client_defaults(client, kind, java_version)
    if kind == "topic" and broker is not None:
        table.update(_topic_defaults_from_broker(broker))
    settings = {key: _default(client, key, value) for key, value in table.items()}
    if framework == d.SPRING_KAFKA and kind == "consumer":
        for key, (value, note) in d.SPRING_KAFKA_CONSUMER.items():
            settings[key] = _default(client, key, value, note)
    settings.update(explicit)
    if kind == "producer":
        if client == "librdkafka":
            _librdkafka_producer_adjustments(settings)
        else:
            _java_producer_adjustments(settings, java_version)
    return settings


def _topic_defaults_from_broker(broker: Mapping[str, Setting]) -> dict[str, Any]:
    inherited: dict[str, Any] = {}
    for topic_key, broker_key in d.TOPIC_FROM_BROKER.items():
        if broker_key in broker:
            inherited[topic_key] = broker[broker_key].value
    # log.retention.ms wins over .minutes, which wins over .hours (as in the broker)
    for key, factor in (("log.retention.hours", 3_600_000), ("log.retention.minutes", 60_000), ("log.retention.ms", 1)):
        setting = broker.get(key)
        if setting is not None and (setting.explicit or key == "log.retention.hours"):
            value = setting.value
            inherited["retention.ms"] = value if value is None or value < 0 else value * factor
    return inherited


def _librdkafka_producer_adjustments(s: dict[str, Setting]) -> None:
    """Mirror rd_kafka_conf_finalize() / rd_kafka_topic_conf_finalize() (librdkafka 2.x)."""
    transactional = bool(s["transactional.id"].value)
    idempotence = s["enable.idempotence"]
    if transactional and not idempotence.explicit:
        s["enable.idempotence"] = _derived(idempotence, True, "turned on by transactional.id")
    if s["enable.idempotence"].value:
        mif = s["max.in.flight.requests.per.connection"]
        if not mif.explicit:
            capped = min(mif.value, d.IDEMPOTENT_MAX_IN_FLIGHT)
            s[mif.key] = _derived(mif, capped, "capped to 5 by enable.idempotence")
        if not s["retries"].explicit:
            s["retries"] = _derived(s["retries"], d.INT32_MAX, "default")
        if not s["acks"].explicit:
            s["acks"] = _derived(s["acks"], "all", "set to all by enable.idempotence")
        timeout = s["delivery.timeout.ms"]
        if transactional and not timeout.explicit:
            lowered = s["transaction.timeout.ms"].value
            s[timeout.key] = _derived(timeout, lowered, "lowered to transaction.timeout.ms")
    timeout, linger = s["delivery.timeout.ms"].value, s["linger.ms"]
    if timeout and timeout <= linger.value and not linger.explicit:
        s[linger.key] = _derived(linger, timeout - 0.1, "lowered below message.timeout.ms")


def _java_producer_adjustments(s: dict[str, Setting], version: tuple[int, int, int]) -> None:
    """Mirror ProducerConfig.postProcessAndValidateIdempotenceConfigs and KafkaProducer."""
    idempotence = s["enable.idempotence"]
    if d.java_idempotence_opt_in(version):
        _java_opt_in_idempotence_adjustments(s, version)
    elif not idempotence.explicit and idempotence.value:
        reason = ""
        if s["acks"].value != "all":
            reason = f"acks={s['acks'].shown}"
        elif s["retries"].value == 0:
            reason = "retries=0"
        elif s["max.in.flight.requests.per.connection"].value > d.IDEMPOTENT_MAX_IN_FLIGHT and version < (4, 0, 0):
            reason = f"max.in.flight.requests.per.connection={s['max.in.flight.requests.per.connection'].shown}"
        if reason:
            s["enable.idempotence"] = _derived(
                idempotence, False, f"the default true is silently turned off by {reason}"
            )
    timeout = s["delivery.timeout.ms"]
    if not d.java_has_delivery_timeout(version):
        if timeout.explicit:  # a key the client does not know: it warns and runs without it
            s[timeout.key] = Setting(
                key=timeout.key,
                name=timeout.name,
                value=None,
                shown=timeout.shown,
                source="explicit",
                note="ignored: not a config of the Java producer before 2.1",
            )
        return
    floor = s["linger.ms"].value + s["request.timeout.ms"].value
    if not timeout.explicit and timeout.value < floor:
        s[timeout.key] = _derived(timeout, floor, "raised to linger.ms + request.timeout.ms")


def _java_opt_in_idempotence_adjustments(s: dict[str, Setting], version: tuple[int, int, int]) -> None:
    """Java before 3.0.1, and 3.1.0: idempotence is on when asked for, acks follows it.

    ProducerConfig.idempotenceEnabled() is userConfiguredTransactions ||
    (userConfiguredIdempotence && enable.idempotence): a transactional.id turns it on unless
    enable.idempotence is explicitly false (then the producer refuses to start, P104). With
    idempotence on, an unset acks is overridden to all ("Overriding the default acks to all
    since idempotence is enabled"); an explicit other value refuses to start (P101). Before
    2.1, whose retries default is 0, an unset retries is overridden too (KafkaProducer.
    configureRetries in 0.11 to 2.0: "Overriding the default retries config to the recommended
    value of 2147483647 since the idempotent producer is enabled").
    """
    idempotence = s["enable.idempotence"]
    if s["transactional.id"].value and not idempotence.explicit:
        s["enable.idempotence"] = _derived(idempotence, True, "turned on by transactional.id")
    if s["enable.idempotence"].value and not s["acks"].explicit:
        s["acks"] = _derived(s["acks"], "all", "set to all by enable.idempotence")
    retries = s["retries"]
    if s["enable.idempotence"].value and not retries.explicit and not d.java_has_delivery_timeout(version):
        s["retries"] = _derived(retries, d.INT32_MAX, "set to 2147483647 by enable.idempotence")
