"""Reading pasted configs: librdkafka dicts or JSON, Java .properties, Spring Boot YAML or .properties.

Each parser returns ParsedConfig objects: a plain dict of key → value that also remembers
the input's name and the line of each key, so a bad value later on can be reported as
"app.properties: line 7: linger.ms: expected a number". No error message quotes a line of
the input: a line may hold a password.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from auditor.lint.engine.defaults import KEY_TYPES, SPRING_ACK_MODE, SPRING_KAFKA
from auditor.lint.engine.errors import LintInputError
from auditor.lint.engine.masking import MASK, mask_value
from auditor.probes.config import TOPIC_CONFIG, applied_config

FORMATS = ("json", "properties", "spring-yaml")
Scalar = str | int | float | bool | None


class ParsedConfig(dict[str, Any]):
    """A config mapping that remembers where it came from (input name, line of each key).

    ``framework`` names what creates the client from it (``SPRING_KAFKA`` for Spring Boot
    YAML): the lint then applies the values that framework sets for unset keys. ``notes``
    say what of the input was left out (a Spring document for a profile not active).
    """

    def __init__(
        self,
        values: Mapping[str, Any] | None = None,
        *,
        source: str = "config",
        lines: Mapping[str, int] | None = None,
        framework: str | None = None,
        notes: Sequence[str] = (),
    ) -> None:
        super().__init__(values or {})
        self.source = source
        self.lines: dict[str, int] = dict(lines or {})
        self.framework = framework
        self.notes = tuple(notes)  # what of the input was not linted, and why


# --- librdkafka: a dict or JSON text --------------------------------------------------------


def parse_librdkafka(config: Mapping[str, Any] | str, *, source: str = "config") -> ParsedConfig:
    """A confluent-kafka config dict, or its JSON text. `default.topic.config` is flattened."""
    lines: dict[str, int] = {}
    if isinstance(config, str):
        try:
            loaded = json.loads(config)
        except json.JSONDecodeError as exc:
            raise LintInputError(
                f"invalid JSON at column {exc.colno} ({exc.msg}); expected an object of config keys",
                source=source,
                line=exc.lineno,
            ) from None
        if not isinstance(loaded, dict):
            raise LintInputError(f"expected a JSON object of config keys, got {type(loaded).__name__}", source=source)
        lines = _json_key_lines(config, loaded)
        config = loaded
    return as_config(config, source=source, lines=lines)


def _json_key_lines(text: str, loaded: Mapping[str, Any]) -> dict[str, int]:
    lines: dict[str, int] = {}
    for key in loaded:
        at = text.find(json.dumps(key))
        if at >= 0:
            lines[key] = text.count("\n", 0, at) + 1
    return lines


def as_config(config: Any, *, source: str = "config", lines: Mapping[str, int] | None = None) -> ParsedConfig:
    """Check that ``config`` maps keys to scalars; librdkafka's nested topic config is flattened.

    The nested `default.topic.config` wins over the top level wherever it is written:
    confluent-kafka applies it after every other key, so {'default.topic.config': {'acks': 1},
    'acks': 'all'} runs with acks=1 (confluent-kafka 2.16 refuses it with enable.idempotence,
    "`acks` must be set to `all`"). Its keys go last, where read_explicit lets them win, aliases too.
    """
    if isinstance(config, ParsedConfig):
        return config
    if not isinstance(config, Mapping):
        raise LintInputError(f"expected a mapping of config keys to values, got {type(config).__name__}", source=source)
    checked: dict[str, Any] = {}
    for key, value in config.items():
        key = str(key)
        if isinstance(value, Mapping) and key == TOPIC_CONFIG:
            checked[key] = as_config(value, source=source)
            continue
        if not isinstance(value, Scalar):
            raise LintInputError(
                f"{key}: expected a string, number or boolean, got {type(value).__name__}",
                source=source,
                line=(lines or {}).get(key),
            )
        checked[key] = value
    # The probes read the config they wrap the same way (applied_config, stop 72).
    return ParsedConfig(applied_config(checked), source=source, lines=lines)


# --- Java .properties ------------------------------------------------------------------------

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
# key (with backslash escapes) ending at the first unescaped '=', ':' or blank; then the separator
_PROPERTY_KEY = re.compile(r"((?:\\.|[^=:\s\\])*)\s*([=:])?")


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first physical line number, logical line) with backslash continuations joined."""
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.lstrip() if pending else raw
        if not pending:
            start = number
            stripped = line.lstrip()
            if not stripped or stripped[0] in "#!":
                continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending.append(line[:-1])
            continue
        pending.append(line)
        yield start, "".join(pending)
        pending = []
    if pending:
        yield start, "".join(pending)


