"""A reconciliation binding (topic ↔ source table) as the Spark job receives it, validated.

The Django side resolves the YAML (clusters, sources, `${ENV}` secrets) and hands the job a
flat JSON object; the job checks every field again because it builds SQL and Spark
expressions from them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from spark_jobs.processing_bound import DEFAULT_MAX_POLL_INTERVAL_MS, parse_bounds, whole_ms
from spark_jobs.send_outcome import SEND_OUTCOME_MS, UNBOUNDED

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
QUALIFIED_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")
HEADER_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
# get_json_object paths: $ followed by .name or [index] steps.
JSON_PATH = re.compile(r"^\$(\.[A-Za-z_][A-Za-z0-9_\-]*|\[[0-9]+\])+$")
DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)?\s*$")
GUARANTEES = ("at-most-once", "at-least-once", "exactly-once")
_DURATION_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


class BindingError(ValueError):
    """The binding configuration cannot be used; the message names the binding and field."""


@dataclass(frozen=True)
class RecordKeySpec:
    """How a record's business key is found: the record key, a header, or a JSON path."""

    source: str  # "key" | "header" | "json"
    argument: str | None = None

    def describe(self) -> str:
        return self.source if self.argument is None else f"{self.source}:{self.argument}"


@dataclass(frozen=True)
class Binding:
    name: str
    topic: str
    bootstrap_servers: str
    source_url: str
    table: str
    key_column: str
    created_column: str
    record_key: RecordKeySpec
    grace_seconds: float = 120.0
    guarantee: str = "at-least-once"
    consumer_groups: tuple[str, ...] = ()
    kafka_config: dict[str, str] = field(default_factory=dict)
    producer_ledger_topic: str = "_audit.producer-ledger"
    consumer_ledger_topic: str = "_audit.consumer-ledger"
    # True: also read read_uncommitted to tell aborted records apart; None: only when this
    # run's committed read shows offset holes (transaction markers); False: never.
    transactions: bool | None = None
    since: datetime | None = None
    lookback_seconds: float = 300.0
    # The time zone the table's `timestamp without time zone` columns hold (an IANA name):
    # their values are read as instants in it. Columns with a time zone need none.
    timestamp_zone: str = "UTC"
    # How long a send's outcome can stay open, in ms (spark_jobs.send_outcome: the longest the
    # cluster's probed producers reported; 0: one retries without limit).
    send_outcome_ms: int = SEND_OUTCOME_MS
    # How long after a commit a probed consumer session may still be processing what it passed,
    # in ms (spark_jobs.processing_bound): per session as the clients topic shows its
    # max.poll.interval.ms, and for every other session; both capped by the service already.
    processing_bound_ms: int = DEFAULT_MAX_POLL_INTERVAL_MS
    session_bounds_ms: dict[str, int] = field(default_factory=dict)

    def processing_bound(self, session: str) -> int:
        """The processing bound of a probed consumer session, in ms."""
        return self.session_bounds_ms.get(session, self.processing_bound_ms)

    def identity(self) -> dict[str, str]:
        """What the binding's reconciliation state is of (state_identity)."""
        return state_identity(self.topic, self.record_key.describe(), self.table, self.key_column)

    @property
    def schema_name(self) -> str | None:
        return self.table.split(".", 1)[0] if "." in self.table else None

    @property
    def table_name(self) -> str:
        return self.table.rsplit(".", 1)[-1]


def state_identity(topic: str, record_key: str, table: str, key_column: str) -> dict[str, str]:
    """What a binding's reconciliation state is of: the topic read, how a record's key is
    found, and the source table and its key column (record_key as parse_record_key reads it).

    A state of another identity says nothing of the binding as it is now: its sightings,
    offsets and pending rows are of another topic, key or table. Reconciliation then starts
    over, and the stuck diagnosis recalls nothing from it (identity_changes).
    """
    return {
        "topic": topic,
        "record_key": parse_record_key(record_key, "state identity").describe(),
        "table": table,
        "key_column": key_column,
    }


def identity_changes(kept: dict[str, str] | None, now: dict[str, str]) -> list[str]:
    """Where the identity a state was built for (state.json `identity`) differs from the
    binding's now, one `name 'then' → 'now'` each; none when it is the same, or not known (a
    state written before it was kept)."""
    if not isinstance(kept, dict):
        return []
    return [f"{name} {kept[name]!r} → {value!r}" for name, value in now.items() if kept.get(name, value) != value]


