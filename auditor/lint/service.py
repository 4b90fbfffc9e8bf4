"""Lint scans: the configured clusters and their probes' clients, or a pasted config.

Guarantees. Each topic is linted against the strictest guarantee of the bindings on it.
A cluster's brokers, and a probe client whose topics are unknown, are linted against the
strictest guarantee declared on that cluster (at-least-once, the bindings' default, when
none is): a broker or client serving several pipelines must satisfy the most demanding.
A reported consumer whose group is listed in bindings' consumer_groups takes the strictest
guarantee of those bindings. Producers do not report their topics in `_audit.clients`
(docs/contracts.md), so they always take the cluster's strictest guarantee.

Versions. A reported Java client is linted at the version its record's `library_version`
gives (a Confluent Platform "7.6.0-ccs" at the Apache Kafka version it ships, 3.6); one the
linter cannot read or map is linted at the default, 4.0, and the scan's notes say so.

Consumer lag in time (for the retention rule T005) is measured per bound topic from its
bindings' consumer groups: the age of the first record each group has not consumed.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from confluent_kafka.admin import AdminClient
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from auditor.lib.live import publish
from auditor.lint.alerting import alert_on_scan_safely
from auditor.lint.engine.defaults import AT_LEAST_ONCE
from auditor.lint.engine.errors import LintInputError
from auditor.lint.engine.linter import java_version_label, lint, lint_text_described, reported_java_client_version
from auditor.lint.engine.masking import mask_text
from auditor.lint.engine.parsers import guess_format
from auditor.lint.engine.terms import LintContext, LintResult
from auditor.lint.live import lint_live_cluster
from auditor.lint.models import LintResultRow, LintScan
from auditor.lint.observed import ConsumerLag, broker_configs, consumer_lag, read_reported_clients
from auditor.pipelines.connectivity import ConnectivityError, check_cluster
from auditor.pipelines.models import Cluster
from auditor.probes.codec import ClientRecord
from auditor.probes.topics import CLIENTS_TOPIC
from auditor.vocabulary import GUARANTEES

log = logging.getLogger(__name__)

DEFAULT_GUARANTEE = AT_LEAST_ONCE
LIBRARIES = {"librdkafka": "librdkafka", "java": "java"}


@dataclass(frozen=True)
class ScanResult:
    """One engine result and where it was found."""

    result: LintResult
    subject: str
    cluster: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {**self.result.as_dict(), "subject": self.subject, "cluster": self.cluster}


@dataclass
class ScanOutcome:
    results: list[ScanResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # a part could not be linted: the scan failed
    notes: list[str] = field(default_factory=list)  # skipped on purpose, or partly read
    linted: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def extend(self, other: ScanOutcome) -> None:
        self.results.extend(other.results)
        self.problems.extend(other.problems)
        self.notes.extend(other.notes)
        for what, count in other.linted.items():
            self.linted[what] += count


def strictest(guarantees: Iterable[str], default: str = DEFAULT_GUARANTEE) -> str:
    """The most demanding of ``guarantees`` (exactly-once > at-least-once > at-most-once)."""
    known = [g for g in guarantees if g in GUARANTEES]
    return max(known, key=GUARANTEES.index) if known else default


def client_subject(record: ClientRecord) -> str:
    subject = f"{record.kind} {record.client_id or 'rdkafka'}@{record.host or '?'} {record.session}"
    return f"{subject} (group {record.group})" if record.group else subject


def _describe_error(exc: BaseException) -> str:
    return mask_text(str(exc) or type(exc).__name__)


# --- a live cluster --------------------------------------------------------------------------


def scan_cluster(cluster: Cluster, *, clients_topic: str = CLIENTS_TOPIC, timeout: float = 15.0) -> ScanOutcome:
    """Lint one cluster's brokers, bound topics and the clients its probes reported."""
    outcome = ScanOutcome()
    bindings = list(cluster.bindings.all())
    cluster_guarantee = strictest(b.guarantee for b in bindings)
    topic_guarantees: dict[str, list[str]] = defaultdict(list)
    groups_by_topic: dict[str, set[str]] = defaultdict(set)
    guarantees_by_group: dict[str, list[str]] = defaultdict(list)
    item_keys: dict[str, str] = {}  # topics some binding keys otherwise than by the record key
    for binding in bindings:
        topic_guarantees[binding.topic].append(binding.guarantee)
        if binding.record_key and binding.record_key != "key":
            item_keys.setdefault(binding.topic, binding.record_key)
        for group in binding.consumer_groups or []:
            groups_by_topic[binding.topic].add(str(group))
            guarantees_by_group[str(group)].append(binding.guarantee)

    try:
        check_cluster(cluster, timeout_s=timeout)
    except ConnectivityError as exc:
        if exc.security:
            outcome.problems.append(f"{exc}: nothing was linted")
            return outcome
    try:
        connection = cluster.client_config()
        admin = AdminClient(connection)
        metadata = admin.list_topics(timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - any failure to reach a cluster is reported, not raised
        outcome.problems.append(f"cluster {cluster.name}: cannot reach it: {_describe_error(exc)}")
        return outcome

    missing = sorted(topic for topic in topic_guarantees if topic not in metadata.topics)
    for topic in missing:
        outcome.notes.append(f"cluster {cluster.name}: topic {topic} of a binding does not exist")
    by_guarantee: dict[str, list[str]] = defaultdict(list)
    for topic, guarantees in sorted(topic_guarantees.items()):
        if topic not in missing:
            by_guarantee[strictest(guarantees)].append(topic)

    try:
        lag = consumer_lag(
            connection,
            metadata,
            {t: sorted(g) for t, g in groups_by_topic.items() if t not in missing},
            timeout=timeout,
        )
    except Exception as exc:  # noqa: BLE001 - the lag only enables T005; the rest of the scan goes on
        lag = ConsumerLag({}, {})
        outcome.notes.append(f"cluster {cluster.name}: consumer lag unknown: {_describe_error(exc)}")
    for topic, reason in sorted(lag.unknown.items()):
        outcome.notes.append(f"cluster {cluster.name}: topic {topic}: consumer lag unknown: {reason}")

    try:
        # brokers once, at the cluster's strictest guarantee; topics at their own
        guarantees = [cluster_guarantee, *sorted(set(by_guarantee) - {cluster_guarantee})]
        for guarantee in guarantees:
            topics = by_guarantee.get(guarantee, [])
            for result in lint_live_cluster(
                admin,
                guarantee,
                topics=topics,
                consumer_lag_seconds=lag.seconds,
                overtaken=lag.overtaken,
                item_keys=item_keys,
                timeout=timeout,
            ):
                if result.target == "topic":
                    outcome.results.append(ScanResult(result, f"topic {result.subject}", cluster.name))
                elif guarantee == cluster_guarantee:
                    outcome.results.append(ScanResult(result, result.subject or "brokers", cluster.name))
        outcome.linted["brokers"] += len(metadata.brokers)
        outcome.linted["topics"] += sum(len(topics) for topics in by_guarantee.values())
    except Exception as exc:  # noqa: BLE001
        outcome.problems.append(f"cluster {cluster.name}: cannot lint brokers and topics: {_describe_error(exc)}")

    outcome.extend(
        _scan_reported_clients(
            cluster,
            connection,
            admin,
            metadata.brokers,
            cluster_guarantee=cluster_guarantee,
            guarantees_by_group=guarantees_by_group,
            clients_topic=clients_topic,
            timeout=timeout,
        )
    )
    return outcome


def _scan_reported_clients(
    cluster: Cluster,
    connection: dict[str, Any],
    admin: AdminClient,
    brokers: dict[int, Any],
    *,
    cluster_guarantee: str,
    guarantees_by_group: dict[str, list[str]],
    clients_topic: str,
    timeout: float,
) -> ScanOutcome:
    outcome = ScanOutcome()
    try:
        reported = read_reported_clients(connection, clients_topic, timeout=timeout)
    except Exception as exc:  # noqa: BLE001
        outcome.problems.append(f"cluster {cluster.name}: cannot read {clients_topic}: {_describe_error(exc)}")
        return outcome
    if not reported.complete:
        outcome.notes.append(f"cluster {cluster.name}: {clients_topic} was not read to its end within {timeout:g}s")
    if reported.undecodable:
        outcome.notes.append(f"cluster {cluster.name}: {reported.undecodable} record(s) of {clients_topic} skipped")
    if not reported.clients:
        return outcome
    broker: dict[str, Any] | None
    try:
        broker = broker_configs(admin, min(brokers), timeout=timeout) if brokers else {}
    except Exception as exc:  # noqa: BLE001 - the broker's limits only sharpen P010
        broker = None
        outcome.notes.append(f"cluster {cluster.name}: broker settings unknown: {_describe_error(exc)}")
    context = LintContext(broker_configs=broker)
    for record in reported.clients:
        subject = client_subject(record)
        library = LIBRARIES.get(record.library)
        if library is None:
            outcome.notes.append(f"cluster {cluster.name}: {subject}: unknown client library {record.library!r}")
            continue
        guarantee = cluster_guarantee
        if record.kind == "consumer" and record.group in guarantees_by_group:
            guarantee = strictest(guarantees_by_group[record.group])
        client_context = context
        if library == "java":
            # the client's own version, as `audit lint --client-version` gives it
            try:
                client_context = replace(context, client_version=reported_java_client_version(record.library_version))
            except LintInputError as exc:
                outcome.notes.append(
                    f"cluster {cluster.name}: {subject}: linted as {java_version_label(None)}: {mask_text(str(exc))}"
                )
        try:
            results = lint(
                record.config,
                client=library,
                kind=record.kind,
                guarantee=guarantee,
                context=client_context,
                subject=subject,
            )
        except LintInputError as exc:
            outcome.notes.append(f"cluster {cluster.name}: {subject}: not linted: {mask_text(str(exc))}")
            continue
        outcome.results.extend(ScanResult(result, subject, cluster.name) for result in results)
        outcome.linted["clients"] += 1
    return outcome


def _summary(outcome: ScanOutcome, clusters: int) -> str:
    parts = [f"{clusters} cluster{'s' if clusters != 1 else ''}"]
    for what in ("brokers", "topics", "clients"):
        parts.append(f"{outcome.linted.get(what, 0)} {what}")
    return ", ".join(parts)


def scan_all(
    trigger: str = LintScan.SCHEDULE,
    *,
    requested_by: User | None = None,
    clusters: Iterable[Cluster] | None = None,
    clients_topic: str = CLIENTS_TOPIC,
    timeout: float = 15.0,
) -> LintScan:
    """Lint every configured cluster (or ``clusters``) and store the scan in one transaction."""
    started = timezone.now()
    chosen = list(Cluster.objects.prefetch_related("bindings") if clusters is None else clusters)
    outcome = ScanOutcome()
    for cluster in chosen:
        outcome.extend(scan_cluster(cluster, clients_topic=clients_topic, timeout=timeout))
    if not chosen:
        outcome.notes.append("no cluster is configured (audit apply FILE adds them)")
    for problem in outcome.problems:
        log.warning("lint scan: %s", problem)
    scan = record_scan(
        outcome.results,
        trigger=trigger,
        started_at=started,
        requested_by=requested_by,
        summary=_summary(outcome, len(chosen)),
        error="\n".join(outcome.problems),
        notes=outcome.notes,
    )
    alert_on_scan_safely(scan, [cluster.name for cluster in chosen])
    return scan


# --- a pasted config -------------------------------------------------------------------------


@dataclass(frozen=True)
class PastedLint:
    """A pasted config's results, and what the lint took it for."""

    fmt: str
    results: list[ScanResult]
    linted_as: str  # "librdkafka client", "java client, java 3.9.2", "Spring Boot's java client, java 4.0 (default)"
    java_version: str | None  # "java 3.9.2" or "java 4.0 (default)" when a config was linted as Java's
    notes: tuple[str, ...] = ()  # what of the text was not linted (a Spring document for another profile)


def lint_pasted(
    text: str,
    *,
    fmt: str | None,
    client: str,
    guarantee: str,
    kind: str | None = None,
    client_version: str | None = None,
    source: str = "pasted config",
    profiles: Sequence[str] | None = None,
) -> PastedLint:
    """Lint pasted text, the Java client at ``client_version`` (default 4.0), a Spring Boot file's
    documents for ``profiles`` (see parsers.parse_text). Raises LintInputError."""
    fmt = fmt or guess_format(text)
    described = lint_text_described(
        text,
        fmt=fmt,
        client=client,
        guarantee=guarantee,
        kind=kind,
        context=LintContext(client_version=client_version),
        source=source,
        profiles=profiles,
    )
    return PastedLint(
        fmt=fmt,
        results=[ScanResult(result, f"{result.target} ({source})") for result in described.results],
        linted_as=described.linted_as,
        java_version=described.java_version,
        notes=described.notes,
    )


def store_pasted(
    pasted: PastedLint,
    *,
    guarantee: str,
    started_at: datetime,
    requested_by: User | None = None,
) -> LintScan:
    return record_scan(
        pasted.results,
        trigger=LintScan.PASTE,
        started_at=started_at,
        requested_by=requested_by,
        guarantee=guarantee,
        summary=f"pasted {pasted.fmt} config ({pasted.linted_as})",
        notes=pasted.notes,
    )


# --- storing ---------------------------------------------------------------------------------


@transaction.atomic
def record_scan(
    results: Sequence[ScanResult],
    *,
    trigger: str,
    started_at: datetime,
    requested_by: User | None = None,
    guarantee: str = "",
    summary: str = "",
    error: str = "",
    notes: Sequence[str] = (),
) -> LintScan:
    """Store a finished scan and its results together; browsers hear of it after the commit."""
    counts = {severity: 0 for severity in ("error", "warning", "info")}
    for item in results:
        counts[item.result.severity] += 1
    scan = LintScan.objects.create(
        started_at=started_at,
        finished_at=timezone.now(),
        trigger=trigger,
        guarantee=guarantee,
        status=LintScan.FAILED if error else LintScan.OK,
        error=mask_text(error),
        notes=[mask_text(note) for note in notes],
        summary=summary[:300],
        requested_by=requested_by if requested_by is not None and requested_by.is_authenticated else None,
        error_count=counts["error"],
        warning_count=counts["warning"],
        info_count=counts["info"],
    )
    LintResultRow.objects.bulk_create(
        LintResultRow(
            scan=scan,
            rule=item.result.rule,
            title=item.result.title,
            severity=item.result.severity,
            target_kind=item.result.target,
            cluster=item.cluster,
            subject=item.subject[:500],
            config_key=item.result.config,
            value=item.result.value,
            expected=item.result.expected,
            message=item.result.message,
            guarantee=item.result.guarantee,
            source=item.result.source,
        )
        for item in results
    )
    if trigger != LintScan.PASTE:
        publish("lint", "scan", scan.as_event())
    return scan


def latest_scan() -> LintScan | None:
    """The newest scan of the live system (pasted configs are not part of it)."""
    return LintScan.objects.exclude(trigger=LintScan.PASTE).order_by("-finished_at", "-id").first()