def _unescape(text: str, *, source: str, line: int) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 >= len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise LintInputError("malformed \\uXXXX escape: expected 4 hex digits", source=source, line=line)
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def parse_properties(text: str, *, source: str = "config.properties") -> ParsedConfig:
    """Java .properties text. Stricter than java.util.Properties in one way: a line needs
    '=' or ':' between key and value, so a pasted fragment ("acks all") is caught."""
    values: dict[str, str] = {}
    lines: dict[str, int] = {}
    for number, line in _logical_lines(text):
        body = line.lstrip()
        match = _PROPERTY_KEY.match(body)  # always matches, possibly an empty key
        raw_key = match.group(1) if match else ""
        if match is None or (match.group(2) is None and body[match.end() :].strip()):
            raise LintInputError(
                "expected 'key=value' (or 'key: value'); found no '=' or ':'", source=source, line=number
            )
        if not raw_key:
            raise LintInputError("expected 'key=value'; the key is empty", source=source, line=number)
        key = _unescape(raw_key, source=source, line=number)
        value = _unescape(body[match.end() :].lstrip(), source=source, line=number)
        values[key] = value
        lines[key] = number
    return ParsedConfig(values, source=source, lines=lines)


# --- Spring Boot YAML --------------------------------------------------------------------------

_DURATION = re.compile(r"(?P<n>-?\d+)\s*(?P<unit>ns|us|ms|s|m|h|d)?", re.I)
_DURATION_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_ISO_DURATION = re.compile(r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?", re.I)

# Spring Boot's property (relaxed, kebab-case) -> Kafka key, and whether it is a Duration.
SPRING_PRODUCER: Mapping[str, tuple[str, bool]] = {
    "acks": ("acks", False),
    "retries": ("retries", False),
    "transaction-id-prefix": ("transactional.id", False),
    "batch-size": ("batch.size", False),
    "buffer-memory": ("buffer.memory", False),
    "compression-type": ("compression.type", False),
    "client-id": ("client.id", False),
    "bootstrap-servers": ("bootstrap.servers", False),
    "key-serializer": ("key.serializer", False),
    "value-serializer": ("value.serializer", False),
}
SPRING_CONSUMER: Mapping[str, tuple[str, bool]] = {
    "enable-auto-commit": ("enable.auto.commit", False),
    "auto-commit-interval": ("auto.commit.interval.ms", True),
    "auto-offset-reset": ("auto.offset.reset", False),
    "isolation-level": ("isolation.level", False),
    "max-poll-records": ("max.poll.records", False),
    "max-poll-interval": ("max.poll.interval.ms", True),
    "heartbeat-interval": ("heartbeat.interval.ms", True),
    "fetch-max-wait": ("fetch.max.wait.ms", True),
    "fetch-min-size": ("fetch.min.bytes", False),
    "group-id": ("group.id", False),
    "client-id": ("client.id", False),
    "bootstrap-servers": ("bootstrap.servers", False),
    "key-deserializer": ("key.deserializer", False),
    "value-deserializer": ("value.deserializer", False),
}
SPRING_STREAMS: Mapping[str, tuple[str, bool]] = {
    "application-id": ("application.id", False),
    "replication-factor": ("replication.factor", False),
    "state-dir": ("state.dir", False),
    "client-id": ("client.id", False),
    "bootstrap-servers": ("bootstrap.servers", False),
}
SPRING_SECTIONS: Mapping[str, Mapping[str, tuple[str, bool]]] = {
    "producer": SPRING_PRODUCER,
    "consumer": SPRING_CONSUMER,
    "streams": SPRING_STREAMS,
}
# spring.kafka.listener.* configures the listener containers, which run the consumers and
# commit their offsets: linted with the consumer, under the property's own name.
SPRING_LISTENER: Mapping[str, tuple[str, bool]] = {
    "ack-mode": (SPRING_ACK_MODE, False),
}


def _kebab(name: str) -> str:
    """Spring's relaxed binding: enableAutoCommit, enable_auto_commit -> enable-auto-commit."""
    name = re.sub(r"(?<=[a-z0-9])([A-Z])", r"-\1", name)
    return name.replace("_", "-").lower()


def spring_duration_ms(value: Any, *, key: str, source: str, line: int | None) -> int:
    """A Spring Duration (plain number = ms, 5s, 500ms, PT5S) in milliseconds."""
    if isinstance(value, bool):
        value = str(value)
    if isinstance(value, int):
        return value
    text = str(value).strip()
    match = _DURATION.fullmatch(text)
    if match:
        factor = _DURATION_MS[(match.group("unit") or "ms").lower()]
        return int(int(match.group("n")) * factor)
    iso = _ISO_DURATION.fullmatch(text)
    if iso and text.upper() not in ("P", "PT"):
        parts = {k: float(v or 0) for k, v in iso.groupdict().items()}
        return int(((parts["d"] * 24 + parts["h"]) * 60 + parts["m"]) * 60_000 + parts["s"] * 1000)
    text = str(mask_value(key, text))
    shown = repr(text) if len(text) <= 40 else repr(text[:37] + "...")
    raise LintInputError(
        f"{key}: expected a duration such as 5000, 5s, 500ms or PT5S, got {shown}", source=source, line=line
    )


def _spring_boolean(value: Any, *, key: str, source: str, line: int | None) -> bool:
    """A Boolean property as Spring's conversion service binds it (StringToBooleanConverter:
    true, on, yes, 1 / false, off, no, 0, in any case): the client is handed true or false."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "on", "yes", "1"):
        return True
    if text in ("false", "off", "no", "0"):
        return False
    raise LintInputError(
        f"{key}: expected true or false (Spring Boot also reads on/off, yes/no, 1/0), got {_shown(key, value)}",
        source=source,
        line=line,
    )


_SPRING_ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


def _spring_isolation_level(value: Any, *, key: str, source: str, line: int | None) -> str:
    """spring.kafka.consumer.isolation-level, an enum Spring Boot binds leniently (case, and any
    character but letters and digits, ignored: read-committed, READ_COMMITTED) and hands the client
    lower-cased (KafkaProperties.Consumer.buildProperties: getIsolationLevel().name().toLowerCase())."""
    wanted = re.sub(r"[^0-9a-z]", "", str(value).lower())
    for level in _SPRING_ISOLATION_LEVELS:
        if level.replace("_", "") == wanted:
            return level
    raise LintInputError(
        f"{key}: expected read-committed or read-uncommitted, got {_shown(key, value)}", source=source, line=line
    )


def _shown(key: str, value: Any) -> str:
    text = str(mask_value(key, str(value)))
    return repr(text) if len(text) <= 40 else repr(text[:37] + "...")


# Named properties Spring Boot binds to a type of its own before it hands the client a value
_SPRING_TYPED = {"enable.auto.commit": _spring_boolean, "isolation.level": _spring_isolation_level}


def _flatten(node: yaml.Node, prefix: str, out: dict[str, tuple[Any, int]], *, source: str) -> None:
    """Flatten a composed YAML mapping to dotted keys, keeping each scalar's line (1-based).

    Merge keys (`<<: *defaults`) are applied as SnakeYAML (Spring Boot) and PyYAML's constructor
    apply them: the merged mapping's keys first, the mapping's own keys winning over them."""
    if isinstance(node, yaml.MappingNode):
        _apply_merge_keys(node, source=source)
        for key_node, value_node in node.value:
            key = str(key_node.value)
            _flatten(value_node, f"{prefix}.{key}" if prefix else key, out, source=source)
    elif isinstance(node, yaml.SequenceNode):
        out[prefix] = (
            ",".join(str(item.value) for item in node.value if isinstance(item, yaml.ScalarNode)),
            node.start_mark.line + 1,
        )
    else:
        out[prefix] = (_scalar(node, key=prefix, source=source), node.start_mark.line + 1)


def _apply_merge_keys(node: yaml.MappingNode, *, source: str) -> None:
    """Replace the node's `<<` entries by the entries they merge (SafeConstructor.flatten_mapping,
    which composing alone does not apply). A merge of no mapping is an input error naming its line."""
    merge = next((k for k, _ in node.value if k.tag == "tag:yaml.org,2002:merge"), None)
    if merge is None:
        return
    loader = yaml.SafeLoader("")
    try:
        loader.flatten_mapping(node)
    except yaml.YAMLError:
        # its message is the constructor's; the line is enough and quotes nothing
        raise LintInputError(
            "a merge key '<<' must merge a mapping (an anchor such as *defaults) or a list of them",
            source=source,
            line=merge.start_mark.line + 1,
        ) from None
    finally:
        loader.dispose()


def _scalar(node: yaml.Node, *, key: str, source: str) -> Any:
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError):
        # a tag the value does not fit (`!!int pw`, `!!binary` that is no base64) or one SafeLoader
        # refuses: the constructor's message quotes the value, which may be a password
        standard = re.fullmatch(r"tag:yaml\.org,2002:(\w+)", node.tag or "")
        tag = f"tag !!{standard.group(1)}" if standard else "tag"  # a tag of one's own is input text
        raise LintInputError(
            f"{key}: cannot read the value as its YAML {tag} says; expected a plain value",
            source=source,
            line=node.start_mark.line + 1,
        ) from None
    finally:
        loader.dispose()


# PyYAML's problems quote what they found: an alias or anchor name, a tag, a character, a token
# name. Only token names ('<block end>') and single characters ('\t', ':') are kept: the rest
# is text of the input, and an alias written where a password goes (`password: *pw`) is the password.
_YAML_QUOTED = re.compile(r"'[^']*'" + r'|"[^"]*"')
_YAML_KEPT = re.compile(r"""['"](?:<[\w ]+>|[^\w'"]|\\\w)['"]""")


def _yaml_problem(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None) or "not valid YAML"
    return _YAML_QUOTED.sub(lambda m: m.group() if _YAML_KEPT.fullmatch(m.group()) else f"'{MASK}'", problem)


def parse_spring_yaml(
    text: str, *, source: str = "application.yml", profiles: Sequence[str] | None = None
) -> dict[str, ParsedConfig]:
    """Spring Boot `spring.kafka.*` settings, per client kind (producer, consumer, streams).

    `spring.kafka.properties.*` applies to every kind; the kind's named properties override
    it, and the kind's own `properties.*` override both, as in Spring Boot (see
    _spring_configs). Documents of a multi-document file are merged in order, those that
    apply (see _applicable_documents): a document for a profile that is not active is left
    out, and the configs' notes say so.
    """
    try:
        documents = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise LintInputError(
            f"invalid YAML ({_yaml_problem(exc)}); expected a mapping with spring.kafka settings",
            source=source,
            line=mark.line + 1 if mark else None,
        ) from None
    flat_documents: list[SpringDocument] = []
    for number, document in enumerate(documents, start=1):
        if document is None:
            continue
        if not isinstance(document, yaml.MappingNode):
            raise LintInputError(
                "expected a YAML mapping (spring: kafka: ...), got a "
                f"{'list' if isinstance(document, yaml.SequenceNode) else 'scalar'}",
                source=source,
                line=document.start_mark.line + 1,
            )
        flat: dict[str, tuple[Any, int]] = {}
        _flatten(document, "", flat, source=source)
        flat_documents.append(SpringDocument(number, document.start_mark.line + 1, flat))
    flat, notes = _applicable_documents(flat_documents, profiles=profiles, source=source)
    return _spring_configs(flat, source=source, notes=notes)


def parse_spring_properties(
    text: str, *, source: str = "application.properties", profiles: Sequence[str] | None = None
) -> dict[str, ParsedConfig]:
    """Spring Boot's application.properties: the `spring.kafka.*` settings of parse_spring_yaml,
    one `key=value` a line, read per client kind the same way; a line `#---` (or `!---`) starts
    another document, as in Spring Boot 2.4+."""
    documents: list[SpringDocument] = []
    for number, (first_line, chunk) in enumerate(_properties_documents(text), start=1):
        config = parse_properties(chunk, source=source)
        flat = {key: (value, config.lines[key] + first_line - 1) for key, value in config.items()}
        documents.append(SpringDocument(number, first_line, flat))
    flat, notes = _applicable_documents(documents, profiles=profiles, source=source)
    return _spring_configs(flat, source=source, notes=notes)


def _properties_documents(text: str) -> Iterator[tuple[int, str]]:
    """(first line, text) of each document of a .properties file split at `#---` / `!---` lines."""
    first, chunk = 1, list[str]()
    for number, line in enumerate(text.splitlines(), start=1):
        if line.rstrip() in ("#---", "!---"):
            yield first, "\n".join(chunk) + "\n"
            first, chunk = number + 1, []
            continue
        chunk.append(line)
    yield first, "\n".join(chunk) + "\n"


# --- Spring profiles: which documents of a file apply -------------------------------------------


@dataclass(frozen=True)
class SpringDocument:
    number: int  # 1-based, as the file's documents are counted
    line: int  # where it starts
    flat: dict[str, tuple[Any, int]]  # dotted key -> (value, line)


_ON_PROFILE = ("spring.config.activate.on-profile", "spring.profiles")  # the second: before Spring Boot 2.4
_ON_CLOUD_PLATFORM = "spring.config.activate.on-cloud-platform"
_ACTIVE_PROFILES = ("spring.profiles.active", "spring.profiles.include")
_DEFAULT_PROFILE = "default"  # spring.profiles.default: active when no other profile is


def _relaxed_key(written: str) -> str:
    dotted = re.sub(r"\.?\[([^\]]+)\]", r".\1", written)
    return ".".join(_kebab(part) for part in dotted.split("."))


def _document_setting(document: SpringDocument, names: Sequence[str]) -> tuple[str, str] | None:
    for written, (value, _) in document.flat.items():
        key = _relaxed_key(written)
        if key in names and value is not None and str(value).strip():
            return key, str(value)
    return None


def _applicable_documents(
    documents: Sequence[SpringDocument], *, profiles: Sequence[str] | None, source: str
) -> tuple[dict[str, tuple[Any, int]], list[str]]:
    """The settings of the documents Spring Boot would apply, later ones winning, and notes on
    the documents left out.

    A document with `spring.config.activate.on-profile` (or, before Spring Boot 2.4,
    `spring.profiles`) applies only when its profile expression matches the active profiles:
    ``profiles`` when given, else the file's own `spring.profiles.active` (and `.include`),
    else Spring's `default` profile. One with `spring.config.activate.on-cloud-platform` is
    left out: the platform the application runs on is not known here.
    """
    unconditional = [doc for doc in documents if not _document_setting(doc, (*_ON_PROFILE, _ON_CLOUD_PLATFORM))]
    if profiles:
        active = frozenset(name.strip() for name in profiles if name.strip())
        whence = ", given"
    else:
        named: list[str] = []
        for doc in unconditional:
            setting = _document_setting(doc, _ACTIVE_PROFILES)
            if setting is not None:
                named += [name.strip() for name in setting[1].split(",") if name.strip()]
        active = frozenset(named)
        whence = ", the file's spring.profiles.active" if active else ""
    shown_active = f"{', '.join(sorted(active)) if active else 'none, so ' + _DEFAULT_PROFILE}{whence}"
    flat: dict[str, tuple[Any, int]] = {}
    notes: list[str] = []
    for doc in documents:
        where = f"{source}: document {doc.number} (line {doc.line})"
        platform = _document_setting(doc, (_ON_CLOUD_PLATFORM,))
        if platform is not None:
            notes.append(f"{where} not linted: it applies only on cloud platform {platform[1]!r}")
            continue
        condition = _document_setting(doc, _ON_PROFILE)
        if condition is not None:
            key, expression = condition
            matches = _profiles_match(expression, active or frozenset({_DEFAULT_PROFILE}))
            if matches is None:
                notes.append(f"{where} not linted: {key} {expression!r} is no profile expression Spring Boot reads")
                continue
            if not matches:
                notes.append(
                    f"{where} not linted: it applies only with profile {expression!r} (active: {shown_active})"
                )
                continue
            notes.append(f"{where} linted: its profile {expression!r} is active (active: {shown_active})")
        flat.update(doc.flat)
    return flat, notes


_PROFILE_TOKEN = re.compile(r"\s*([()!&|]|[^()!&|\s]+)")


def _profiles_match(expressions: str, active: frozenset[str]) -> bool | None:
    """Whether any of Spring's comma-separated profile expressions (`prod`, `!dev`, `eu & prod`,
    `(a | b) & c`: org.springframework.core.env.Profiles.of) matches ``active``; None for one it
    cannot read."""
    results = [_profile_expression_matches(part, active) for part in expressions.split(",") if part.strip()]
    if not results or None in results:
        return None
    return any(results)


def _profile_expression_matches(expression: str, active: frozenset[str]) -> bool | None:
    tokens: list[str] = _PROFILE_TOKEN.findall(expression)
    if "".join(tokens) != re.sub(r"\s+", "", expression):
        return None
    # Spring refuses `a & b | c` ("Malformed profile expression"): mixing needs parentheses
    operators: list[set[str]] = [set()]
    for token in tokens:
        if token == "(":
            operators.append(set())
        elif token == ")" and len(operators) > 1:
            operators.pop()
        elif token in "&|":
            operators[-1].add(token)
            if len(operators[-1]) > 1:
                return None
    position = 0

    def peek() -> str | None:
        return tokens[position] if position < len(tokens) else None

    def take() -> str:
        nonlocal position
        position += 1
        return tokens[position - 1]

    def operand() -> bool:
        token = peek()
        if token is None or token in "&|)":
            raise ValueError(expression)
        take()
        if token == "!":
            return not operand()
        if token == "(":
            inner = either()
            if peek() != ")":
                raise ValueError(expression)
            take()
            return inner
        return token in active

    def both() -> bool:
        value = operand()
        while peek() == "&":
            take()
            value = operand() and value
        return value

    def either() -> bool:
        value = both()
        while peek() == "|":
            take()
            value = both() or value
        return value

    try:
        value = either()
    except ValueError:
        return None
    return value if peek() is None else None


def is_spring_properties(config: Mapping[str, Any]) -> bool:
    """Whether .properties keys are Spring Boot's (spring.kafka.*) rather than a client's own."""
    return any(str(key).startswith("spring.kafka.") for key in config)


# A whole value that is a Spring property placeholder, ${NAME} or ${NAME:default}: the value comes
# from the environment when the application starts, which the lint does not see.
_PLACEHOLDER = re.compile(r"\$\{([^:{}]*)(?::(.*))?\}", re.S)
_UNRESOLVED = object()  # a placeholder without a default: the key is left out


def _typed(key: str, is_duration: bool) -> bool:
    """Whether the lint reads ``key``'s value as a number, boolean or choice (not as text)."""
    return is_duration or KEY_TYPES.get(key, "str") != "str"


