"""Stuck-item problems for the webhook channels: one per rule and verdict, raised while items
have it (muted ones left out), resolved when none do unless the run was degraded."""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING

from django.db.models import QuerySet

from auditor.accounts.acknowledgements import mutes_in_force
from auditor.alerts.models import Alert
from auditor.alerts.owners import named_problems, watch_owner
from auditor.alerts.problems import in_savepoint, raise_problem, resolve_problem
from auditor.pipelines.models import StuckRule
from auditor.stuck.models import STUCK_ITEM_ACK_KIND, StuckItem

if TYPE_CHECKING:  # the service imports this module: the type only, for annotations
    from auditor.stuck.service import DiagnosisResult

log = logging.getLogger(__name__)

ALERT_SAMPLE = 10  # keys listed in an alert's details


def rule_alerts(rule_name: str) -> QuerySet[Alert]:
    """The alerts of the stuck rule named so (its problems are named after it)."""
    return named_problems("stuck", rule_name)


def connect_signals() -> None:
    """A deleted or renamed rule's problems are resolved (auditor.alerts.owners); deleting a
    binding deletes its rules, and so resolves theirs."""
    watch_owner(StuckRule, "stuck rule", rule_alerts)


def muted_keys(items: list[StuckItem]) -> set[str]:
    """Keys of the items an operator muted (mutes in force), to leave out of alerts."""
    mutes = mutes_in_force(STUCK_ITEM_ACK_KIND)
    return {item.key for item in items if item.acknowledgement_key in mutes} if mutes else set()


def update_problems(rule: StuckRule, result: DiagnosisResult, counts: dict[str, int], muted: set[str]) -> None:
    """One alert problem per (rule, verdict): raised while items have it, resolved when none do.

    A degraded run (something unreadable) resolves nothing: its items went to unknown
    because the auditor could not see, not because they recovered. Nor does a truncated run
    (more rows stuck than it examined): a verdict none of the oldest rows has may be others'. Muted items do not
    count: a verdict whose items are all muted raises nothing and resolves nothing.

    Each verdict is raised or resolved in a savepoint of its own, its failure logged: one that
    fails leaves the others raised or resolved, and the diagnosis stored.
    """
    for verdict, count in counts.items():
        fingerprint = f"stuck:{rule.name}:{verdict}"
        in_savepoint(
            partial(_update_problem, rule, result, fingerprint, verdict, count, muted),
            "could not raise or resolve problem %s of stuck rule %s",
            fingerprint,
            rule.name,
        )


def _update_problem(
    rule: StuckRule, result: DiagnosisResult, fingerprint: str, verdict: str, count: int, muted: set[str]
) -> None:
    if count:
        keys = [v.row.key for v in result.items if v.diagnosis.verdict == verdict and v.row.key not in muted]
        if not keys:
            return
        also_muted = f" ({count - len(keys)} more muted)" if count > len(keys) else ""
        raise_problem(
            f"stuck:{verdict}",
            fingerprint,
            rule.binding,
            f"{len(keys)} item(s) of stuck rule {rule.name} are {verdict}{also_muted}",
            {
                "rule": rule.name,
                "verdict": verdict,
                "count": len(keys),
                "keys": keys[:ALERT_SAMPLE],
                "muted": count - len(keys),
            },
        )
    elif not result.degraded and not result.truncated:
        # (a truncated run examined only the oldest rows: the verdict may be among the others)
        resolve_problem(fingerprint)
