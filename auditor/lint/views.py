"""Lint pages: the latest scan's results, the rule catalog and its exports, a paste form."""

from __future__ import annotations

import logging
from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.debug import sensitive_post_parameters, sensitive_variables
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from auditor.accounts.roles import OPERATOR, SignedInRequest, require_role
from auditor.lint import tasks
from auditor.lint.engine.catalog import RULES, catalog_as_csv, catalog_as_dicts
from auditor.lint.engine.defaults import CLIENTS, KINDS
from auditor.lint.engine.errors import LintInputError
from auditor.lint.engine.evidence import describe, explains
from auditor.lint.engine.linter import client_version_option
from auditor.lint.engine.parsers import FORMATS
from auditor.lint.links import BindingIndex, finding_links
from auditor.lint.models import SEVERITIES, LintResultRow, LintScan
from auditor.lint.service import DEFAULT_GUARANTEE, latest_scan, lint_pasted, store_pasted
from auditor.vocabulary import GUARANTEES

log = logging.getLogger(__name__)

MAX_PASTE_CHARS = 200_000


def _filters(request: HttpRequest) -> dict[str, str]:
    """The severity and target-kind filters; unknown values are ignored."""
    severity = request.GET.get("severity", "")
    kind = request.GET.get("kind", "")
    return {"severity": severity if severity in SEVERITIES else "", "kind": kind if kind in KINDS else ""}


def _chosen_scan(request: HttpRequest) -> tuple[LintScan | None, bool]:
    """The scan asked for with ?scan=<id> (pinned: no live refresh), else the latest one."""
    requested = request.GET.get("scan", "")
    if requested.isdigit():
        return get_object_or_404(LintScan, pk=int(requested)), True
    return latest_scan(), False


def with_finding_links(rows: list[LintResultRow]) -> list[LintResultRow]:
    """The rows, each knowing the links to the findings its setting explains."""
    index = BindingIndex.load()
    for row in rows:
        row.finding_links = finding_links(row.rule, row.cluster, row.target_kind, row.subject, index)
    return rows


def _rows(scan: LintScan | None, filters: dict[str, str]) -> list[LintResultRow]:
    if scan is None:
        return []
    rows = scan.results.all()
    if filters["severity"]:
        rows = rows.filter(severity=filters["severity"])
    if filters["kind"]:
        rows = rows.filter(target_kind=filters["kind"])
    return with_finding_links(list(rows.in_report_order()))


def _results_payload(scan: LintScan | None, rows: list[LintResultRow]) -> dict[str, Any]:
    return {
        "scan": scan.as_event() if scan else None,
        "results": [
            {**row.as_dict(), "value": row.shown_value, "finding_links": [link.as_dict() for link in row.finding_links]}
            for row in rows
        ],
    }


@require_GET
def index(request: HttpRequest) -> HttpResponse:
    scan, pinned = _chosen_scan(request)
    filters = _filters(request)
    rows = _rows(scan, filters)
    return render(
        request,
        "lint/index.html",
        {
            "scan": scan,
            "pinned": pinned,
            "rows": rows,
            "filters": filters,
            "severities": SEVERITIES,
            "kinds": KINDS,
            "recent_scans": LintScan.objects.exclude(trigger=LintScan.PASTE)[:10],
            # embedded with json_script: the page's script reads it, nothing is interpreted as HTML
            "lint_page": {"scan": scan.pk if scan else None, "pinned": pinned, "filters": filters},
        },
    )


@require_GET
def results_json(request: HttpRequest) -> JsonResponse:
    """A scan's results (the latest unless ?scan=<id>), filtered like the page; the page's live refresh."""
    scan, _ = _chosen_scan(request)
    return JsonResponse(_results_payload(scan, _rows(scan, _filters(request))))


@require_role(OPERATOR)
@require_POST
def scan_now(request: HttpRequest) -> HttpResponse:
    """Queue a scan on the worker; its result reaches open pages over the websocket."""
    wants_json = "application/json" in request.headers.get("Accept", "")
    if tasks.scan_running():
        status, text = "running", "A lint scan is already running; its results will show here when it finishes."
    else:
        try:
            tasks.scan_all_task.delay(LintScan.MANUAL, request.user.pk)
        except Exception:  # the broker being down is shown to the user
            log.exception("could not queue a lint scan")
            status, text = "failed", "Could not queue the scan: the task queue is unreachable."
        else:
            status, text = "queued", "Scan queued; the results update here when it finishes."
    if wants_json:
        return JsonResponse({"status": status, "message": text}, status=503 if status == "failed" else 202)
    (messages.error if status == "failed" else messages.info)(request, text)
    return redirect("lint:index")


