"""Lint one config against a declared delivery guarantee.

    results = lint({"acks": "1"}, client="librdkafka", kind="producer", guarantee="at-least-once")

Each rule looks at the values the client will really run with: an unset key takes that
client's default (librdkafka and the Java client differ: see defaults.py), and each result
says whether the value was set ("explicit") or came from the default ("default").
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from auditor.lint.engine import defaults as d
from auditor.lint.engine.catalog import RULES
from auditor.lint.engine.effective import effective_settings, read_explicit
from auditor.lint.engine.errors import LintInputError
from auditor.lint.engine.masking import MASK, is_secret_key, mask_text, mask_value
from auditor.lint.engine.parsers import as_config, parse_text
from auditor.lint.engine.terms import Finding, LintContext, LintResult, Rule, Setting, Subject
from auditor.vocabulary import GUARANTEES

__all__ = [
    "TextLint",
    "client_version_option",
    "exit_code",
    "java_version_label",
    "lint",
    "lint_text",
    "lint_text_described",
    "reported_java_client_version",
    "results_as_dicts",
    "results_to_json",
]

_GUARANTEE_ALIASES = {"amo": d.AT_MOST_ONCE, "alo": d.AT_LEAST_ONCE, "eos": d.EXACTLY_ONCE}


def _choice(option: str, value: Any, choices: Sequence[str]) -> str:
    text = str(value).strip().lower() if value is not None else ""
    if option == "guarantee":
        text = _GUARANTEE_ALIASES.get(text, text.replace("_", "-"))
    if text not in choices:
        raise LintInputError(f"expected one of {', '.join(choices)}, got {value!r}", source=f"--{option}")
    return text


_CLIENT_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
# A vendor's build of an Apache Kafka release names the release first: Red Hat's AMQ Streams
# "3.7.0.redhat-00007", a snapshot "3.9.0-SNAPSHOT" (AppInfoParser.getVersion() reports the jar's
# version as built). Only a full MAJOR.MINOR.PATCH then a separator is read so: "4.x-custom" is not.
_VENDOR_BUILD = re.compile(r"(\d+)\.(\d+)\.(\d+)[-.+_~][0-9A-Za-z][0-9A-Za-z.+_~-]*")
# Apache Kafka's clients are 0.x to 4.x; Confluent Platform numbers its own (7.6.0-ccs ships 3.6)
_LAST_KAFKA_MAJOR = 4
CLIENT_VERSION_SOURCE = "client version"


def client_version_option(text: str | None) -> str | None:
    """A Java client version as a user gives it (`--client-version`, the paste form): "3.9.2" or
    "3.9", stripped, or a Confluent Platform build's "7.6.0-ccs" (or "-ce") as the Apache Kafka
    version it ships ("3.6.0", reported_java_client_version), or another vendor's build of an
    Apache Kafka release as that release ("3.7.0.redhat-00007", "3.9.0-SNAPSHOT": "3.7.0",
    "3.9.0"); None when not given. Raises LintInputError for anything else."""
    if text is None or not text.strip():
        return None
    given = text.strip()
    if _CONFLUENT_VERSION.fullmatch(given):
        return reported_java_client_version(given)
    vendor = _VENDOR_BUILD.fullmatch(given)
    if vendor is not None and int(vendor.group(1)) <= _LAST_KAFKA_MAJOR:
        return ".".join(vendor.group(1, 2, 3))
    match = _CLIENT_VERSION.fullmatch(given)
    if match is None or int(match.group(1)) > _LAST_KAFKA_MAJOR:
        hint = ""
        if re.match(r"[5-9]\.\d", given) or re.search(r"-(ccs|ce)$", given):
            hint = (
                " (a Confluent Platform version? give it as its jar names it, 7.6.0-ccs, or the Apache Kafka "
                "version it ships: 7.6.x is 3.6)"
            )
        raise LintInputError(
            f"expected the Java client's Apache Kafka version such as 3.9.2 or 4.0, got {given!r}{hint}",
            source=CLIENT_VERSION_SOURCE,
        )
    return given


# A Confluent Platform build of kafka-clients reports CP's version (AppInfoParser.getVersion():
# "7.6.0-ccs", "-ce" for the enterprise build), and each CP minor ships one Apache Kafka minor.
# Confluent's "Supported Versions and Interoperability", table "Confluent Platform and Apache
# Kafka compatibility" (docs.confluent.io/platform/current/installation/versions-interoperability.html;
# its 5.5.15 edition under docs.confluent.io/legacy/ has 5.0.x to 5.5.x ship 2.0.x to 2.5.x):
# 7.0.x ships 3.0.x, ... 7.9.x 3.9.x, 8.0.x 4.0.x, 8.1.x 4.1.x.
_CONFLUENT_TO_KAFKA = {(7, minor): (3, minor) for minor in range(10)} | {(8, 0): (4, 0), (8, 1): (4, 1)}
_CONFLUENT_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)-(?:ccs|ce)")


def reported_java_client_version(reported: str) -> str:
    """The Apache Kafka version of a Java client as the client reports it (the ``library_version``
    of its `_audit.clients` record): "3.9.2" as client_version_option() reads it, a Confluent
    Platform build's "7.6.0-ccs" or "7.6.0-ce" as the Kafka version it ships ("3.6.0"). Raises
    LintInputError for a version it cannot read or map."""
    given = reported.strip()
    confluent = _CONFLUENT_VERSION.fullmatch(given)
    if confluent is not None:
        kafka = _CONFLUENT_TO_KAFKA.get((int(confluent.group(1)), int(confluent.group(2))))
        if kafka is None:
            raise LintInputError(
                f"{given!r} is a Confluent Platform version whose Apache Kafka version is not known "
                "(known: 7.0 to 8.1)",
                source=CLIENT_VERSION_SOURCE,
            )
        # CP's patch numbers are its own (CP 7.4 went on to 7.4.11, Kafka 3.4 stopped at 3.4.1). The
        # rules tell patches apart only at 3.0.1 and 3.1.1 (KAFKA-13598: idempotence by default),
        # so a CP patch release is taken for the Kafka minor's first patch: at worst a miss, never an
        # alarm, for a CP patch that predates the fix
        patch = 0 if int(confluent.group(3)) == 0 else 1
        return f"{kafka[0]}.{kafka[1]}.{patch}"
    version = client_version_option(given)
    if version is None:
        raise LintInputError("expected the Java client's version, got none", source=CLIENT_VERSION_SOURCE)
    return version


def java_version_label(client_version: str | None) -> str:
    """The Java client version a lint assumed, for people: "java 3.9.2" or "java 4.0 (default)"."""
    if client_version is None:
        return f"java {d.DEFAULT_JAVA_VERSION_TEXT} (default)"
    return f"java {client_version}"


def _java_version(context: LintContext) -> tuple[int, int, int]:
    if context.client_version is None:
        return d.DEFAULT_JAVA_VERSION
    version = d.parse_version(context.client_version)
    if version is None:
        raise LintInputError(
            f"expected a version such as 3.9.2, got {context.client_version!r}", source="context.client_version"
        )
    return version


def broker_settings(context: LintContext, config: Mapping[str, Any] | None = None) -> dict[str, Setting]:
    """Effective broker settings: the linted broker config, else the context's, over the defaults."""
    source = "broker config" if config is not None else "context.broker_configs"
    given = as_config(config if config is not None else context.broker_configs or {}, source=source)
    explicit = read_explicit(given, client="java", source=given.source, lines=given.lines)
    return effective_settings(explicit, client="java", kind="broker", java_version=d.DEFAULT_JAVA_VERSION)


