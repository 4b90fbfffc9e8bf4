"""The engine's outputs: the catalog export, JSON results and the exit code."""

from __future__ import annotations

import csv
import io
import json
import re

from auditor.lint.engine.catalog import RULES, catalog_as_csv, catalog_as_dicts
from auditor.lint.engine.defaults import KINDS
from auditor.lint.engine.linter import exit_code, lint, results_to_json
from auditor.vocabulary import GUARANTEES

RESULT_KEYS = {
    "rule",
    "title",
    "severity",
    "target",
    "subject",
    "config",
    "value",
    "expected",
    "message",
    "guarantee",
    "source",
    "why",
    "fix",
}


def test_it_exports_a_complete_catalog() -> None:
    rows = catalog_as_dicts()
    assert [row["id"] for row in rows] == [rule.id for rule in RULES]
    assert len({row["id"] for row in rows}) == len(rows)
    for row in rows:
        assert re.fullmatch(r"[PCTBS]\d{3}", row["id"])
        assert row["target"] in KINDS
        assert row["severity"] in ("error", "warning", "info")
        assert row["guarantees"] and set(row["guarantees"]) <= set(GUARANTEES)
        assert row["title"] and row["why"] and row["fix"]


def test_it_exports_the_catalog_as_csv() -> None:
    rows = list(csv.DictReader(io.StringIO(catalog_as_csv())))
    p001 = next(row for row in rows if row["id"] == "P001")
    assert p001["guarantees"] == "at-least-once exactly-once"
    assert p001["clients"] == "librdkafka java"
    assert next(row for row in rows if row["id"] == "P105")["clients"] == "librdkafka"
    assert len(rows) == len(RULES)


def test_it_only_applies_rules_to_the_guarantees_they_protect() -> None:
    assert lint({"acks": "0", "retries": 0}, client="librdkafka", kind="producer", guarantee="at-most-once") == []
    (p001,) = [
        r for r in lint({"acks": "0"}, client="java", kind="producer", guarantee="at-least-once") if r.rule == "P001"
    ]
    assert p001.severity == "error"
    assert p001.message.startswith("with acks=0 the producer counts a record as sent")


def test_it_writes_results_as_json() -> None:
    results = lint({"acks": "1"}, client="librdkafka", kind="producer", guarantee="at-least-once")
    payload = json.loads(results_to_json(results))
    assert list(payload) == ["results"]
    first = payload["results"][0]
    assert set(first) == RESULT_KEYS
    assert first == {
        "rule": "P001",
        "title": "acks is not all",
        "severity": "error",
        "target": "producer",
        "subject": None,
        "config": "acks",
        "value": "1",
        "expected": "all",
        "message": "with acks=1 the leader acks before any follower has the record: when the leader fails over "
        "before a follower copies it, the acked write is lost",
        "guarantee": "at-least-once",
        "source": "explicit",
        "why": "an acked write is lost when the leader fails over before a follower has copied it",
        "fix": "set acks=all (with min.insync.replicas=2 on RF 3 topics)",
    }


def test_it_exits_non_zero_only_for_errors() -> None:
    errors = lint({"acks": "1"}, client="java", kind="producer", guarantee="at-least-once")
    warnings = lint({}, client="librdkafka", kind="producer", guarantee="at-least-once")
    assert {r.severity for r in warnings} == {"warning"}
    assert exit_code(errors) == 1
    assert exit_code(warnings) == 0
    assert exit_code([]) == 0
