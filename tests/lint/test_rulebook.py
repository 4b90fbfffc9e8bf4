"""RuleBook: a rule's metadata declared on its check, in declaration order."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from auditor.lint.engine.terms import Finding, RuleBook, Subject

EOS = frozenset({"exactly-once"})


def test_it_declares_rules_in_order_with_the_books_target_and_clients() -> None:
    book = RuleBook("streams", clients=frozenset({"java"}))

    @book.rule("S901", "second declared first", EOS, "warning", why="w", fix="f")
    def check_b(s: Subject) -> Iterator[Finding]:
        yield from ()

    @book.rule("S900", "first", EOS, "error", why="why", fix="fix", clients=frozenset({"librdkafka"}))
    def check_a(s: Subject) -> Iterator[Finding]:
        yield from ()

    assert [(r.id, r.target, r.severity, r.why, r.fix) for r in book.rules] == [
        ("S901", "streams", "warning", "w", "f"),
        ("S900", "streams", "error", "why", "fix"),
    ]
    assert [r.clients for r in book.rules] == [frozenset({"java"}), frozenset({"librdkafka"})]
    assert book.rules[0].check is check_b  # the decorator hands the check back unchanged


def test_it_refuses_a_rule_id_declared_twice() -> None:
    book = RuleBook("topic")

    @book.rule("T900", "one", EOS, "error", why="w", fix="f")
    def check_one(s: Subject) -> Iterator[Finding]:
        yield from ()

    with pytest.raises(ValueError, match="T900 is declared twice"):

        @book.rule("T900", "two", EOS, "error", why="w", fix="f")
        def check_two(s: Subject) -> Iterator[Finding]:
            yield from ()
