"""Every rule the engine knows, in report order, and their export."""

from __future__ import annotations

import csv
import io
from typing import Any

from auditor.lint.engine.defaults import CLIENTS
from auditor.lint.engine.evidence import explains
from auditor.lint.engine.rules import cluster, consumer, consumer_startup, producer, streams
from auditor.lint.engine.terms import Rule
from auditor.vocabulary import GUARANTEES

RULES: tuple[Rule, ...] = producer.RULES + consumer.RULES + consumer_startup.RULES + cluster.RULES + streams.RULES
RULES_BY_ID: dict[str, Rule] = {rule.id: rule for rule in RULES}
CATALOG_FIELDS = ("id", "title", "target", "severity", "guarantees", "clients", "why", "fix", "explains")


def rule_as_dict(rule: Rule) -> dict[str, Any]:
    return {
        "id": rule.id,
        "title": rule.title,
        "target": rule.target,
        "severity": rule.severity,
        "guarantees": [g for g in GUARANTEES if g in rule.guarantees],
        "clients": [c for c in CLIENTS if c in rule.clients] if rule.target in ("producer", "consumer") else [],
        "why": rule.why,
        "fix": rule.fix,
        # the reconciliation findings this rule's setting can cause: [kind, cause or None]
        "explains": [[kind, cause] for kind, cause in explains(rule.id)],
    }


def catalog_as_dicts() -> list[dict[str, Any]]:
    """The catalog for export; lists are kept as lists (see catalog_as_csv for flat text)."""
    return [rule_as_dict(rule) for rule in RULES]


def catalog_as_csv() -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CATALOG_FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in catalog_as_dicts():
        writer.writerow(
            {
                **row,
                "guarantees": " ".join(row["guarantees"]),
                "clients": " ".join(row["clients"]),
                "explains": " ".join(kind if cause is None else f"{kind}:{cause}" for kind, cause in row["explains"]),
            }
        )
    return out.getvalue()
