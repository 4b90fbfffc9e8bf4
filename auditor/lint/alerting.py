"""Lint problems for the webhook channels, judged after each scan of the live system.

Each result is a problem ``lint:<severity>`` per (cluster, target subject, rule); the
channels' ``lint_severity`` decides which severities they hear of (``error`` by
default in the examples). A problem still present in the next scan folds into its open
alert; one that is gone is resolved — but only for the clusters that scan covered.

A failed scan (a part could not be linted) raises and resolves nothing: its missing
results mean "not read", not "fixed". Pasted configs are nobody's pipeline and never
alert.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable

from django.db.models import QuerySet

from auditor.alerts.models import Alert
from auditor.alerts.owners import watch_owner
from auditor.alerts.problems import MAX_FINGERPRINT, raise_problem, resolve_problem
from auditor.lint.models import LintResultRow, LintScan
from auditor.pipelines.models import Binding, Cluster

log = logging.getLogger(__name__)

FINGERPRINT_PREFIX = "lint:"
TOPIC_SUBJECT = "topic "


def fingerprint(severity: str, rule: str, cluster: str, subject: str) -> str:
    """``lint:<severity>:<rule>:<cluster>:<subject>``; a long subject is shortened with its hash."""
    text = f"{FINGERPRINT_PREFIX}{severity}:{rule}:{cluster}:{subject}"
    if len(text) <= MAX_FINGERPRINT:
        return text
    digest = hashlib.sha256(f"{cluster}\0{subject}".encode()).hexdigest()[:16]
    return f"{FINGERPRINT_PREFIX}{severity}:{rule}:{cluster[:40]}:{subject[:100]}~{digest}"


def _bindings_by_topic(clusters: Iterable[str]) -> dict[tuple[str, str], Binding | None]:
    """The one binding on each (cluster, topic); None where several share the topic."""
    found: dict[tuple[str, str], Binding | None] = {}
    for binding in Binding.objects.select_related("cluster").filter(cluster__name__in=list(clusters)):
        key = (binding.cluster.name, binding.topic)
        found[key] = None if key in found else binding
    return found


def _raise(row: LintResultRow, scan: LintScan, binding: Binding | None) -> str:
    key = fingerprint(row.severity, row.rule, row.cluster, row.subject)
    raise_problem(
        f"lint:{row.severity}",
        key,
        binding,
        f"{row.rule} {row.title}: {row.subject}" + (f" on cluster {row.cluster}" if row.cluster else ""),
        {
            "scan": scan.pk,
            "rule": row.rule,
            "severity": row.severity,
            "cluster": row.cluster,
            "subject": row.subject,
            "config": row.config_key,
            "value": row.value,
            "expected": row.expected,
            "message": row.message,
            "guarantee": row.guarantee,
        },
    )
    return key


def alert_on_scan(scan: LintScan, clusters: Iterable[str]) -> None:
    """Raise the problems of ``scan`` (which linted ``clusters``, by name) and resolve those of
    the same clusters it no longer shows."""
    if scan.trigger == LintScan.PASTE or scan.status != LintScan.OK:
        return
    clusters = sorted(set(clusters))
    bindings = _bindings_by_topic(clusters)
    present: set[str] = set()
    for row in scan.results.all():
        binding = None
        if row.subject.startswith(TOPIC_SUBJECT):
            binding = bindings.get((row.cluster, row.subject.removeprefix(TOPIC_SUBJECT)))
        present.add(_raise(row, scan, binding))
    gone = (
        Alert.objects.filter(
            state=Alert.OPEN,
            kind__startswith=FINGERPRINT_PREFIX,
            fingerprint__startswith=FINGERPRINT_PREFIX,
            details__cluster__in=clusters,
        )
        .exclude(fingerprint__in=present)
        .order_by("fingerprint")
        .values_list("fingerprint", flat=True)
        .distinct()
    )
    for key in list(gone):
        resolve_problem(key)


def cluster_alerts(cluster_name: str) -> QuerySet[Alert]:
    """The lint alerts of the cluster named so: no scan reads it under that name once it is
    deleted or renamed."""
    return Alert.objects.filter(
        kind__startswith=FINGERPRINT_PREFIX, fingerprint__startswith=FINGERPRINT_PREFIX, details__cluster=cluster_name
    )


def connect_signals() -> None:
    """A deleted or renamed cluster's lint problems are resolved (auditor.alerts.owners)."""
    watch_owner(Cluster, "cluster", cluster_alerts)


def alert_on_scan_safely(scan: LintScan, clusters: Iterable[str]) -> None:
    """alert_on_scan, logging its failures: the stored scan matters more than its alerts."""
    try:
        alert_on_scan(scan, clusters)
    except Exception:
        log.exception("could not raise or resolve the alerts of lint scan %s", scan.pk)
