"""The text exposition format and the collector registry, checked against Prometheus' own parser."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from auditor.metrics.exposition import escape_help, escape_label_value, format_value, render
from auditor.metrics.registry import Sample, SampleError, collect_all, discovered_collectors

pytestmark = pytest.mark.django_db  # each collector runs in a savepoint

HOSTILE = 'a"b\\c\nd} e="f",'


def test_it_escapes_label_values_and_help_as_the_format_says():
    assert escape_label_value(HOSTILE) == 'a\\"b\\\\c\\nd} e=\\"f\\",'
    assert escape_help('back\\slash "quoted"\nnext') == 'back\\\\slash "quoted"\\nnext'


@pytest.mark.parametrize(
    ("value", "text"),
    [(3, "3"), (0, "0"), (2.5, "2.5"), (0.04, "0.04"), (1e-05, "1e-05"), (math.inf, "+Inf"), (-math.inf, "-Inf")],
)
def test_it_formats_values(value, text):
    assert format_value(value) == text
    assert format_value(math.nan) == "NaN"


def test_it_renders_what_prometheus_parses_back():
    def collect() -> Iterator[Sample]:
        yield Sample("auditor_things", 2, {"topic": HOSTILE, "partition": "0"}, help="Things\nper topic \\")
        yield Sample("auditor_things", 0.25, {"topic": "plain", "partition": "1"}, help="Things\nper topic \\")
        yield Sample("auditor_seen", 7, help="Seen", type="counter")

    text = render(collect_all({"demo": collect}))
    assert text.endswith("\n")
    lines = text.splitlines()
    assert lines[:5] == [
        "# HELP auditor_up 1 when the auditor answered this scrape",
        "# TYPE auditor_up gauge",
        "auditor_up 1",
        "# HELP auditor_things Things\\nper topic \\\\",
        "# TYPE auditor_things gauge",
    ]
    assert 'auditor_things{topic="a\\"b\\\\c\\nd} e=\\"f\\",",partition="0"} 2' in lines
    assert "auditor_seen 7" in lines and 'auditor_collector_up{collector="demo"} 1' in lines

    parsed = {family.name: family for family in text_string_to_metric_families(text)}
    things = parsed["auditor_things"]
    assert things.documentation == "Things\nper topic \\"
    assert [(s.labels, s.value) for s in things.samples] == [
        ({"topic": HOSTILE, "partition": "0"}, 2.0),
        ({"topic": "plain", "partition": "1"}, 0.25),
    ]
    assert parsed["auditor_seen"].type == "counter"


def test_it_leaves_out_a_failing_collector_and_says_so():
    def broken() -> Iterator[Sample]:
        yield Sample("auditor_half", 1)
        raise RuntimeError("boom")

    def duplicate() -> list[Sample]:
        return [Sample("auditor_twice", 1, {"a": "x"}), Sample("auditor_twice", 2, {"a": "x"})]

    def healthy() -> list[Sample]:
        return [Sample("auditor_fine", 1)]

    text = render(collect_all({"broken": broken, "duplicate": duplicate, "healthy": healthy}))
    assert "auditor_half" not in text and "auditor_twice" not in text and "auditor_fine 1" in text.splitlines()
    up = {s.labels["collector"]: s.value for s in _samples(text, "auditor_collector_up")}
    assert up == {"broken": 0.0, "duplicate": 0.0, "healthy": 1.0}


@pytest.mark.parametrize(
    ("sample", "message"),
    [
        (Sample("kafka_lag", 1), "must start with 'auditor_'"),
        (Sample("auditor_bad-name", 1), "must start with 'auditor_'"),
        (Sample("auditor_x", 1, {"__reserved": "v"}), "label name '__reserved'"),
        (Sample("auditor_x", 1, {"partition": 3}), "label partition must be a string"),  # type: ignore[dict-item]
        (Sample("auditor_x", True), "must be an int or a float"),
        (Sample("auditor_x", None), "must be an int or a float"),  # type: ignore[arg-type]
        (Sample("auditor_x", 1, type="histogram"), "must be gauge, counter or untyped"),  # type: ignore[arg-type]
    ],
)
def test_it_refuses_samples_the_format_cannot_carry(sample, message):
    with pytest.raises(SampleError, match=message):
        sample.check()


def test_it_refuses_one_name_with_two_types():
    def mixed() -> list[Sample]:
        return [Sample("auditor_x", 1, {"a": "1"}), Sample("auditor_x", 1, {"a": "2"}, type="counter")]

    text = render(collect_all({"mixed": mixed}))
    assert 'auditor_collector_up{collector="mixed"} 0' in text.splitlines()


def test_it_finds_the_collectors_of_the_installed_apps():
    collectors = discovered_collectors()
    assert {"canary", "lint"} <= set(collectors)
    assert collectors["canary"].__module__ == "auditor.canary.metrics"


def _samples(text: str, name: str) -> list:
    return [s for family in text_string_to_metric_families(text) for s in family.samples if s.name == name]
