"""Lint a running cluster: its brokers' settings and its topics' (dynamic ones included)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

from auditor.lint.engine.errors import LintInputError
from auditor.lint.engine.linter import lint
from auditor.lint.engine.terms import LintContext, LintResult, Overtaken


def _described(admin: AdminClient, resources: list[ConfigResource], timeout: float) -> dict[str, dict[str, Any]]:
    """name → {key: ConfigEntry} for each resource."""
    if not resources:
        return {}
    # librdkafka accepts one BROKER resource per DescribeConfigs call (topics can share one)
    topics = [r for r in resources if r.restype != ResourceType.BROKER]
    batches = [[r] for r in resources if r.restype == ResourceType.BROKER] + ([topics] if topics else [])
    described: dict[str, dict[str, Any]] = {}
    for batch in batches:
        futures = admin.describe_configs(batch, request_timeout=timeout)
        described.update({resource.name: future.result(timeout=timeout) for resource, future in futures.items()})
    return described


def _set_values(entries: Mapping[str, Any], sources: Iterable[ConfigSource]) -> dict[str, Any]:
    wanted = {source.value for source in sources}
    return {name: entry.value for name, entry in entries.items() if entry.value is not None and entry.source in wanted}


_BROKER_SET = (
    ConfigSource.STATIC_BROKER_CONFIG,
    ConfigSource.DYNAMIC_BROKER_CONFIG,
    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
)


def _merge_broker_results(per_broker: dict[int, list[LintResult]]) -> list[LintResult]:
    """One result per finding shared by several brokers, naming all of them."""
    merged: dict[tuple[Any, ...], tuple[LintResult, list[int]]] = {}
    for broker_id in sorted(per_broker):
        for result in per_broker[broker_id]:
            key = (result.rule, result.config, str(result.value), result.source, result.message)
            if key in merged:
                merged[key][1].append(broker_id)
            else:
                merged[key] = (result, [broker_id])
    out: list[LintResult] = []
    for result, ids in merged.values():
        label = "broker " if len(ids) == 1 else "brokers "
        out.append(_with_subject(result, label + ", ".join(str(i) for i in ids)))
    return out


def _with_subject(result: LintResult, subject: str) -> LintResult:
    values = result.as_dict()
    values["subject"] = subject
    return LintResult(**values)


def lint_live_cluster(
    admin: AdminClient,
    guarantee: str,
    topics: Iterable[str] | None = None,
    consumer_lag_seconds: float | Mapping[str, float] | None = None,
    *,
    overtaken: Mapping[str, Sequence[Overtaken]] | None = None,
    item_keys: Mapping[str, str] | None = None,
    timeout: float = 15.0,
) -> list[LintResult]:
    """Lint every broker and the given topics (default: all but internal `__*` topics).

    Broker settings are those set in server.properties or dynamically; topic settings are
    the topic's own overrides, the rest inherit the brokers' values (as the broker does).
    The replication factor is read from the partitions' replica lists (the smallest one).
    ``consumer_lag_seconds`` (one number, or per topic) enables the retention-vs-lag rule, and
    ``overtaken`` (per topic, groups whose committed offset the log start passed) gives it proof.
    ``item_keys`` (per topic, the bindings' record_key where it is not the record key) enables
    the compaction rule.
    """
    metadata = admin.list_topics(timeout=timeout)
    broker_ids = sorted(metadata.brokers)
    broker_entries = _described(admin, [ConfigResource(ResourceType.BROKER, str(i)) for i in broker_ids], timeout)
    if topics is None:
        names = sorted(name for name in metadata.topics if not name.startswith("__"))
    else:
        names = list(topics)
        missing = [name for name in names if name not in metadata.topics]
        if missing:
            raise LintInputError(f"no such topic(s) in the cluster: {', '.join(missing)}", source="topics")
    topic_entries = _described(admin, [ConfigResource(ResourceType.TOPIC, name) for name in names], timeout)

    broker_configs = {i: _set_values(broker_entries[str(i)], _BROKER_SET) for i in broker_ids}
    topic_configs: dict[str, dict[str, Any]] = {}
    for name in names:
        config = _set_values(topic_entries[name], (ConfigSource.DYNAMIC_TOPIC_CONFIG,))
        partitions = metadata.topics[name].partitions.values()
        if partitions:
            config["replication.factor"] = min(len(p.replicas) for p in partitions)
        topic_configs[name] = config
    retention = {
        name: {"retention.ms": entries["retention.ms"].value}
        for name, entries in topic_entries.items()
        if "retention.ms" in entries
    }

    first_broker = broker_configs[broker_ids[0]] if broker_ids else {}
    results: list[LintResult] = []
    per_broker: dict[int, list[LintResult]] = {}
    for broker_id in broker_ids:
        context = LintContext(broker_configs=broker_configs[broker_id], topic_configs=retention)
        per_broker[broker_id] = lint(
            broker_configs[broker_id], client="java", kind="broker", guarantee=guarantee, context=context
        )
    results.extend(_merge_broker_results(per_broker))
    for name in names:
        context = LintContext(
            broker_configs=first_broker,
            consumer_lag_seconds=consumer_lag_seconds,
            overtaken=overtaken or {},
            item_keys=item_keys or {},
        )
        results.extend(
            lint(topic_configs[name], client="java", kind="topic", guarantee=guarantee, context=context, subject=name)
        )
    return results