def _placeholder_default(value: Any, *, key: str, typed: bool, line: int, notes: list[str]) -> Any:
    """``value``, or the default of the placeholder it is (its own default, for a nested one:
    ${A:${B:1}} is 1), with a note; _UNRESOLVED when it has none. Text values (a
    transactional.id) keep the placeholder as written: their rules read what it holds."""
    if not typed or not isinstance(value, str):
        return value
    written = value.strip()
    default: str | None = written
    while default is not None:
        match = _PLACEHOLDER.fullmatch(default.strip())
        if match is None:
            break
        default = match.group(2)
    if default is written:
        return value
    where = f"{key} (line {line}) is a placeholder the environment resolves"
    if default is None:
        notes.append(f"{where}, with no default: not linted")
        return _UNRESOLVED
    notes.append(f"{where}: linted with the placeholder's default {_shown(key, default.strip())}")
    return default.strip()


def _spring_configs(
    flat: Mapping[str, tuple[Any, int]], *, source: str, notes: Sequence[str] = ()
) -> dict[str, ParsedConfig]:
    """Flat `spring.*` keys (value, line) to one config per client kind (see parse_spring_yaml)."""
    common: dict[str, tuple[Any, int]] = {}
    per_kind: dict[str, dict[str, tuple[Any, int]]] = {kind: {} for kind in SPRING_SECTIONS}
    named: dict[str, dict[str, tuple[Any, int]]] = {kind: {} for kind in SPRING_SECTIONS}
    notes = list(notes)
    for written, (value, line) in flat.items():
        # Spring's map-key notation: properties[enable.idempotence] or a "[enable.idempotence]" key
        dotted = re.sub(r"\.?\[([^\]]+)\]", r".\1", written)
        if not dotted.startswith("spring.kafka."):
            continue
        rest = dotted[len("spring.kafka.") :]
        if rest.startswith("properties."):
            key = rest[len("properties.") :]
            value = _placeholder_default(value, key=dotted, typed=_typed(key, False), line=line, notes=notes)
            if value is not _UNRESOLVED:
                common[key] = (value, line)
            continue
        section, _, name = rest.partition(".")
        section = _kebab(section)
        if section == "listener":
            section, names = "consumer", SPRING_LISTENER
        elif section in SPRING_SECTIONS and name:
            if name.startswith("properties."):
                key = name[len("properties.") :]
                value = _placeholder_default(value, key=dotted, typed=_typed(key, False), line=line, notes=notes)
                if value is not _UNRESOLVED:
                    per_kind[section][key] = (value, line)
                continue
            names = SPRING_SECTIONS[section]
        else:
            continue
        mapping = names.get(_kebab(name))
        if mapping is None:
            continue
        kafka_key, is_duration = mapping
        value = _placeholder_default(value, key=dotted, typed=_typed(kafka_key, is_duration), line=line, notes=notes)
        if value is _UNRESOLVED:
            continue
        if is_duration and value is not None:
            value = spring_duration_ms(value, key=dotted, source=source, line=line)
        bind = _SPRING_TYPED.get(kafka_key)
        if bind is not None and value is not None:
            value = bind(value, key=dotted, source=source, line=line)
        named[section][kafka_key] = (value, line)

    configs: dict[str, ParsedConfig] = {}
    for kind in SPRING_SECTIONS:
        if not (per_kind[kind] or named[kind]):
            continue
        # Spring Boot's KafkaProperties.build{Producer,Consumer,Streams}Properties: the common
        # properties map first, then the kind's buildProperties(), which puts its named values
        # and then putAll(this.properties): spring.kafka.producer.properties.acks wins over
        # spring.kafka.producer.acks. The transaction-id-prefix is not one of those values: the
        # producer factory sets transactional.id from it on each producer it creates
        # (spring-kafka DefaultKafkaProducerFactory.doCreateTxProducer), so it still wins.
        late = {key: item for key, item in named[kind].items() if key == "transactional.id"}
        merged = {**common, **named[kind], **per_kind[kind], **late}
        values = {key: value for key, (value, _) in merged.items()}
        lines = {key: line for key, (_, line) in merged.items()}
        configs[kind] = ParsedConfig(values, source=source, lines=lines, framework=SPRING_KAFKA, notes=notes)
    if not configs and (common or notes):
        configs["common"] = ParsedConfig(
            {key: value for key, (value, _) in common.items()},
            source=source,
            lines={key: line for key, (_, line) in common.items()},
            framework=SPRING_KAFKA,
            notes=notes,
        )
    return configs


