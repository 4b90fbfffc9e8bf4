"""The lint engine's vocabulary: settings, context, rules, findings and results."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypeVar

from auditor.lint.engine.defaults import CLIENTS, TOPIC_FROM_BROKER

Source = Literal["explicit", "default"]
Severity = Literal["error", "warning", "info"]
SEVERITY_ORDER: Mapping[str, int] = {"error": 0, "warning": 1, "info": 2}
REFUSES_TO_START = "the client refuses to start"


@dataclass(frozen=True)
class Setting:
    """One effective value: what the client will run with, and where it came from."""

    key: str  # the engine's (Java) name
    name: str  # as the user knows it: the key they typed, else the client's own name
    value: Any  # normalised: ints, bools, "all", "latest", ...
    shown: Any  # as typed, or the client's default spelled as the client documents it
    source: Source
    note: str = ""  # why a default differs from the client's table (derived by the client)
    # why the client refuses the value as written, though the engine reads it (acks=ALL for
    # Java): effective.client_refusal; the 1xx rules P109 and C105 report it
    refused: str = ""
    refused_expected: str = ""  # what the client accepts instead
    # why the client ignores the key (Java: a key with blanks around it is no config it knows)
    ignored: str = ""

    @property
    def explicit(self) -> bool:
        return self.source == "explicit"

    def describe(self) -> str:
        """`acks=1` or `enable.idempotence=false (default)`, for messages."""
        shown = self.shown
        if isinstance(shown, bool):
            shown = str(shown).lower()
        text = f"{self.name}={shown}"
        if self.source == "default":
            text += f" ({self.note})" if self.note else " (default)"
        return text


@dataclass(frozen=True)
class Overtaken:
    """A group whose committed offset lies below its partition's log start: the records
    between them were deleted (retention, delete-records) before the group committed them."""

    group: str
    partition: int
    committed: int
    log_start: int

    @property
    def records(self) -> int:
        return self.log_start - self.committed


@dataclass(frozen=True)
class LintContext:
    """Facts from outside the linted object that some rules need.

    broker_configs: the cluster's broker settings (e.g. transaction.max.timeout.ms); None when
        not given (a pasted config): a topic or Streams setting the brokers' defaults decide is
        then not known, and the rules say so. {} is a cluster that set none of them.
    topic_configs: per topic name, the topic's settings (retention.ms, ...).
    consumer_lag_seconds: how far behind (in time) the consumers of the linted topic are,
        one number or per topic name.
    overtaken: per topic name, the groups whose committed offset the log start has passed.
    consume_transform_produce: the app reads, transforms and writes back to Kafka.
    offsets_in_transaction: observed (e.g. by the probes) whether the app's offsets are
        committed through the producer's transaction; None when unknown.
    max_processing_ms: the longest observed time between two polls of the consumer.
    client_version: the Java client's version ("3.9.2"); its defaults changed over time.
    item_keys: per topic name, how the bindings on it find an item's key in a record when it
        is not the record key ("json:$.ticket_id", "header:id"); absent: the record key.
    """

    broker_configs: Mapping[str, Any] | None = None
    topic_configs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    consumer_lag_seconds: float | Mapping[str, float] | None = None
    overtaken: Mapping[str, Sequence[Overtaken]] = field(default_factory=dict)
    consume_transform_produce: bool = False
    offsets_in_transaction: bool | None = None
    max_processing_ms: int | None = None
    client_version: str | None = None
    item_keys: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Subject:
    """What one rule looks at: the effective config of one object, and its surroundings."""

    client: str
    kind: str
    guarantee: str
    name: str | None
    settings: Mapping[str, Setting]
    broker: Mapping[str, Setting]  # effective broker settings (defaults when not given)
    context: LintContext
    java_version: tuple[int, int, int]

    def __getitem__(self, key: str) -> Setting:
        return self.settings[key]

    def value(self, key: str) -> Any:
        return self.settings[key].value

    def unknown_broker_default(self, key: str) -> str:
        """The broker key whose value ``key`` takes, when the brokers' settings were not given:
        the engine cannot know the value (a pasted topic config's unset min.insync.replicas,
        a Streams replication.factor of -1); else ""."""
        if self.context.broker_configs is not None:
            return ""
        if self.kind == "streams":
            if key == "replication.factor" and self[key].value == -1:
                return "default.replication.factor"
            return ""
        if self.kind == "topic" and not self[key].explicit:
            return TOPIC_FROM_BROKER.get(key, "")
        return ""


@dataclass(frozen=True)
class Finding:
    """A rule's verdict on one setting; the engine turns it into a LintResult."""

    setting: Setting
    expected: str
    message: str
    severity: Severity | None = None  # overrides the rule's severity (e.g. per guarantee)


Check = Callable[[Subject], Iterable[Finding]]


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    guarantees: frozenset[str]
    target: str  # producer | consumer | topic | broker | streams
    severity: Severity  # the worst it reports
    why: str  # the failure, in its own terms
    fix: str
    check: Check
    clients: frozenset[str] = frozenset(CLIENTS)

    def applies_to(self, client: str, kind: str, guarantee: str) -> bool:
        if self.target != kind or guarantee not in self.guarantees:
            return False
        return kind not in ("producer", "consumer") or client in self.clients


_C = TypeVar("_C", bound=Check)


class RuleBook:
    """The rules of one target, each declared by a decorator right above its check::

        producer_rules = RuleBook("producer")

        @producer_rules.rule("P001", "acks is not all", NOT_LOST, "error", why="...", fix="...")
        def check_acks(s: Subject) -> Iterator[Finding]: ...

    ``rules`` lists them in the order they are declared, which is the order of reports.
    """

    def __init__(self, target: str, clients: frozenset[str] = frozenset(CLIENTS)) -> None:
        self.target = target  # producer | consumer | topic | broker | streams
        self.clients = clients  # the clients a rule applies to unless it names its own
        self._rules: list[Rule] = []

    def rule(
        self,
        id: str,
        title: str,
        guarantees: frozenset[str],
        severity: Severity,
        *,
        why: str,
        fix: str,
        clients: frozenset[str] | None = None,
    ) -> Callable[[_C], _C]:
        def declare(check: _C) -> _C:
            if any(known.id == id for known in self._rules):
                raise ValueError(f"rule {id} is declared twice")
            chosen = self.clients if clients is None else clients
            rule = Rule(id, title, guarantees, self.target, severity, why, fix, check, chosen)
            self._rules.append(rule)
            return check

        return declare

    @property
    def rules(self) -> tuple[Rule, ...]:
        return tuple(self._rules)


@dataclass(frozen=True)
class LintResult:
    rule: str
    title: str
    severity: Severity
    target: str
    subject: str | None  # e.g. the topic's name or "broker 1"
    config: str
    value: Any  # masked
    expected: str
    message: str  # masked
    guarantee: str
    source: Source
    why: str
    fix: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