def lint(
    config: Mapping[str, Any],
    *,
    client: str,
    kind: str,
    guarantee: str,
    context: LintContext | None = None,
    subject: str | None = None,
) -> list[LintResult]:
    """Lint one producer, consumer, topic, broker or Streams config.

    ``config`` is a mapping of Kafka keys (a confluent-kafka dict, or a ParsedConfig from
    parsers.py); ``client`` is "librdkafka" or "java" and decides the defaults and aliases
    (topic and broker configs are the same for both). Only rules protecting ``guarantee``
    run. ``subject`` names the object in the results (a topic name, "broker 1").
    """
    client = _choice("client", client, d.CLIENTS)
    kind = _choice("kind", kind, d.KINDS)
    guarantee = _choice("guarantee", guarantee, GUARANTEES)
    context = context or LintContext()
    parsed = as_config(config, source=getattr(config, "source", "config"))
    java_version = _java_version(context) if client == "java" or kind == "streams" else d.DEFAULT_JAVA_VERSION
    key_client = client if kind in ("producer", "consumer") else "java"

    if kind == "broker":
        broker = broker_settings(context, parsed)
        settings = broker
    else:
        explicit = read_explicit(
            parsed, client=key_client, source=parsed.source, lines=parsed.lines, kind=kind, java_version=java_version
        )
        broker = broker_settings(context)
        settings = effective_settings(
            explicit,
            client=key_client,
            kind=kind,
            java_version=java_version,
            broker=broker,
            framework=parsed.framework,
        )
    target = Subject(
        client=client,
        kind=kind,
        guarantee=guarantee,
        name=subject,
        settings=settings,
        broker=broker,
        context=context,
        java_version=java_version,
    )
    secrets = _secret_values(parsed)
    results: list[LintResult] = []
    for rule in RULES:
        if rule.applies_to(client, kind, guarantee):
            results.extend(_result(rule, finding, target, secrets) for finding in rule.check(target))
    return results


def _secret_values(config: Mapping[str, Any]) -> list[str]:
    values = [str(v) for k, v in config.items() if is_secret_key(str(k)) and v is not None and len(str(v)) >= 3]
    return sorted(values, key=len, reverse=True)