def parse_text(
    text: str, *, fmt: str, source: str, kind: str | None = None, profiles: Sequence[str] | None = None
) -> dict[str, ParsedConfig]:
    """Parse ``text`` in ``fmt``; the result maps a client kind to its config.

    JSON and .properties hold one config, returned under ``kind``; Spring Boot's YAML, and
    .properties whose keys are spring.kafka.*, hold up to three (producer, consumer,
    streams), filtered to ``kind`` when given, from the documents that apply with
    ``profiles`` active (see _applicable_documents).
    """
    if fmt == "json":
        return {kind or "producer": parse_librdkafka(text, source=source)}
    if fmt == "properties":
        config = parse_properties(text, source=source)
        if not is_spring_properties(config):
            return {kind or "producer": config}
        configs = parse_spring_properties(text, source=source, profiles=profiles)
        return _spring_kinds(configs, kind=kind, source=source)
    if fmt == "spring-yaml":
        return _spring_kinds(parse_spring_yaml(text, source=source, profiles=profiles), kind=kind, source=source)
    raise LintInputError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}", source=source)


def _spring_kinds(configs: dict[str, ParsedConfig], *, kind: str | None, source: str) -> dict[str, ParsedConfig]:
    common = configs.pop("common", None)
    if kind is not None:
        if kind in configs:
            return {kind: configs[kind]}
        notes = next((config.notes for config in configs.values()), ())
        return {
            kind: common if common is not None else ParsedConfig(source=source, framework=SPRING_KAFKA, notes=notes)
        }
    if not configs:
        left_out = f" ({'; '.join(common.notes)})" if common is not None and common.notes else ""
        raise LintInputError(f"no spring.kafka.producer, .consumer or .streams settings found{left_out}", source=source)
    return configs


