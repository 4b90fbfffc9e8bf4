"""Scoring a scenario: false alarms and misses per key, from expected and got verdicts."""

from __future__ import annotations

from auditor.lab.compare import Score, merge, score, verdict_counts


def test_it_counts_nothing_when_the_auditor_says_what_the_truth_says() -> None:
    judged = score({"1": {"missing"}}, {"1": {"missing"}})
    assert (judged.false_alarms, judged.misses, judged.wrong) == (0, 0, [])


def test_it_counts_a_verdict_without_truth_as_a_false_alarm_and_a_lacking_one_as_a_miss() -> None:
    judged = score({"2": {"missing/broker-lost"}}, {"3": {"missing"}})
    assert (judged.false_alarms, judged.misses) == (1, 1)
    assert judged.wrong == [
        {"key": "2", "expected": ["missing/broker-lost"], "got": []},
        {"key": "3", "expected": [], "got": ["missing"]},
    ]


def test_it_counts_a_wrong_cause_as_both() -> None:
    judged = score({"7": {"duplicate/producer-retry"}}, {"7": {"duplicate/unknown"}})
    assert (judged.false_alarms, judged.misses) == (1, 1)


def test_it_leaves_ignored_verdicts_out_unless_they_are_expected() -> None:
    ignored = frozenset({"stuck:waiting"})
    assert score({}, {"4": {"stuck:waiting"}}, ignored).false_alarms == 0
    assert score({"4": {"stuck:waiting"}}, {}, ignored).misses == 1


def test_it_counts_verdicts_over_keys() -> None:
    assert verdict_counts({"1": {"missing"}, "2": {"missing", "stuck:unknown"}}) == {"missing": 2, "stuck:unknown": 1}


def test_it_merges_answers_key_by_key() -> None:
    merged = merge({"1": {"missing"}, "lint topic": {"lint:acks"}}, {"1": {"stuck:waiting"}}, {})
    assert merged == {"1": {"missing", "stuck:waiting"}, "lint topic": {"lint:acks"}}


def test_an_optional_verdict_is_neither_an_alarm_nor_a_miss_on_its_key_only() -> None:
    optional = {"11": {"reprocessed"}}
    assert score({}, {"11": {"reprocessed"}}, optional=optional) == Score(0, 0, [])
    assert score({}, {}, optional=optional) == Score(0, 0, [])
    # on a key the truth does not allow it, it is a false alarm
    judged = score({}, {"11": {"reprocessed"}, "12": {"reprocessed"}}, optional=optional)
    assert (judged.false_alarms, judged.misses) == (1, 0)
    assert judged.wrong == [{"key": "12", "expected": [], "got": ["reprocessed"]}]
    # a verdict both expected and optional is expected
    assert score({"11": {"reprocessed"}}, {}, optional=optional).misses == 1
