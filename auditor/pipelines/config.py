"""The declarative YAML config: parse with line numbers, validate, apply atomically.

`python manage.py audit apply FILE` calls parse_config_file() then apply_config().
Every problem names the file, the line and the field; nothing is written unless the
whole file is valid.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from django.db import transaction
from django.db.models import ProtectedError

from auditor.alerts.config import apply_webhooks, parse_webhooks_section
from auditor.alerts.models import Channel
from auditor.lib.durations import parse_duration
from auditor.lib.identifiers import IdentifierError, validate_identifier, validate_table_name
from auditor.lib.secrets import MissingEnvError, env_refs, is_secret_key, mask_text, mask_url, resolve_env
from auditor.pipelines.models import Binding, Cluster, SourceDatabase, StuckRule
from auditor.vocabulary import GUARANTEES
from spark_jobs.binding import BindingError, check_zone

SECTIONS = ("clusters", "sources", "bindings", "stuck_rules", "webhooks")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")
RECORD_KEY_RE = re.compile(r"key|header:[^\s]+|json:\$(\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\])+")
TOPIC_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")
GUARANTEE_VALUES = list(GUARANTEES)


@dataclass
class Problem:
    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.field}: {self.message}"


class ConfigError(Exception):
    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems


@dataclass
class ParsedConfig:
    clusters: dict[str, dict[str, Any]] = field(default_factory=dict)
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)
    bindings: dict[str, dict[str, Any]] = field(default_factory=dict)
    stuck_rules: dict[str, dict[str, Any]] = field(default_factory=dict)
    webhooks: dict[str, dict[str, Any]] = field(default_factory=dict)
    # applied all the same (refusing them would break files that work today), said in the output
    warnings: list[Problem] = field(default_factory=list)


LITERAL_SECRET = "a secret written in the file (stored as written, shown masked): use a ${ENV} reference"


def _literal_secret(key: str, value: object) -> bool:
    """Whether a cluster setting holds a credential written out rather than a ${ENV} reference:
    a secret key (is_secret_key) with no reference in it, or one whose password=… is literal.
    A `*.location` names a file (ssl.key.location), not the secret itself."""
    if not isinstance(value, str) or not is_secret_key(key) or key.endswith(".location"):
        return False
    return not env_refs(value) or mask_text(value) != value


def _to_python(node: yaml.Node, path: str, lines: dict[str, int]) -> Any:
    """Construct plain Python values from a composed YAML node, remembering each path's line."""
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = yaml.safe_load(yaml.serialize(key_node))
            child = f"{path}.{key}" if path else str(key)
            lines[child] = key_node.start_mark.line + 1
            result[key] = _to_python(value_node, child, lines)
            lines[child] = key_node.start_mark.line + 1
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_to_python(item, f"{path}[{i}]", lines) for i, item in enumerate(node.value)]
    return yaml.safe_load(yaml.serialize(node))


class _Validator:
    def __init__(self, file: str, lines: dict[str, int]) -> None:
        self.file = file
        self.lines = lines
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []

    def _at(self, path: str, message: str) -> Problem:
        line = self.lines.get(path)
        probe = path
        while line is None and "." in probe:
            probe = probe.rsplit(".", 1)[0]
            line = self.lines.get(probe)
        return Problem(self.file, line, path, message)

    def problem(self, path: str, message: str) -> None:
        self.problems.append(self._at(path, message))

    def warning(self, path: str, message: str) -> None:
        """Something applied all the same; names the field, never its value."""
        self.warnings.append(self._at(path, message))

    def mapping(self, value: Any, path: str) -> dict[str, Any] | None:
        if not isinstance(value, dict):
            self.problem(path, f"must be a mapping, got {type(value).__name__}")
            return None
        return value

    def required(self, item: dict[str, Any], key: str, path: str) -> Any:
        if key not in item or item[key] in (None, ""):
            self.problem(path, f"missing required field '{key}'")
            return None
        return item[key]

    def string(self, item: dict[str, Any], key: str, path: str, *, required: bool = True) -> str | None:
        value = self.required(item, key, path) if required else item.get(key)
        if value is None:
            return None
        if not isinstance(value, str | int) or isinstance(value, bool):
            self.problem(f"{path}.{key}", f"must be a string, got {type(value).__name__}")
            return None
        return str(value)

    def unknown_fields(self, item: dict[str, Any], allowed: set[str], path: str) -> None:
        for key in item:
            if key not in allowed:
                self.problem(
                    f"{path}.{key}" if path else str(key),
                    f"unknown field (expected one of: {', '.join(sorted(allowed))})",
                )

    def env(self, value: str, path: str) -> None:
        for name in env_refs(value):
            try:
                resolve_env("${" + name + "}")
            except MissingEnvError as exc:
                self.problem(path, str(exc))

    def identifier(self, value: str | None, path: str, what: str) -> None:
        if value is None:
            return
        try:
            validate_identifier(value, what)
        except IdentifierError as exc:
            self.problem(path, str(exc))

    def duration(self, item: dict[str, Any], key: str, path: str, default: int) -> int:
        if key not in item:
            return default
        try:
            return parse_duration(item[key])
        except ValueError as exc:
            self.problem(f"{path}.{key}", str(exc))
            return default