def parse_duration(value: Any, what: str) -> float:
    """'2m', '30s', '1h', '500ms', '1d' or a number of seconds → seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    match = DURATION.fullmatch(str(value))
    if not match:
        raise BindingError(f"{what}: expected a duration such as 30s, 2m, 1h or 1d, got {value!r}")
    return int(match.group(1)) * _DURATION_SECONDS[match.group(2)]


def parse_record_key(value: str, binding: str) -> RecordKeySpec:
    text = (value or "").strip()
    if text == "key":
        return RecordKeySpec("key")
    if text.startswith("header:"):
        name = text[len("header:") :]
        if not HEADER_NAME.fullmatch(name):
            raise BindingError(f"binding {binding!r}: record_key header name {name!r} is not valid")
        return RecordKeySpec("header", name)
    if text.startswith("json:"):
        path = text[len("json:") :]
        if not JSON_PATH.fullmatch(path):
            raise BindingError(
                f"binding {binding!r}: record_key JSON path {path!r} is not valid; "
                "expected e.g. json:$.ticket_id or json:$.items[0].id"
            )
        return RecordKeySpec("json", path)
    raise BindingError(f"binding {binding!r}: record_key must be key, header:<name> or json:<path>, got {value!r}")


def check_identifier(value: Any, what: str, binding: str, qualified: bool = False) -> str:
    pattern = QUALIFIED_IDENTIFIER if qualified else IDENTIFIER
    if not isinstance(value, str) or not pattern.fullmatch(value):  # match() lets a final newline past $
        shape = "name or schema.name" if qualified else "name"
        raise BindingError(
            f"binding {binding!r}: {what} must be a plain SQL {shape} ([A-Za-z_][A-Za-z0-9_]*), got {value!r}"
        )
    return value


# IANA zone names: letters, digits and _+-/ only (never a quote), e.g. Europe/Paris, Etc/GMT+5.
ZONE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+)*")
# More than any zone's clock change (summer time, Antarctica/Troll's two hours, a zone's offset
# redrawn): how far a wall-clock time can move against the instant it was at. A naive column
# is held to wall-clock bounds widened by this (for its index) and judged on instants.
ZONE_SHIFT = "3 hours"
NAIVE_TIMESTAMP_TYPES = frozenset({"timestamp without time zone", "timestamp"})


def check_zone(value: Any, where: str) -> str:
    """An IANA time zone name this machine knows (zoneinfo), e.g. UTC or Europe/Paris."""
    text = str(value or "UTC")
    if not ZONE_NAME.fullmatch(text):
        raise BindingError(f"{where}: timestamp_zone must be an IANA time zone name such as Europe/Paris, got {text!r}")
    try:
        ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        raise BindingError(
            f"{where}: timestamp_zone {text!r} is not a known time zone (IANA names: Europe/Paris, UTC)"
        ) from None
    return text


def is_naive_timestamp(data_type: str | None) -> bool:
    """Whether a column of this PostgreSQL type (information_schema or format_type spelling,
    a precision allowed) holds timestamps without a time zone."""
    if not data_type:
        return False
    return " ".join(re.sub(r"\(\d+\)", " ", data_type.lower()).split()) in NAIVE_TIMESTAMP_TYPES


def _processing_bound(value: Any, binding: str) -> int:
    try:
        return DEFAULT_MAX_POLL_INTERVAL_MS if value in (None, "") else whole_ms(value, "processing_bound_ms")
    except ValueError as exc:
        raise BindingError(f"binding {binding!r}: {exc}") from exc


def _session_bounds(value: Any, binding: str) -> dict[str, int]:
    try:
        return parse_bounds(value, "session_bounds_ms")
    except ValueError as exc:
        raise BindingError(f"binding {binding!r}: {exc}") from exc


def _send_outcome(value: Any, binding: str) -> int:
    if value in (None, ""):
        return SEND_OUTCOME_MS
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BindingError(
            f"binding {binding!r}: send_outcome_ms must be a whole number of ms, 0 or more, got {value!r}"
        )
    return value if value == UNBOUNDED else max(value, SEND_OUTCOME_MS)


def _parse_since(value: Any, binding: str) -> datetime | None:
    if value in (None, ""):
        return None
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError as exc:
        raise BindingError(f"binding {binding!r}: since must be an ISO timestamp, got {value!r}") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def binding_from_dict(data: dict[str, Any]) -> Binding:
    """Validate a flat binding object (the Django side resolves clusters and sources)."""
    name = str(data.get("name") or "")
    if not name:
        raise BindingError("binding: name is required")
    missing = [
        key
        for key in ("topic", "bootstrap_servers", "source_url", "table", "key_column", "created_column")
        if not data.get(key)
    ]
    if missing:
        raise BindingError(f"binding {name!r}: missing required field(s): {', '.join(missing)}")
    guarantee = str(data.get("guarantee") or "at-least-once")
    if guarantee not in GUARANTEES:
        raise BindingError(f"binding {name!r}: guarantee must be one of {', '.join(GUARANTEES)}, got {guarantee!r}")
    groups = data.get("consumer_groups") or []
    if isinstance(groups, str) or not all(isinstance(g, str) and g for g in groups):
        raise BindingError(f"binding {name!r}: consumer_groups must be a list of group ids")
    transactions = data.get("transactions")
    kafka_config = data.get("kafka_config") or {}
    if not isinstance(kafka_config, dict):
        raise BindingError(f"binding {name!r}: kafka_config must be an object")
    return Binding(
        name=name,
        topic=str(data["topic"]),
        bootstrap_servers=str(data["bootstrap_servers"]),
        source_url=str(data["source_url"]),
        table=check_identifier(data["table"], "table", name, qualified=True),
        key_column=check_identifier(data["key_column"], "key_column", name),
        created_column=check_identifier(data["created_column"], "created_column", name),
        record_key=parse_record_key(str(data.get("record_key") or "key"), name),
        grace_seconds=parse_duration(data.get("grace", "2m"), f"binding {name!r}: grace"),
        guarantee=guarantee,
        consumer_groups=tuple(groups),
        kafka_config={str(k): str(v) for k, v in kafka_config.items()},
        producer_ledger_topic=str(data.get("producer_ledger_topic") or "_audit.producer-ledger"),
        consumer_ledger_topic=str(data.get("consumer_ledger_topic") or "_audit.consumer-ledger"),
        transactions=(True if guarantee == "exactly-once" else None) if transactions is None else bool(transactions),
        since=_parse_since(data.get("since"), name),
        lookback_seconds=parse_duration(data.get("lookback", "5m"), f"binding {name!r}: lookback"),
        timestamp_zone=check_zone(data.get("timestamp_zone"), f"binding {name!r}"),
        send_outcome_ms=_send_outcome(data.get("send_outcome_ms"), name),
        processing_bound_ms=_processing_bound(data.get("processing_bound_ms"), name),
        session_bounds_ms=_session_bounds(data.get("session_bounds_ms"), name),
    )


def load_binding_json(value: str) -> Binding:
    """--binding-json: a JSON object inline or the path of a file holding one."""
    text = value
    if not value.lstrip().startswith("{"):
        path = Path(value)
        if not path.is_file():
            raise BindingError(f"--binding-json: {value!r} is neither a JSON object nor a readable file")
        text = path.read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BindingError(f"--binding-json: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise BindingError("--binding-json: expected a JSON object")
    return binding_from_dict(data)


def jdbc_url_and_properties(url: str) -> tuple[str, dict[str, str]]:
    """postgresql://user:pw@host:port/db?sslmode=… → (jdbc:postgresql://host:port/db, props).

    jdbc: URLs pass through unchanged. Credentials go into properties, never into the URL,
    so they do not end up in error messages.
    """
    if url.startswith("jdbc:"):
        return url, {}
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres") or not parts.hostname:
        raise BindingError(
            f"source url must be postgresql://user:password@host:port/db or jdbc:…, got scheme {parts.scheme!r}"
        )
    props: dict[str, str] = {"driver": "org.postgresql.Driver"}
    if parts.username:
        props["user"] = unquote(parts.username)
    if parts.password:
        props["password"] = unquote(parts.password)
    props.update(dict(parse_qsl(parts.query)))
    port = parts.port or 5432
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    return f"jdbc:postgresql://{host}:{port}{parts.path or '/'}", props


def redact_url(url: str) -> str:
    """The URL without its password, for messages and run summaries."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":****@")
    return parts._replace(netloc=netloc).geturl()
