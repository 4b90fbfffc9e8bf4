"""Evidence as readable fields."""

from auditor.lib.readable import readable_fields


def test_it_names_positions_and_times_and_cuts_long_lists() -> None:
    evidence = {
        "count": 2,
        "records": [{"partition": 0, "offset": n, "ts_ms": 1700000000000} for n in range(6)],
        "ts_ms": 1700000000000,
        "topic": "t",
    }
    assert readable_fields(evidence, skip=("topic",)) == [
        ("count", "2"),
        ("records", "6: 0@0, 0@1, 0@2, 0@3 (+2 more)"),
        ("ts ms", "2023-11-14 22:13:20 UTC"),
    ]


def test_it_says_nothing_for_no_evidence_and_keeps_plain_values() -> None:
    assert readable_fields(None) == []
    assert readable_fields("text") == [("value", "text")]
    assert readable_fields({"ok": True, "error": None}) == [("ok", "yes"), ("error", "—")]
