"""Lint one config against a declared delivery guarantee.

    results = lint({"acks": "1"}, client="librdkafka", kind="producer", guarantee="at-least-once")

Each rule looks at the values the client will really run with: an unset key takes that
client's default (librdkafka and the Java client differ: see defaults.py), and each result
says whether the value was set ("explicit") or came from the default ("default").
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
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
    "exit_code",
    "lint",
    "lint_text",
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
    given = as_config(config if config is not None else context.broker_configs, source=source)
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
        explicit = read_explicit(parsed, client=key_client, source=parsed.source, lines=parsed.lines)
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


def lint_text(
    text: str,
    *,
    fmt: str,
    client: str,
    guarantee: str,
    kind: str | None = None,
    context: LintContext | None = None,
    source: str = "config",
) -> list[LintResult]:
    """Parse pasted text (json | properties | spring-yaml) and lint every config in it.

    JSON and .properties hold one config and need ``kind``; Spring Boot's YAML or
    .properties (spring.kafka.* keys) holds up to three (producer, consumer, streams), all
    linted unless ``kind`` picks one.
    """
    if fmt == "json" and kind is None:
        raise _missing_kind(source)
    configs = parse_text(text, fmt=fmt, source=source, kind=kind)
    if kind is None and any(config.framework != d.SPRING_KAFKA for config in configs.values()):
        raise _missing_kind(source)  # a client's own .properties
    results: list[LintResult] = []
    for section, config in configs.items():
        # Spring Boot configures the Java client, whatever --client says
        section_client = "java" if config.framework == d.SPRING_KAFKA else client
        results.extend(lint(config, client=section_client, kind=section, guarantee=guarantee, context=context))
    return results


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