def _scrub(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, MASK)
    return mask_text(text)


def _result(rule: Rule, finding: Finding, target: Subject, secrets: list[str]) -> LintResult:
    setting = finding.setting
    value = mask_value(setting.name, setting.shown)
    if isinstance(value, str):
        value = _scrub(value, secrets)
    return LintResult(
        rule=rule.id,
        title=rule.title,
        severity=finding.severity or rule.severity,
        target=target.kind,
        subject=target.name,
        config=setting.name,
        value=value,
        expected=_scrub(finding.expected, secrets),
        message=_scrub(finding.message, secrets),
        guarantee=target.guarantee,
        source=setting.source,
        why=rule.why,
        fix=rule.fix,
    )


@dataclass(frozen=True)
class TextLint:
    """The results of a pasted text, and what the lint took it for."""

    results: list[LintResult]
    client: str  # whose defaults applied: "java" for a Spring Boot config, whatever was asked
    spring: bool  # a Spring Boot config (spring.kafka.*)
    java_version: str | None  # java_version_label(), when a config was linted as Java's; else None
    notes: tuple[str, ...] = ()  # what of the text was not linted (a Spring document for another profile)

    @property
    def linted_as(self) -> str:
        """For headers and summaries: "librdkafka client", "java client, java 3.9.2",
        "Spring Boot's java client, java 4.0 (default)"."""
        who = "Spring Boot's java client" if self.spring else f"{self.client} client"
        return f"{who}, {self.java_version}" if self.java_version else who


def lint_text(
    text: str,
    *,
    fmt: str,
    client: str,
    guarantee: str,
    kind: str | None = None,
    context: LintContext | None = None,
    source: str = "config",
    profiles: Sequence[str] | None = None,
) -> list[LintResult]:
    """Parse pasted text (json | properties | spring-yaml) and lint every config in it.

    JSON and .properties hold one config and need ``kind``; Spring Boot's YAML or
    .properties (spring.kafka.* keys) holds up to three (producer, consumer, streams), all
    linted unless ``kind`` picks one, from the documents that apply with ``profiles`` active
    (default: the file's own spring.profiles.active, else none).
    """
    return lint_text_described(
        text, fmt=fmt, client=client, guarantee=guarantee, kind=kind, context=context, source=source, profiles=profiles
    ).results


def lint_text_described(
    text: str,
    *,
    fmt: str,
    client: str,
    guarantee: str,
    kind: str | None = None,
    context: LintContext | None = None,
    source: str = "config",
    profiles: Sequence[str] | None = None,
) -> TextLint:
    """lint_text(), saying which client and Java version the configs were linted as.

    A ``context.client_version`` is the Java client's: given for a config linted as
    librdkafka's (not Spring Boot, not Kafka Streams) it is an input error, not ignored.
    """
    if fmt == "json" and kind is None:
        raise _missing_kind(source)
    configs = parse_text(text, fmt=fmt, source=source, kind=kind, profiles=profiles)
    if kind is None and any(config.framework != d.SPRING_KAFKA for config in configs.values()):
        raise _missing_kind(source)  # a client's own .properties
    context = context or LintContext()
    spring = any(config.framework == d.SPRING_KAFKA for config in configs.values())
    # Spring Boot configures the Java client, whatever --client says; Kafka Streams is Java's
    java = spring or client == "java" or "streams" in configs
    if context.client_version is not None and not java:
        raise LintInputError(
            f"{context.client_version} is a Java client's version, and this {fmt} config is linted as "
            f"{client}'s: choose the java client, or leave the version out",
            source=CLIENT_VERSION_SOURCE,
        )
    results: list[LintResult] = []
    for section, config in configs.items():
        section_client = "java" if config.framework == d.SPRING_KAFKA else client
        results.extend(lint(config, client=section_client, kind=section, guarantee=guarantee, context=context))
    return TextLint(
        results=results,
        client="java" if spring else client,
        spring=spring,
        java_version=java_version_label(context.client_version) if java else None,
        notes=tuple(dict.fromkeys(note for config in configs.values() for note in config.notes)),
    )


def _missing_kind(source: str) -> LintInputError:
    return LintInputError("expected --kind (producer, consumer, topic, broker or streams)", source=source)


def results_as_dicts(results: Iterable[LintResult]) -> list[dict[str, Any]]:
    return [result.as_dict() for result in results]


def results_to_json(results: Iterable[LintResult]) -> str:
    """`{"results": [...]}` with one object per result (every LintResult field)."""
    return json.dumps({"results": results_as_dicts(results)}, indent=2, default=str)


def exit_code(results: Iterable[LintResult]) -> int:
    """1 when any result is an error, else 0 (warnings and infos do not fail a build)."""
    return 1 if any(result.severity == "error" for result in results) else 0