def parse_config_text(text: str, file: str = "<config>") -> ParsedConfig:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else None
        raise ConfigError(
            [Problem(file, line, "(syntax)", f"not valid YAML: {getattr(exc, 'problem', exc)}")]
        ) from None
    if root is None:
        raise ConfigError([Problem(file, None, "(file)", "the file is empty")])
    lines: dict[str, int] = {}
    data = _to_python(root, "", lines)
    lines["(top level)"] = lines[""]
    v = _Validator(file, lines)
    top = v.mapping(data, "(top level)")
    if top is None:
        raise ConfigError(v.problems)
    v.unknown_fields(top, set(SECTIONS), "")
    parsed = ParsedConfig()
    sections = {s: (v.mapping(top.get(s) or {}, s) or {}) for s in SECTIONS if s != "webhooks"}

    for name, item in sections["clusters"].items():
        path = f"clusters.{name}"
        if _bad_name(v, name, path) or (item := v.mapping(item, path)) is None:
            continue
        v.unknown_fields(item, {"bootstrap_servers", "config"}, path)
        servers = v.string(item, "bootstrap_servers", path)
        if servers:
            v.env(servers, f"{path}.bootstrap_servers")
        config = item.get("config") or {}
        if v.mapping(config, f"{path}.config") is None:
            config = {}
        for key, value in config.items():
            if isinstance(value, str):
                v.env(value, f"{path}.config.{key}")
            if _literal_secret(str(key), value):
                v.warning(f"{path}.config.{key}", LITERAL_SECRET)
        parsed.clusters[name] = {"bootstrap_servers": servers, "config": config}

    for name, item in sections["sources"].items():
        path = f"sources.{name}"
        if _bad_name(v, name, path) or (item := v.mapping(item, path)) is None:
            continue
        v.unknown_fields(item, {"url"}, path)
        url = v.string(item, "url", path)
        if url:
            v.env(url, f"{path}.url")
            if mask_url(url) != url:
                v.warning(f"{path}.url", LITERAL_SECRET.replace("a secret", "a password"))
            try:
                resolved = resolve_env(url)
            except MissingEnvError:
                resolved = None  # already reported by v.env
            if resolved is not None and not resolved.startswith(("postgresql://", "postgres://")):
                v.problem(f"{path}.url", "must be a postgresql:// URL (after ${ENV} substitution)")
        parsed.sources[name] = {"url": url}

    known_clusters = set(parsed.clusters) | set(Cluster.objects.values_list("name", flat=True))
    known_sources = set(parsed.sources) | set(SourceDatabase.objects.values_list("name", flat=True))
    binding_fields = {
        "cluster",
        "topic",
        "source",
        "table",
        "key_column",
        "record_key",
        "created_column",
        "timestamp_zone",
        "grace",
        "guarantee",
        "consumer_groups",
        "schedule",
        "producer_ledger_topic",
        "consumer_ledger_topic",
    }
    for name, item in sections["bindings"].items():
        path = f"bindings.{name}"
        if _bad_name(v, name, path) or (item := v.mapping(item, path)) is None:
            continue
        v.unknown_fields(item, binding_fields, path)
        cluster = v.string(item, "cluster", path)
        if cluster and cluster not in known_clusters:
            v.problem(f"{path}.cluster", f"unknown cluster '{cluster}' (not in clusters: nor in the database)")
        source = v.string(item, "source", path)
        if source and source not in known_sources:
            v.problem(f"{path}.source", f"unknown source '{source}' (not in sources: nor in the database)")
        topic = v.string(item, "topic", path)
        if topic and not TOPIC_RE.fullmatch(topic):
            v.problem(f"{path}.topic", f"'{topic}' is not a valid Kafka topic name")
        table = v.string(item, "table", path)
        if table:
            try:
                validate_table_name(table)
            except IdentifierError as exc:
                v.problem(f"{path}.table", str(exc))
        key_column = v.string(item, "key_column", path)
        v.identifier(key_column, f"{path}.key_column", "key_column")
        created = v.string(item, "created_column", path, required=False)
        v.identifier(created, f"{path}.created_column", "created_column")
        zone = v.string(item, "timestamp_zone", path, required=False) or ""
        if zone:
            try:
                check_zone(zone, f"{path}.timestamp_zone")
            except BindingError as exc:
                v.problem(f"{path}.timestamp_zone", str(exc).split(": ", 1)[1])
        record_key = v.string(item, "record_key", path, required=False) or "key"
        if not RECORD_KEY_RE.fullmatch(record_key):
            v.problem(
                f"{path}.record_key",
                f"'{record_key}' must be key, header:<name> or json:<path> such as json:$.ticket_id",
            )
        guarantee = v.string(item, "guarantee", path, required=False) or "at-least-once"
        if guarantee not in GUARANTEE_VALUES:
            v.problem(f"{path}.guarantee", f"'{guarantee}' must be one of {', '.join(GUARANTEE_VALUES)}")
        groups = item.get("consumer_groups") or []
        if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
            v.problem(f"{path}.consumer_groups", "must be a list of consumer group ids")
            groups = []
        ledgers = {}
        for field_name in ("producer_ledger_topic", "consumer_ledger_topic"):
            ledger = v.string(item, field_name, path, required=False) or ""
            if ledger and not TOPIC_RE.fullmatch(ledger):
                v.problem(f"{path}.{field_name}", f"'{ledger}' is not a valid Kafka topic name")
            ledgers[field_name] = ledger
        parsed.bindings[name] = {
            "cluster": cluster,
            "source": source,
            "topic": topic,
            "table": table,
            "key_column": key_column,
            "record_key": record_key,
            "created_column": created or "",
            "timestamp_zone": zone,
            "grace_seconds": v.duration(item, "grace", path, 120),
            "guarantee": guarantee,
            "consumer_groups": groups,
            "schedule_seconds": v.duration(item, "schedule", path, 300),
            **ledgers,
        }

    known_bindings = set(parsed.bindings) | set(Binding.objects.values_list("name", flat=True))
    rule_fields = {"binding", "status_column", "stuck_values", "age_column", "older_than", "schedule"}
    for name, item in sections["stuck_rules"].items():
        path = f"stuck_rules.{name}"
        if _bad_name(v, name, path) or (item := v.mapping(item, path)) is None:
            continue
        v.unknown_fields(item, rule_fields, path)
        binding = v.string(item, "binding", path)
        if binding and binding not in known_bindings:
            v.problem(f"{path}.binding", f"unknown binding '{binding}'")
        status_column = v.string(item, "status_column", path)
        v.identifier(status_column, f"{path}.status_column", "status_column")
        age_column = v.string(item, "age_column", path)
        v.identifier(age_column, f"{path}.age_column", "age_column")
        values = v.required(item, "stuck_values", path)
        if values is not None and (not isinstance(values, list) or not values):
            v.problem(f"{path}.stuck_values", "must be a non-empty list of status values")
            values = None
        parsed.stuck_rules[name] = {
            "binding": binding,
            "status_column": status_column,
            "age_column": age_column,
            "stuck_values": [str(x) for x in values or []],
            "older_than_seconds": v.duration(item, "older_than", path, 600),
            "schedule_seconds": v.duration(item, "schedule", path, 300),
        }

    if top.get("webhooks"):
        parsed.webhooks = parse_webhooks_section(top["webhooks"], v.problem, known_bindings)

    if v.problems:
        raise ConfigError(v.problems)
    parsed.warnings = v.warnings
    return parsed


