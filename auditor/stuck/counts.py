"""Open stuck items per (rule, verdict), cached until the next diagnosis is stored.

Items only change inside record_diagnosis's transaction, which also marks its run
finished, or when a rule is deleted: the newest finish time and the set of rules name
the state the counts were taken in. Counting 100,000 open items on every page view
would otherwise be most of the stuck page's and the overview's time.
"""

from __future__ import annotations

from django.core.cache import cache
from django.db.models import Count, Max

from auditor.pipelines.models import StuckRule
from auditor.stuck.models import DiagnosisRun, StuckItem

CACHE_SECONDS = 3600


def _version() -> str:
    """The state the counts describe. The newest item id is part of it: items stored by other
    means than a finished diagnosis (a restored or re-created database, whose run times and
    rule ids repeat an earlier one's) must not be served an earlier state's counts from Redis,
    which outlives the database."""
    runs = DiagnosisRun.objects.exclude(status=DiagnosisRun.RUNNING).aggregate(last=Max("finished_at"), n=Count("id"))
    finished = runs["last"]
    rules = StuckRule.objects.aggregate(n=Count("id"), last=Max("id"))
    newest_item = StuckItem.objects.aggregate(last=Max("id"))["last"]
    # The number of finished runs too: a diagnosis's finish time is taken before its transaction,
    # so one that commits after a later-started one leaves the newest finish time as it was.
    return f"{finished.isoformat() if finished else '-'}:{runs['n']}:{rules['n']}:{rules['last']}:{newest_item}"


def open_counts() -> dict[tuple[int, str], int]:
    """(rule id, verdict) -> open items; absent pairs have none."""
    key = f"stuck:open-counts:{_version()}"
    cached = cache.get(key)
    if cached is not None:
        return {(rule, verdict): n for rule, verdict, n in cached}
    rows = StuckItem.objects.open().order_by().values_list("rule_id", "verdict").annotate(n=Count("id"))
    counted = [(rule, verdict, n) for rule, verdict, n in rows]
    cache.set(key, counted, timeout=CACHE_SECONDS)
    return {(rule, verdict): n for rule, verdict, n in counted}
