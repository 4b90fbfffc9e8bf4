"""The evidence hook: which reconciliation findings each rule's setting explains, both ways."""

from __future__ import annotations

import pytest

from auditor.lint.engine.catalog import RULES
from auditor.lint.engine.evidence import EXPLAINS, explains, rules_explaining
from auditor.lint.models import LintResultRow
from auditor.vocabulary import FINDING_CAUSES, FINDING_KINDS


def test_it_maps_every_rule_and_only_known_findings() -> None:
    assert set(EXPLAINS) == {rule.id for rule in RULES}
    for pairs in EXPLAINS.values():
        for kind, cause in pairs:
            assert kind in FINDING_KINDS
            assert cause is None or cause in FINDING_CAUSES[kind]


def test_it_links_settings_to_the_findings_they_cause() -> None:
    assert explains("C004") == (("reprocessed", None),)
    assert ("gap", "broker-lost") in explains("P001")
    assert explains("C001") == (("unprocessed", None),)
    assert explains("P006") == explains("P007") == (("duplicate", "producer-retry"),)
    assert explains("X999") == ()


def test_it_finds_the_rules_that_explain_a_finding() -> None:
    assert rules_explaining("duplicate", "producer-retry") == ["P006", "P007", "B003", "B004", "B005", "S001"]
    assert rules_explaining("gap", "broker-lost") == ["P001", "T001", "T002", "T004", "B006", "B007", "B008"]
    assert rules_explaining("reprocessed") == ["C004", "C005", "C006", "C008", "B001", "B002", "S001"]
    assert rules_explaining("orphan") == []


@pytest.mark.parametrize(
    ("rule", "labels"),
    [("C004", ["reprocessed"]), ("P001", ["gap (broker-lost)", "missing", "gap (send-unconfirmed)"])],
)
def test_it_names_the_findings_of_a_stored_result(rule: str, labels: list[str]) -> None:
    row = LintResultRow(rule=rule)
    assert row.explains() == explains(rule)
    assert row.explains_labels() == labels
