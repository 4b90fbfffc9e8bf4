"""The stuck-items page: counts per verdict, the items with evidence, risks, a chart, live."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import Any

from django.contrib import messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from auditor.accounts.acknowledgements import current_acknowledgement
from auditor.accounts.forms import AcknowledgeForm
from auditor.accounts.models import Acknowledgement
from auditor.accounts.pages import acknowledge_from_post, acknowledge_many_from_post, withdraw_from_post
from auditor.accounts.roles import OPERATOR, has_role, require_role
from auditor.lib.readable import readable_fields
from auditor.pipelines.models import StuckRule
from auditor.stuck.acknowledgements import attach_items_acknowledgements, item_json
from auditor.stuck.counts import open_counts
from auditor.stuck.formatting import format_age, format_moment
from auditor.stuck.models import STUCK_ITEM_ACK_KIND, DiagnosisRun, StuckItem, VerdictCount
from auditor.stuck.runlock import diagnosis_running
from auditor.stuck.tasks import diagnose_rule_task
from auditor.vocabulary import STUCK_VERDICTS

log = logging.getLogger(__name__)

ITEMS_PER_PAGE = 50
# Evidence fields the items table shows in its own Where column.
SHOWN_APART = ("topic", "partition", "offset")
RECENT_RUNS = 10
CHART_HOURS = 24
# What each verdict means, for the cards (the page an operator opens first).
VERDICT_HELP = {
    "never-produced": "in the table, never sent to Kafka",
    "produce-failed": "the send failed and was not retried",
    "broker-lost": "acked by the broker, then gone",
    "aborted": "only in an aborted transaction",
    "waiting": "in the topic, the consumer has not got there",
    "skipped": "the group committed past it unprocessed",
    "processed-not-updated": "processed, but the row update failed",
    "expired": "deleted by retention before it was consumed",
    "unknown": "the auditor could not tell (see why)",
}
VERDICT_TONE = {verdict: "bad" for verdict in STUCK_VERDICTS} | {"waiting": "warn", "unknown": "muted"}
# Cards and items: where delivery broke first, then what may still resolve itself.
DISPLAY_ORDER = (*(v for v in STUCK_VERDICTS if VERDICT_TONE[v] == "bad"), "waiting", "unknown")


def _filters(request: HttpRequest, rules: list[StuckRule]) -> dict[str, str]:
    return _filters_from(request.GET, rules)


def _filters_from(query: QueryDict, rules: list[StuckRule]) -> dict[str, str]:
    rule = query.get("rule", "")
    verdict = query.get("verdict", "")
    return {
        "rule": rule if rule in {r.name for r in rules} else "",
        "verdict": verdict if verdict in STUCK_VERDICTS else "",
    }


def _page_number(request: HttpRequest) -> int:
    raw = request.GET.get("page", "1")
    return int(raw) if raw.isdigit() and len(raw) < 9 else 1


def _key_url(item: StuckItem) -> str | None:
    """The item's key page (its delivery timeline); None for keys no URL can carry."""
    try:
        return reverse("reconcile:key", args=[item.rule.binding.name, item.key])
    except NoReverseMatch:
        return None


def _page_items(scope: QuerySet[StuckItem], counts: dict[str, int], verdict: str, start: int) -> list[StuckItem]:
    """One page of items in display order (verdict, oldest first, then id), read verdict by verdict.

    The counts per verdict are known, so the page is found without sorting every open item:
    each verdict's slice is read through the (verdict, age) index of open items.
    """
    order = [verdict] if verdict else list(DISPLAY_ORDER)
    found: list[StuckItem] = []
    offset, stop = 0, start + ITEMS_PER_PAGE
    for v in order:
        size = counts.get(v, 0)
        lo, hi = max(start - offset, 0), min(stop - offset, size)
        if lo < hi:
            # Ids first (an index-only scan, however deep the page), then those rows.
            ids = list(scope.filter(verdict=v).order_by("-age_seconds", "id").values_list("id", flat=True)[lo:hi])
            rows = StuckItem.objects.select_related("rule__binding").order_by().in_bulk(ids)
            found.extend(rows[i] for i in ids if i in rows)
        offset += size
        if offset >= stop:
            break
    return found