def guess_format(text: str, filename: str | None = None) -> str:
    """The format of a pasted config, from its file name or its first non-blank character."""
    if filename:
        lowered = filename.lower()
        if lowered.endswith(".json"):
            return "json"
        if lowered.endswith((".yml", ".yaml")):
            return "spring-yaml"
        if lowered.endswith((".properties", ".conf", ".cfg")):
            return "properties"
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return "json"
    if re.search(r"^\s*spring\s*:|^\s*spring\.kafka\.[\w.-]+\s*:\s", text, re.M) and not re.search(
        r"^\s*spring\.kafka\.[\w.-]+\s*=", text, re.M
    ):
        return "spring-yaml" if _reads_as_yaml(text) else "properties"
    return "properties"


def _reads_as_yaml(text: str) -> bool:
    """Whether `key: value` text is YAML rather than a .properties file written with colons:
    a YAML document separator (---) or an indented line (not a .properties continuation) says
    YAML; a .properties document separator (#--- or !---, Spring Boot 2.4+), or flat lines with
    no YAML quoting, say properties."""
    lines = [line for line in text.splitlines() if line.strip()]
    if any(re.fullmatch(r"---(\s.*)?", line.rstrip()) for line in lines):
        return True
    continued = False
    for line in lines:
        if line[:1].isspace() and not continued and not line.lstrip().startswith(("#", "!")):
            return True
        continued = line.rstrip().endswith("\\")
    if any(line.rstrip() in ("#---", "!---") for line in lines):
        return False
    # flat lines: quoted values are YAML's (a .properties value keeps its quotes)
    return any(re.search(r":\s+[\"']", line) for line in lines if not line.lstrip().startswith(("#", "!")))
