"""Reconciliation problems for the webhook channels: one per binding, finding kind and cause,
raised while a successful run reports such findings (muted ones left out), resolved when none does."""

from __future__ import annotations

import logging
from functools import partial

from django.db import transaction
from django.db.models import Count, Q, QuerySet

from auditor.accounts.acknowledgements import mutes_in_force
from auditor.alerts.models import Alert
from auditor.alerts.owners import named_problems, watch_owner
from auditor.alerts.problems import in_savepoint, raise_problem, resolve_problem
from auditor.pipelines.models import Binding
from auditor.reconcile.models import (
    FINDING_ACK_KIND,
    FINDING_IDENTITY,
    Finding,
    ReconcileRun,
    finding_acknowledgement_key,
)
from auditor.vocabulary import FINDING_CAUSES, FINDING_KINDS

log = logging.getLogger(__name__)


def problem_fingerprint(binding: Binding, kind: str, cause: str | None) -> str:
    return f"finding:{binding.name}:{kind}" + (f":{cause}" if cause else "")


def binding_alerts(binding_name: str) -> QuerySet[Alert]:
    """The alerts of the binding named so (its problems are named after it, not linked by key)."""
    return named_problems("finding", binding_name)


def connect_signals() -> None:
    """A deleted or renamed binding's problems are resolved (auditor.alerts.owners)."""
    watch_owner(Binding, "binding", binding_alerts)


def muted_finding_counts(run: ReconcileRun) -> dict[tuple[str, str | None], tuple[int, int]]:
    """(muted, muted and new) findings of the run per (kind, cause), from the mutes in force."""
    mutes = mutes_in_force(FINDING_ACK_KIND, key_prefix=f"{run.binding_id}:")
    counts: dict[tuple[str, str | None], tuple[int, int]] = {}
    if not mutes:
        return counts  # the usual case: no finding of this binding is muted, nothing to read
    rows = Finding.objects.filter(run=run).values_list(*FINDING_IDENTITY, "is_new")
    for *identity, is_new in rows.iterator(chunk_size=5000):
        if finding_acknowledgement_key(run.binding_id, identity) in mutes:
            kind, cause = identity[0], identity[2]
            muted, muted_new = counts.get((kind, cause), (0, 0))
            counts[(kind, cause)] = (muted + 1, muted_new + int(is_new))
    return counts


def sync_problems(run: ReconcileRun) -> None:
    """Open (or fold into) one problem per binding, kind and cause found; resolve the others.

    Only a successful run speaks for its binding: a failed one leaves problems as they are, and
    so does one with unverifiable rows for `missing` problems.
    Muted findings do not count: a kind and cause whose findings are all muted raises
    nothing, and resolves nothing either (the findings are still there).

    Called inside the transaction that marks the run ok (finish_run): the run and its alerts
    are stored together. Each kind and cause is raised or resolved in a savepoint of its own,
    its failure logged: one that fails leaves the others raised or resolved, and never undoes
    the run.
    """
    try:
        with transaction.atomic():
            found = {
                (row["kind"], row["cause"]): (row["n"], row["new"])
                for row in Finding.objects.filter(run=run)
                .values("kind", "cause")
                .annotate(n=Count("id"), new=Count("id", filter=Q(is_new=True)))
            }
            muted = muted_finding_counts(run)
    except Exception:  # alerting trouble must not undo a published run
        log.exception("could not read the findings of reconcile run %s for its alerts", run.pk)
        return
    known = {(kind, None) for kind in FINDING_KINDS} | {
        (kind, cause) for kind, causes in FINDING_CAUSES.items() for cause in causes
    }
    for kind, cause in sorted(known | set(found), key=lambda kc: (kc[0], kc[1] or "")):
        fingerprint = problem_fingerprint(run.binding, kind, cause)
        in_savepoint(
            partial(
                _sync_problem, run, fingerprint, kind, cause, found.get((kind, cause)), muted.get((kind, cause), (0, 0))
            ),
            "could not raise or resolve problem %s of reconcile run %s",
            fingerprint,
            run.pk,
        )


def _sync_problem(
    run: ReconcileRun,
    fingerprint: str,
    kind: str,
    cause: str | None,
    found: tuple[int, int] | None,
    muted: tuple[int, int],
) -> None:
    """Raise or resolve one kind and cause's problem: `found` (findings, new ones) by the run,
    `muted` of them."""
    binding = run.binding
    if found is None:
        if kind == "missing" and run.unverifiable:
            # Rows the run could not judge (records that old were deleted before any run
            # read them) may be the ones reported missing: not found is not recovered.
            return
        resolve_problem(fingerprint)
        return
    (all_count, all_new), (muted_count, muted_new) = found, muted
    count, new = all_count - muted_count, all_new - muted_new
    if not count:
        return
    label = f"{kind} ({cause})" if cause else kind
    also_muted = f", {muted_count} more muted" if muted_count else ""
    raise_problem(
        f"finding:{kind}",
        fingerprint,
        binding,
        f"{count} {label} finding(s) on binding {binding.name} (run #{run.pk}{also_muted})",
        {"count": count, "new": new, "kind": kind, "cause": cause, "run_id": run.pk, "muted": muted_count},
    )