# --- catalog ---------------------------------------------------------------------------------


@require_GET
def catalog(request: HttpRequest) -> HttpResponse:
    target = request.GET.get("target", "")
    guarantee = request.GET.get("guarantee", "")
    rules = [
        {
            "rule": rule,
            "guarantees": [g for g in GUARANTEES if g in rule.guarantees],
            "clients": [c for c in CLIENTS if c in rule.clients] if rule.target in ("producer", "consumer") else [],
            "explains": describe(explains(rule.id)),
        }
        for rule in RULES
        if (target not in KINDS or rule.target == target)
        and (guarantee not in GUARANTEES or guarantee in rule.guarantees)
    ]
    return render(
        request,
        "lint/catalog.html",
        {"rules": rules, "kinds": KINDS, "guarantees": GUARANTEES, "target": target, "guarantee": guarantee},
    )


@require_GET
def catalog_json(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"rules": catalog_as_dicts()})


@require_GET
def catalog_csv(request: HttpRequest) -> HttpResponse:
    response = HttpResponse(catalog_as_csv(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="lint-catalog.csv"'
    return response


# --- paste -----------------------------------------------------------------------------------


class PasteForm(forms.Form):
    config = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 16, "cols": 90, "spellcheck": "false", "autocomplete": "off"}),
        max_length=MAX_PASTE_CHARS,
        help_text="Not kept: secrets in it are masked in the results and never stored.",
    )
    format = forms.ChoiceField(choices=[("", "guess"), *[(f, f) for f in FORMATS]], required=False)
    client = forms.ChoiceField(choices=[(c, c) for c in CLIENTS], initial="librdkafka")
    kind = forms.ChoiceField(
        choices=[("", "from the file (Spring YAML)"), *[(k, k) for k in KINDS]], required=False, initial="producer"
    )
    guarantee = forms.ChoiceField(choices=[(g, g) for g in GUARANTEES], initial=DEFAULT_GUARANTEE)
    client_version = forms.CharField(
        label="Java client version",
        max_length=20,
        required=False,
        widget=forms.TextInput(attrs={"placeholder": "4.0", "size": 8, "autocomplete": "off"}),
        help_text="kafka-clients version, e.g. 3.9.2 (default 4.0): Java clients and Spring Boot configs only.",
    )

    def clean_client_version(self) -> str | None:
        try:
            return client_version_option(self.cleaned_data.get("client_version"))
        except LintInputError as exc:
            raise forms.ValidationError(exc.reason) from None


def _blank_form(data: dict[str, Any] | None = None) -> PasteForm:
    """A form that keeps the chosen options but never the pasted text (it may hold secrets)."""
    initial = {key: value for key, value in (data or {}).items() if key != "config"}
    return PasteForm(initial=initial or None)


@sensitive_post_parameters("config")
@sensitive_variables("text", "form")
@require_http_methods(["GET", "POST"])
def paste(request: SignedInRequest) -> HttpResponse:
    context: dict[str, Any] = {"form": _blank_form()}
    if request.method == "POST":
        form = PasteForm(request.POST)
        if form.is_valid():
            options = {
                key: form.cleaned_data[key] for key in ("format", "client", "kind", "guarantee", "client_version")
            }
            context["form"] = _blank_form(options)
            text = form.cleaned_data["config"]
            started = timezone.now()
            try:
                pasted = lint_pasted(
                    text,
                    fmt=options["format"] or None,
                    client=options["client"],
                    guarantee=options["guarantee"],
                    kind=options["kind"] or None,
                    client_version=options["client_version"],
                )
            except LintInputError as exc:
                context["input_error"] = str(exc)  # names the line, never quotes it
            else:
                scan = store_pasted(
                    pasted, guarantee=options["guarantee"], started_at=started, requested_by=request.user
                )
                context["scan"] = scan
                context["rows"] = with_finding_links(list(scan.results.in_report_order()))
                context["results_url"] = f"{reverse('lint:index')}?scan={scan.pk}"
        else:
            # the errors name the field (e.g. "too long"), never its value
            context["form"] = _blank_form({k: v for k, v in request.POST.items() if k in PasteForm.base_fields})
            context["form_errors"] = [f"{name}: {' '.join(map(str, errs))}" for name, errs in form.errors.items()]
    return render(request, "lint/paste.html", context)