def page_data(filters: dict[str, str], page: int = 1) -> dict[str, Any]:
    """Everything the page shows, as JSON-ready data (first render and live refreshes)."""
    scope = StuckItem.objects.open()
    runs = DiagnosisRun.objects.select_related("rule", "rule__binding")
    points = VerdictCount.objects.filter(at__gte=timezone.now() - timedelta(hours=CHART_HOURS))
    if filters["rule"]:
        scope = scope.filter(rule__name=filters["rule"])
        runs = runs.filter(rule__name=filters["rule"])
        points = points.filter(rule__name=filters["rule"])
    counts = dict.fromkeys(STUCK_VERDICTS, 0)
    rule_ids = {r.pk for r in StuckRule.objects.filter(name=filters["rule"])} if filters["rule"] else None
    for (rule_id, verdict), n in open_counts().items():
        if rule_ids is None or rule_id in rule_ids:
            counts[verdict] = counts.get(verdict, 0) + n
    items_total = counts[filters["verdict"]] if filters["verdict"] else sum(counts.values())
    pages = max(1, -(-items_total // ITEMS_PER_PAGE))
    page = min(max(1, page), pages)
    items = _page_items(scope, counts, filters["verdict"], (page - 1) * ITEMS_PER_PAGE)
    latest_ok: dict[int, DiagnosisRun] = {}
    for run in runs.filter(status=DiagnosisRun.OK).order_by("rule_id", "-started_at").distinct("rule_id"):
        latest_ok[run.rule_id] = run
    risks = [
        risk | {"rule": run.rule.name}
        for run in sorted(latest_ok.values(), key=lambda r: r.rule.name)
        for risk in run.risks
    ]
    return {
        "filters": filters,
        "counts": counts,
        "total": sum(counts.values()),
        "items": [
            item_json(item)
            | {"evidence_fields": readable_fields(item.evidence, skip=SHOWN_APART), "key_url": _key_url(item)}
            for item in attach_items_acknowledgements(items)
        ],
        "items_total": items_total,
        "items_limit": ITEMS_PER_PAGE,
        "page": page,
        "pages": pages,
        "runs": [run.as_event() for run in runs[:RECENT_RUNS]],
        "risks": risks,
        "points": [
            {"rule": name, "at": at.isoformat(), "verdict": verdict, "count": count}
            for name, at, verdict, count in points.order_by("at").values_list("rule__name", "at", "verdict", "count")
        ],
    }


@require_GET
def index(request: HttpRequest) -> HttpResponse:
    rules = list(StuckRule.objects.select_related("binding").order_by("name"))
    filters = _filters(request, rules)
    data = page_data(filters, _page_number(request))
    cards = [
        {
            "verdict": v,
            "count": data["counts"][v],
            "count_text": f"{data['counts'][v]:,}",
            "help": VERDICT_HELP[v],
            "tone": VERDICT_TONE[v],
        }
        for v in DISPLAY_ORDER
    ]
    # The rows show the acknowledgement as the shared template does, from the model.
    acks = Acknowledgement.objects.in_bulk([i["acknowledgement"]["id"] for i in data["items"] if i["acknowledgement"]])
    can_operate = has_role(request.user, OPERATOR)
    return render(
        request,
        "stuck/index.html",
        {
            "rules": rules,
            "filters": filters,
            "cards": cards,
            "data": data,
            "latest": data["runs"][0] if data["runs"] else None,
            "latest_finished": format_moment(data["runs"][0]["finished_at"]) if data["runs"] else "",
            "total_text": f"{data['total']:,}",
            "run_rows": [{"run": run, "started": format_moment(run["started_at"])} for run in data["runs"]],
            "rows": [
                {
                    "item": item,
                    "tone": VERDICT_TONE[item["verdict"]],
                    "evidence": json.dumps(item["evidence"], indent=1),
                    "age": format_age(item["age_seconds"]),
                    "first_seen": format_moment(item["first_seen"]),
                    "ack": acks.get(item["acknowledgement"]["id"]) if item["acknowledgement"] else None,
                    "key_url": item.get("key_url"),
                }
                for item in data["items"]
            ],
            "can_diagnose": can_operate,
            "can_operate": can_operate,
            "ack_form": AcknowledgeForm(),
            "verdicts": DISPLAY_ORDER,
            "page": {
                "data": data,
                "help": VERDICT_HELP,
                "tones": VERDICT_TONE,
                "verdicts": list(DISPLAY_ORDER),
                "can_operate": can_operate,
                # The live redraw builds each row's forms from these (the id replaces the 0).
                "ack_url": reverse("stuck:item-acknowledge", args=[0]),
                "withdraw_url": reverse("stuck:item-withdraw", args=[0]),
            },
        },
    )


@require_GET
def items_json(request: HttpRequest) -> JsonResponse:
    """The page's data for the current filters: its live refresh after each diagnosis."""
    rules = list(StuckRule.objects.all())
    return JsonResponse(page_data(_filters(request, rules), _page_number(request)))


@require_role(OPERATOR)
@require_POST
def diagnose_now(request: HttpRequest) -> HttpResponse:
    """Queue a diagnosis of one rule (or every rule) on the worker; results arrive live."""
    wants_json = "application/json" in request.headers.get("Accept", "")
    name = request.POST.get("rule", "")
    rules = list(StuckRule.objects.order_by("name"))
    chosen = [r for r in rules if r.name == name] if name else rules
    if name and not chosen:
        status, text, code = "failed", f"Unknown stuck rule {name!r}.", 400
    elif not chosen:
        status, text, code = "failed", "No stuck rule is configured.", 400
    else:
        queued, busy = [], []
        try:
            for rule in chosen:
                if diagnosis_running(rule):
                    busy.append(rule.name)
                    continue
                diagnose_rule_task.delay(rule.pk, DiagnosisRun.MANUAL, request.user.pk)
                queued.append(rule.name)
        except Exception:  # the broker being down is shown to the user
            log.exception("could not queue a diagnosis")
            status, text, code = "failed", "Could not queue the diagnosis: the task queue is unreachable.", 503
        else:
            parts = []
            if queued:
                parts.append(f"Diagnosis queued for {', '.join(queued)}; the page updates when it finishes.")
            if busy:
                parts.append(f"Already running for {', '.join(busy)}.")
            status, text, code = ("queued" if queued else "running"), " ".join(parts), 202
    if wants_json:
        return JsonResponse({"status": status, "message": text}, status=code)
    (messages.error if status == "failed" else messages.info)(request, text)
    target = redirect("stuck:index")
    if name and chosen:
        target["Location"] += f"?rule={name}"
    return target


def _item_label(item: StuckItem) -> str:
    return f"stuck item {item.key} ({item.rule.name})"


@require_role(OPERATOR)
@require_POST
def item_acknowledge(request: HttpRequest, item_id: int) -> HttpResponse:
    """Acknowledge or mute an open stuck item; a muted item raises no alert while the mute lasts."""
    item = get_object_or_404(StuckItem.objects.open().select_related("rule"), pk=item_id)
    acknowledge_from_post(request, STUCK_ITEM_ACK_KIND, item.acknowledgement_key, _item_label(item))
    return redirect("stuck:index")


@require_role(OPERATOR)
@require_POST
def item_withdraw(request: HttpRequest, item_id: int) -> HttpResponse:
    item = get_object_or_404(StuckItem.objects.select_related("rule"), pk=item_id)
    withdraw_from_post(
        request, current_acknowledgement(STUCK_ITEM_ACK_KIND, item.acknowledgement_key), _item_label(item)
    )
    return redirect("stuck:index")


MAX_BULK = 10_000


@require_role(OPERATOR)
@require_POST
def items_acknowledge(request: HttpRequest) -> HttpResponse:
    """Acknowledge or mute a selection of open items with one form: the rows ticked, or every
    open item matching the page's filters (at most MAX_BULK, all or none)."""
    rules = list(StuckRule.objects.order_by("name"))
    filters = _filters_from(request.POST, rules)
    chosen = StuckItem.objects.open()
    if request.POST.get("scope") == "matching":
        if filters["rule"]:
            chosen = chosen.filter(rule__name=filters["rule"])
        if filters["verdict"]:
            chosen = chosen.filter(verdict=filters["verdict"])
    else:
        chosen = chosen.filter(pk__in=[int(v) for v in request.POST.getlist("item") if v.isdigit()])
    ids = list(chosen.order_by("id").values_list("id", flat=True)[: MAX_BULK + 1])
    query = "&".join(f"{k}={v}" for k, v in filters.items() if v)
    back = redirect(reverse("stuck:index") + (f"?{query}" if query else ""))
    if len(ids) > MAX_BULK:
        messages.error(request, f"Not acknowledged: more than {MAX_BULK} items match; narrow the filters.")
        return back
    acknowledge_many_from_post(request, STUCK_ITEM_ACK_KIND, [str(i) for i in ids], "stuck items")
    return back
