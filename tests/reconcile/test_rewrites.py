"""Where and when a processed mark may be of a record the broker lost (reconcile_rewrites), on
small frames built here: which offsets a rebuild can prove survived, when the first record
after them was written, and what the rules leave out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pyspark.sql import SparkSession

from spark_jobs.mark_rules import RECORD_SLACK_MS, MarkRule, rules_from_json, rules_to_json
from spark_jobs.reconcile_rewrites import find_mark_rules, judged_despite_rewrites, without_rewritten_marks
from spark_jobs.reconcile_state import StateMeta
from spark_jobs.reconcile_transform import KEY_INDEX_SCHEMA, PROCESSED_SCHEMA, RECORD_SCHEMA

T0 = datetime(2026, 11, 28, 6, 0, tzinfo=UTC)


def ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def test_the_rules_survive_state_json_and_only_add_up():
    rules = [MarkRule(0, 2, 1000), MarkRule(1, -1, 2000), MarkRule(0, 7, 3000)]
    meta = StateMeta.from_json({**StateMeta(marks_rewritten=rules_to_json(rules)).to_json()})
    assert sorted(rules_from_json(meta.marks_rewritten), key=repr) == sorted(rules, key=repr)
    assert rules_to_json(rules + rules) == {"0": [[2, 1000], [7, 3000]], "1": [[-1, 2000]]}
    assert StateMeta.from_json(StateMeta().to_json()).marks_rewritten == {}  # and older states: none


def test_a_rebuild_proves_the_surviving_offsets_and_dates_the_first_new_record(spark: SparkSession):
    earlier_run = T0  # the earlier run read the partitions then; the truncation came after
    index = spark.createDataFrame(
        [  # what earlier runs saw: keys a-d at offsets 0-3 of partition 0, e at offset 0 of partition 1
            ("a", 1, 0, 0, T0 - timedelta(hours=1), None, None, "r1"),
            ("b", 1, 0, 1, T0 - timedelta(hours=1), None, None, "r1"),
            ("c", 1, 0, 2, T0 - timedelta(minutes=30), None, None, "r1"),
            ("d", 1, 0, 3, T0 - timedelta(minutes=20), None, None, "r1"),
            ("e", 1, 1, 0, T0 - timedelta(minutes=20), None, None, "r1"),
        ],
        KEY_INDEX_SCHEMA,
    )
    records = spark.createDataFrame(
        [  # now: a and b survived; x took offset 2, y offset 3; partition 1 lost e, z took its offset
            ("a", 0, 0, T0 - timedelta(hours=1), None, None),
            ("b", 0, 1, T0 - timedelta(hours=1), None, None),
            ("x", 0, 2, T0 + timedelta(minutes=5), None, None),
            ("y", 0, 3, T0 + timedelta(minutes=6), None, None),
            ("z", 1, 0, T0 + timedelta(minutes=7), None, None),
            ("old", 1, 1, T0 - timedelta(hours=2), None, None),  # written before the earlier run: not new
        ],
        RECORD_SCHEMA,
    )
    upper = T0 + timedelta(minutes=10)
    rules = find_mark_rules(records, index, [0, 1, 2], {0: 0, 1: 0, 2: 4}, earlier_run, upper, 30)
    assert sorted(rules, key=repr) == sorted(
        [
            MarkRule(0, 1, ms(T0 + timedelta(minutes=5, seconds=30))),  # b at 1 proven; x the first new record
            MarkRule(1, -1, ms(T0 + timedelta(minutes=7, seconds=30))),  # nothing proven; z the first new one
            MarkRule(2, 3, ms(upper)),  # no record since: until this run
        ],
        key=repr,
    )


def test_the_rules_leave_out_marks_and_records_only_past_the_offset_and_up_to_the_time(spark: SparkSession):
    rules = [MarkRule(0, 1, 5000)]
    marks = spark.createDataFrame(
        [
            ("g", "s", 0, 1, None, 1000),  # at the proven offset: kept
            ("g", "s", 0, 2, None, 4000),  # past it, before the bound: left out
            ("g", "s", 0, 2, None, 5000),  # at the bound: left out
            ("g", "s", 0, 2, None, 5001),  # after it: kept
            ("g", "s", 1, 2, None, 1000),  # another partition: kept
        ],
        PROCESSED_SCHEMA,
    )
    kept = {(r["partition"], r["offset"], r["ts_ms"]) for r in without_rewritten_marks(marks, rules).collect()}
    assert kept == {(0, 1, 1000), (0, 2, 5001), (1, 2, 1000)}

    def at(ms_: int) -> datetime:
        return datetime.fromtimestamp(ms_ / 1000, UTC)

    records = spark.createDataFrame(
        [
            ("a", 0, 1, at(1000), None, None),
            ("b", 0, 2, at(5000), None, None),
            ("c", 0, 3, at(5000 + RECORD_SLACK_MS), None, None),  # within the slack for clocks: unjudged
            ("e", 0, 3, at(5001 + RECORD_SLACK_MS), None, None),
            ("d", 1, 3, at(1000), None, None),
        ],
        RECORD_SCHEMA,
    )
    assert {r["key"] for r in judged_despite_rewrites(records, rules).collect()} == {"a", "d", "e"}
    assert judged_despite_rewrites(records, []).count() == 5