def _bad_name(v: _Validator, name: object, path: str) -> bool:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        v.problem(path, f"name {name!r} must be letters, digits, '-' or '_'")
        return True
    return False


def parse_config_file(path: str | Path) -> ParsedConfig:
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([Problem(file, None, "(file)", "no such file")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([Problem(file, None, "(file)", f"cannot be read: {exc}")]) from None
    return parse_config_text(text, file)


@dataclass
class ApplyResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    dry_run: bool = False
    warnings: list[Problem] = field(default_factory=list)


def config_file_name(path: str | Path) -> str:
    """How objects remember the file that declares them: its absolute path."""
    return str(Path(path).resolve())


def _prunable() -> list[tuple[str, type[StuckRule | Channel | Binding | SourceDatabase | Cluster], str]]:
    """(label, model, section) in the order they can be deleted: dependents first."""
    return [
        ("stuck rule", StuckRule, "stuck_rules"),
        ("webhook", Channel, "webhooks"),
        ("binding", Binding, "bindings"),
        ("source", SourceDatabase, "sources"),
        ("cluster", Cluster, "clusters"),
    ]


def _prune(parsed: ParsedConfig, config_file: str, result: ApplyResult) -> None:
    """Delete what ``config_file`` declared before and declares no more (inside apply's transaction)."""
    problems = []
    for label, model, section in _prunable():
        declared = set(getattr(parsed, section))
        for obj in model.objects.filter(config_file=config_file).exclude(name__in=declared).order_by("name"):
            # A binding takes its stuck rules with it, whoever made them: say so.
            dependents = (
                [f"stuck rule {r.name} (with binding {obj.name})" for r in StuckRule.objects.filter(binding=obj)]
                if isinstance(obj, Binding)
                else []
            )
            try:
                with transaction.atomic():
                    obj.delete()
            except ProtectedError as exc:
                users = ", ".join(sorted(f"{o._meta.verbose_name} {o}" for o in exc.protected_objects))
                problems.append(
                    Problem(config_file, None, f"{section}.{obj.name}", f"cannot be removed: still used by {users}")
                )
                continue
            result.removed.extend([*dependents, f"{label} {obj.name}"])
    if problems:
        raise ConfigError(problems)


def apply_config(
    parsed: ParsedConfig, *, config_file: str = "", prune: bool = False, dry_run: bool = False
) -> ApplyResult:
    """Create or update every object by name, all in one transaction.

    ``config_file`` (config_file_name()) is recorded on every object the file declares.
    With ``prune``, objects recorded as declared by that file that it no longer declares are
    deleted in the same transaction (objects made in the UI or by another file are kept).
    With ``dry_run`` everything is done and then rolled back: the result says what would be.
    """
    if prune and not config_file:
        raise ValueError("pruning needs the config file's name")
    result = ApplyResult(dry_run=dry_run, warnings=list(parsed.warnings))
    owned = {"config_file": config_file} if config_file else {}

    def record(kind: str, name: str, created: bool) -> None:
        (result.created if created else result.updated).append(f"{kind} {name}")

    with transaction.atomic():
        for name, values in parsed.clusters.items():
            _, created = Cluster.objects.update_or_create(name=name, defaults=values | owned)
            record("cluster", name, created)
        for name, values in parsed.sources.items():
            _, created = SourceDatabase.objects.update_or_create(name=name, defaults=values | owned)
            record("source", name, created)
        for name, values in parsed.bindings.items():
            defaults = dict(values) | owned
            defaults["cluster"] = Cluster.objects.get(name=values["cluster"])
            defaults["source"] = SourceDatabase.objects.get(name=values["source"])
            _, created = Binding.objects.update_or_create(name=name, defaults=defaults)
            record("binding", name, created)
        for name, values in parsed.stuck_rules.items():
            defaults = dict(values) | owned
            defaults["binding"] = Binding.objects.get(name=values["binding"])
            _, created = StuckRule.objects.update_or_create(name=name, defaults=defaults)
            record("stuck rule", name, created)
        if parsed.webhooks:
            for name, created in apply_webhooks(parsed.webhooks, config_file):
                record("webhook", name, created)
        if prune:
            _prune(parsed, config_file, result)
        if dry_run:
            transaction.set_rollback(True)
    return result
