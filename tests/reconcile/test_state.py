"""The incremental state store: atomic commits, compaction, clean-up of abandoned runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from spark_jobs.binding import Binding, binding_from_dict
from spark_jobs.group_commits import SeenCommits, Span, forget, remember, standing_in
from spark_jobs.ledger_ids import LedgerId, ledger_ids_after
from spark_jobs.reconcile_extract import ReconcileError
from spark_jobs.reconcile_plan import forget_recreated_ledgers, resume_ledgers
from spark_jobs.reconcile_state import COMPACT_AFTER, StateError, StateMeta, StateStore, deltas_to_merge
from spark_jobs.reconcile_transform import KEY_INDEX_SCHEMA, RECORD_SCHEMA
from tests.support.clock import at_second


@pytest.fixture(params=["path", "file-uri"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str | Path:
    """The state dir given as a path or as a file:// URI (the URI path a cluster's shared
    store takes): both name tmp_path, which the assertions inspect directly."""
    return tmp_path if request.param == "path" else f"file://{tmp_path}"


def test_it_reads_an_empty_state_when_nothing_was_committed(spark: SparkSession, root: str | Path):
    store = StateStore(root, "tickets", "r1")
    meta = store.read_meta()
    assert meta == StateMeta()
    assert store.dataset(spark, meta, "duplicates").count() == 0


def test_it_commits_atomically_and_drops_datasets_of_abandoned_runs(
    spark: SparkSession, root: str | Path, tmp_path: Path
):
    first = StateStore(root, "tickets", "r1")
    path, _ = first.write_dataset(
        spark.createDataFrame([("a", 0, 1, at_second(1), "s", 0)], RECORD_SCHEMA), "duplicates"
    )
    first.commit(StateMeta(run_id="r1", topic_offsets={0: 5}, datasets={"duplicates": path}))

    # A run that fails after writing its datasets never commits: the state stays r1's.
    failed = StateStore(root, "tickets", "r2")
    failed.write_dataset(spark.createDataFrame([], RECORD_SCHEMA), "duplicates")
    meta = StateStore(root, "tickets", "r3").read_meta()
    assert (meta.run_id, meta.topic_offsets) == ("r1", {0: 5})
    assertDataFrameEqual(
        first.dataset(spark, meta, "duplicates"),
        spark.createDataFrame([("a", 0, 1, at_second(1), "s", 0)], RECORD_SCHEMA),
    )

    third = StateStore(root, "tickets", "r3")
    path3, _ = third.write_dataset(spark.createDataFrame([], RECORD_SCHEMA), "duplicates")
    third.commit(StateMeta(run_id="r3", datasets={"duplicates": path3}))
    assert sorted(p.name for p in (tmp_path / "tickets" / "runs").iterdir()) == ["r3"]
    assert json.loads((tmp_path / "tickets" / "state.json").read_text())["run_id"] == "r3"
    assert [p.name for p in (tmp_path / "tickets").iterdir() if p.name.endswith(".tmp")] == []


def test_it_compacts_key_index_deltas(spark: SparkSession, root: str | Path):
    deltas = []
    for i in range(COMPACT_AFTER + 1):
        store = StateStore(root, "tickets", f"r{i}")
        rows = [("a", 1, 0, i, at_second(i), "s", i, f"r{i}"), (f"k{i}", 2, 1, i, at_second(i), None, None, f"r{i}")]
        deltas.append(store.write_delta(spark.createDataFrame(rows, KEY_INDEX_SCHEMA), "keys", KEY_INDEX_SCHEMA))
    store = StateStore(root, "tickets", "last")
    compacted = store.compact(spark, deltas, "keys", KEY_INDEX_SCHEMA)
    assert compacted == ["keys/last-compacted"]
    expected = [("a", COMPACT_AFTER + 1, 0, 0, at_second(0), "s", 0, "r0")] + [
        (f"k{i}", 2, 1, i, at_second(i), None, None, f"r{i}") for i in range(COMPACT_AFTER + 1)
    ]
    assertDataFrameEqual(
        store.deltas(spark, compacted, KEY_INDEX_SCHEMA), spark.createDataFrame(expected, KEY_INDEX_SCHEMA)
    )
    assert store.compact(spark, compacted, "keys", KEY_INDEX_SCHEMA) == compacted


def test_it_merges_only_the_increments_and_leaves_a_full_runs_large_delta_alone(
    spark: SparkSession, root: str | Path, tmp_path: Path
):
    # A full run's delta of many keys, then more small incremental deltas than the limit.
    base_rows = [(f"b{i:05d}", 1, i % 2, i, at_second(i), "s", i, "r0") for i in range(20_000)]
    base = StateStore(root, "tickets", "r0").write_delta(
        spark.createDataFrame(base_rows, KEY_INDEX_SCHEMA), "keys", KEY_INDEX_SCHEMA
    )
    small_rows = {
        i: [
            ("b00007", 1, 1, 100 + i, at_second(100 + i), "s", 100 + i, f"r{i}"),
            (f"n{i}", 1, 0, i, at_second(i), None, None, f"r{i}"),
        ]
        for i in range(1, COMPACT_AFTER + 1)
    }
    small = [
        StateStore(root, "tickets", f"r{i}").write_delta(
            spark.createDataFrame(rows, KEY_INDEX_SCHEMA), "keys", KEY_INDEX_SCHEMA
        )
        for i, rows in small_rows.items()
    ]
    base_files = sorted(p.name for p in (tmp_path / "tickets" / "keys" / "r0").iterdir())
    compacted = StateStore(root, "tickets", "last").compact(spark, [base, *small], "keys", KEY_INDEX_SCHEMA)
    # The large delta stands as written; the increments became one delta, last.
    assert compacted == [base, "keys/last-compacted"]
    assert sorted(p.name for p in (tmp_path / "tickets" / "keys" / "r0").iterdir()) == base_files
    # b00007, seen again by every increment, keeps its first sighting among them and their count.
    merged = [("b00007", COMPACT_AFTER, 1, 101, at_second(101), "s", 101, "r1")] + [
        (f"n{i}", 1, 0, i, at_second(i), None, None, f"r{i}") for i in range(1, COMPACT_AFTER + 1)
    ]
    assertDataFrameEqual(
        StateStore(root, "tickets", "x").deltas(spark, ["keys/last-compacted"], KEY_INDEX_SCHEMA),
        spark.createDataFrame(merged, KEY_INDEX_SCHEMA),
    )


@pytest.mark.parametrize(
    ("sizes", "expected"),
    [
        ([5] * COMPACT_AFTER, 0),  # within the limit: nothing merged
        ([5] * (COMPACT_AFTER + 1), COMPACT_AFTER + 1),  # equals: all of them
        ([1000] + [5] * COMPACT_AFTER, COMPACT_AFTER),  # a large one first: the small ones after it
        ([1000, 40] + [5] * (COMPACT_AFTER - 1), COMPACT_AFTER - 1),  # tiers: 40 outweighs the 5s after it
        ([1000, 40] + [5] * 7 + [200], 9),  # a heavy newest delta pulls in the tier before it
        ([10**7, 10**6, 10**5, 10**4, 10**3, 100, 10, 1, 1], 2),  # steep tiers: the two newest
        ([10**k for k in range(10, 0, -1)] + [1, 1], 5),  # but enough to leave no more than the limit
    ],
)
def test_it_picks_the_newest_deltas_to_merge_by_size_tier(sizes: list[int], expected: int):
    assert deltas_to_merge(sizes, COMPACT_AFTER) == expected


def test_it_refuses_a_state_file_of_another_format(tmp_path: Path):
    (tmp_path / "tickets").mkdir()
    (tmp_path / "tickets" / "state.json").write_text(json.dumps({"format": 99}))
    with pytest.raises(StateError, match="--full"):
        StateStore(tmp_path, "tickets", "r1").read_meta()


def test_it_keeps_a_proof_of_backdated_records_whole_or_refuses_it():
    proof = {"topic": "t", "partition": 0, "offset": 7, "timestamp_ms": 1, "written_after_ms": 2, "run_id": "r1"}
    meta = StateMeta.from_json({"format": StateMeta().to_json()["format"], "backdated": proof, "read_highs": {"0": 7}})
    assert (meta.backdated, meta.read_highs, meta.read_at_ms) == (proof, {0: 7}, None)
    assert StateMeta.from_json(meta.to_json()) == meta
    assert StateMeta.from_json({"format": meta.to_json()["format"]}).backdated is None  # an older state
    with pytest.raises(StateError, match="backdated is malformed"):
        StateMeta.from_json({"format": meta.to_json()["format"], "backdated": {"topic": "t"}})


def test_it_keeps_each_groups_first_marks_through_the_state_file():
    meta = StateMeta(first_marks={"g": {0: 4, 3: 0}})
    again = StateMeta.from_json(json.loads(json.dumps(meta.to_json())))  # keys become text and back
    assert again.first_marks == {"g": {0: 4, 3: 0}}
    assert StateMeta.from_json({"format": meta.to_json()["format"]}).first_marks == {}  # an older state


def test_it_keeps_the_offsets_each_group_was_seen_to_commit_past_in_the_log_and_forgets_rewritten_partitions():
    marks = {0: (2, 20), 1: (5, 20)}  # (log start, log end) as the run read them
    first, unproven = remember({}, {}, [("g", 0, 10), ("g", 1, 3), ("h", 0, 7), ("h", 1, 50)], marks, "r1", 1_000)
    # g on 1 committed below the log start, h on 1 past the log end (set by hand): nothing proven
    assert first == {
        "g": {0: SeenCommits((Span(2, 10, "r1", "r1", 1_000),))},
        "h": {0: SeenCommits((Span(2, 7, "r1", "r1", 1_000),))},
    }
    assert unproven == {"h": {1: 50}}
    # r2: g moved back on 0 (nothing added), h went on while the log start stayed behind it (one
    # span), g on 1 now past the log start; h's 50 is now below the log end, but it was made
    # before the records up to it were written: still nothing
    later, unproven = remember(
        first, unproven, [("g", 0, 4), ("h", 0, 12), ("g", 1, 9), ("h", 1, 50)], {0: (6, 30), 1: (6, 60)}, "r2", 2_000
    )
    assert later["g"] == {0: first["g"][0], 1: SeenCommits((Span(6, 9, "r2", "r2", 2_000),))}
    assert later["h"] == {0: SeenCommits((Span(2, 12, "r1", "r2", 2_000),))}
    assert unproven == {"h": {1: 50}}
    # r3: retention passed h's offset before the group did: a second span, the first one kept;
    # h committed another offset on 1: proven again; a rebuild's read of a rewritten partition is not
    third, unproven = remember(
        later, unproven, [("h", 0, 25), ("h", 1, 55), ("g", 1, 12)], {0: (15, 40), 1: (6, 60)}, "r3", 3_000, [1]
    )
    assert unproven == {"h": {1: 55}, "g": {1: 12}} and third["g"][1] == later["g"][1] and 1 not in third["h"]
    third, unproven = remember(third, unproven, [("h", 1, 55)], {1: (6, 60)}, "r4", 4_000)  # the same: nothing
    assert 1 not in third["h"] and unproven == {"h": {1: 55}, "g": {1: 12}}
    spans = third["h"][0]
    assert spans == SeenCommits((Span(2, 12, "r1", "r2", 2_000), Span(15, 25, "r3", "r3", 3_000)))
    assert spans.offset == 25 and [spans.passed(o) for o in (24, 25)] == [True, False]
    assert [spans.passed_in_log(o) is not None for o in (1, 2, 11, 12, 14, 15, 24, 25)] == [
        False, True, True, False, False, True, True, False,
    ]  # fmt: skip
    assert spans.below(20) == SeenCommits((Span(2, 12, "r1", "r2", 2_000), Span(15, 20, "r3", "r3", 3_000)))
    assert spans.below(2) is None
    assert forget(third, [0]) == {"g": {1: later["g"][1]}}  # h had partition 0 only
    again = StateMeta.from_json(
        json.loads(json.dumps(StateMeta(group_commits=third, unproven_commits=unproven).to_json()))
    )
    assert again.group_commits == third and again.unproven_commits == unproven
    assert StateMeta.from_json({"format": again.to_json()["format"]}).group_commits == {}  # an older state
    for bad in ({"g": {"0": [[1, 2, "r"]]}}, {"g": {"0": [[5, 5, "r", "r", 1]]}}, {"g": {"0": []}}):
        with pytest.raises(StateError, match="group_commits is malformed"):
            StateMeta.from_json({"format": again.to_json()["format"], "group_commits": bad})
    # unprocessed is judged by a group's offset now, or where it has none, by the one seen
    assert standing_in([("g", 0, 4)], third, ["g", "h", "x"]) == [
        ("g", 0, 4, None), ("g", 1, 9, "r2"), ("h", 0, 25, "r3"),
    ]  # fmt: skip
    assert standing_in([("g", 0, 4)], third, ["g"]) == [("g", 0, 4, None), ("g", 1, 9, "r2")]


def _binding_reading_ledgers() -> Binding:
    """A binding whose consumer ledger is _audit.a and producer ledger _audit.p."""
    return binding_from_dict(
        {
            "name": "b",
            "topic": "t",
            "bootstrap_servers": "localhost:9092",
            "source_url": "postgresql://x@localhost/x",
            "table": "public.t",
            "key_column": "id",
            "created_column": "created_at",
            "consumer_groups": ["g"],
            "consumer_ledger_topic": "_audit.a",
            "producer_ledger_topic": "_audit.p",
        }
    )


def test_it_keeps_where_each_ledger_topic_was_read_up_to_through_the_state_file():
    read = {"consumer": {"_audit.a": {0: 7, 2: 3}, "_audit.b": {0: 1}}, "producer": {"_audit.p": {1: 4}}}
    again = StateMeta.from_json(json.loads(json.dumps(StateMeta(ledgers_read=read).to_json())))
    assert again.ledgers_read == read
    with pytest.raises(StateError, match="ledgers_read is malformed"):
        StateMeta.from_json({"format": again.to_json()["format"], "ledgers_read": {"consumer": {"a": {"x": 1}}}})
    # A state from before it was kept resumes the ledger it last read where it stopped, and
    # one that did not keep even that ledger's name, the ledger the binding names.
    binding = _binding_reading_ledgers()
    older = {"format": again.to_json()["format"], "run_id": "r1"}
    meta = StateMeta.from_json(older | {"consumer_ledger_topic": "_audit.a", "consumer_ledger_offsets": {"0": 7}})
    assert meta.ledgers_read == {}
    assert resume_ledgers(binding, meta) == []
    assert meta.consumer_ledger_offsets == {0: 7}
    meta = StateMeta.from_json(older | {"producer_ledger_offsets": {"1": 4}})
    assert resume_ledgers(binding, meta) == [] and meta.producer_ledger_offsets == {1: 4}
    # Another ledger named since: read from its start, the one read kept for a return to it.
    meta = StateMeta.from_json(older | {"consumer_ledger_topic": "_audit.z", "consumer_ledger_offsets": {"0": 9}})
    assert resume_ledgers(binding, meta) == [
        "the consumer ledger is now _audit.a (earlier runs read _audit.z): it is read from its start"
    ]
    assert meta.consumer_ledger_offsets == {} and meta.ledgers_read["consumer"] == {"_audit.z": {0: 9}}


def test_it_reads_a_ledger_topic_created_again_from_its_start_and_resumes_one_of_unknown_id():
    binding = _binding_reading_ledgers()
    ids = {"consumer": {"_audit.a": "id-a", "_audit.z": "id-z"}, "producer": {"_audit.p": "id-p"}}
    written = StateMeta(
        run_id="r1",
        ledgers_read={"consumer": {"_audit.a": {0: 7}, "_audit.z": {0: 9}}, "producer": {"_audit.p": {1: 4}}},
        consumer_ledger_topic="_audit.a",
        consumer_ledger_offsets={0: 7},
        producer_ledger_topic="_audit.p",
        producer_ledger_offsets={1: 4},
        ledger_ids=ids,
    )
    meta = StateMeta.from_json(json.loads(json.dumps(written.to_json())))
    assert meta.ledger_ids == ids
    with pytest.raises(StateError, match="ledger_ids is malformed"):
        StateMeta.from_json({"format": written.to_json()["format"], "ledger_ids": {"consumer": {"_audit.a": 3}}})
    # The consumer ledger has another id now: created again, read from its start; the
    # producer ledger is the same topic, resumed.
    now = {"consumer": LedgerId("_audit.a", "id-a2"), "producer": LedgerId("_audit.p", "id-p")}
    recreated, warnings = forget_recreated_ledgers(binding, meta, now)
    assert recreated == {
        "consumer": "the consumer ledger _audit.a was deleted and created again since run r1 read it (topic id id-a, "
        "now id-a2)"
    }
    assert warnings == [f"{recreated['consumer']}: the new topic is read from its start; what earlier runs read of "
                        "the deleted one is kept"]  # fmt: skip
    assert resume_ledgers(binding, meta) == []
    assert meta.consumer_ledger_offsets == {} and meta.producer_ledger_offsets == {1: 4}
    assert meta.ledgers_read["consumer"] == {"_audit.z": {0: 9}}  # another ledger's, kept
    # After the run: the new topic's id with where the run stopped; the other ledger's kept.
    read = {"consumer": {"_audit.a": {0: 2}, "_audit.z": {0: 9}}, "producer": {"_audit.p": {1: 6}}}
    assert ledger_ids_after(meta.ledger_ids, now, read) == {
        "consumer": {"_audit.a": "id-a2", "_audit.z": "id-z"},
        "producer": {"_audit.p": "id-p"},
    }
    # A state without ids (written before they were kept), or a cluster without them: the
    # offsets are resumed as they are, and no id is kept that nothing read.
    older = StateMeta.from_json(json.loads(json.dumps(written.to_json())) | {"ledger_ids": None})
    assert older.ledger_ids == {}
    assert forget_recreated_ledgers(binding, older, now) == ({}, [])
    resume_ledgers(binding, older)
    assert older.consumer_ledger_offsets == {0: 7}
    unknown = {"consumer": LedgerId("_audit.a", None), "producer": LedgerId("_audit.p", None)}
    assert forget_recreated_ledgers(binding, StateMeta.from_json(written.to_json()), unknown) == ({}, [])
    assert ledger_ids_after(ids, unknown, read) == {"consumer": {"_audit.z": "id-z"}}
    # The id kept, and the one now unreadable: nothing tells the offsets are of this topic.
    unreadable = {"consumer": LedgerId("_audit.a", None, "no answer"), "producer": LedgerId("_audit.p", "id-p")}
    with pytest.raises(ReconcileError, match=r"consumer ledger _audit\.a's id could not be read"):
        forget_recreated_ledgers(binding, StateMeta.from_json(written.to_json()), unreadable)
    # Unreadable where none is kept: resumed as before, and said.
    _, warnings = forget_recreated_ledgers(binding, older, unreadable)
    assert warnings == [
        "the consumer ledger _audit.a's id could not be read, so its deletion and re-creation before the next run "
        "would go unseen: no answer"
    ]


def test_it_keeps_what_the_state_is_of_through_the_state_file():
    identity = {"topic": "t", "record_key": "key", "table": "public.x", "key_column": "id"}
    again = StateMeta.from_json(json.loads(json.dumps(StateMeta(identity=identity).to_json())))
    assert again.identity == identity
    assert StateMeta.from_json({"format": again.to_json()["format"]}).identity == {}  # an older state
    zoned = StateMeta.from_json(json.loads(json.dumps(StateMeta(timestamp_zone="Asia/Tokyo").to_json())))
    assert zoned.timestamp_zone == "Asia/Tokyo"
    assert StateMeta.from_json({"format": again.to_json()["format"]}).timestamp_zone is None  # an older state


def test_it_keeps_the_latest_record_of_an_unprobed_producer_through_the_state_file():
    again = StateMeta.from_json(json.loads(json.dumps(StateMeta(unprobed_record_ms=1_700_000_000_123).to_json())))
    assert again.unprobed_record_ms == 1_700_000_000_123
    assert StateMeta.from_json({"format": again.to_json()["format"]}).unprobed_record_ms is None  # no run yet
    # A state from before it was kept: its runs may have read such records, up to its last read.
    older = {"format": again.to_json()["format"], "run_id": "r1", "read_at_ms": 1_700_000_500_000}
    assert StateMeta.from_json(older).unprobed_record_ms == 1_700_000_500_000
    del older["read_at_ms"]
    older["window_upper"] = "2023-11-14T22:13:20+00:00"
    assert StateMeta.from_json(older).unprobed_record_ms == 1_700_000_000_000
    with pytest.raises(StateError, match="unprobed_record_ms is not a timestamp"):
        StateMeta.from_json({"format": again.to_json()["format"], "unprobed_record_ms": "soon"})


def test_a_state_it_cannot_reach_is_not_called_corrupt_nor_given_up(root: str | Path, tmp_path: Path):
    # state.json a directory: reading it fails with an I/O error, as an unreachable store or
    # mount does. Starting over (--full) would throw away what earlier runs saw.
    (tmp_path / "tickets" / "state.json").mkdir(parents=True)
    with pytest.raises(StateError, match=r"cannot be read .*left as it is") as caught:
        StateStore(root, "tickets", "r1").read_meta()
    assert "--full" not in str(caught.value)
    assert (tmp_path / "tickets" / "state.json").is_dir()


def test_it_names_a_state_location_it_cannot_use():
    with pytest.raises(StateError, match=r"unsupported scheme 'ftp'"):
        StateStore("ftp://host/state", "tickets", "r1")
    with pytest.raises(StateError, match=r"absolute path"):
        StateStore("file://relative/state", "tickets", "r1")


def test_it_writes_deltas_sorted_by_key_in_each_file(spark: SparkSession, tmp_path: Path):
    import random

    import pyarrow.parquet as pq

    keys = [f"k{i:05d}" for i in range(2000)]
    random.Random(3).shuffle(keys)
    rows = [(k, 1, 0, i, at_second(i % 50), "s", i, "r1") for i, k in enumerate(keys)]
    frame = spark.createDataFrame(rows, KEY_INDEX_SCHEMA).repartition(3)
    relative = StateStore(tmp_path, "tickets", "r1").write_delta(frame, "keys", KEY_INDEX_SCHEMA)
    files = sorted((tmp_path / "tickets" / relative).glob("*.parquet"))
    assert files
    seen: list[str] = []
    for file in files:
        written = pq.read_table(file, columns=["key"]).column("key").to_pylist()
        assert written == sorted(written), file.name
        seen += written
    assert sorted(seen) == sorted(keys)


def test_it_keeps_how_far_the_cleaner_may_have_emptied_keys_through_the_state_file():
    meta = StateMeta(keys_emptied_until="2027-01-15T11:01:00+00:00", emptied_tracked=True)
    again = StateMeta.from_json(json.loads(json.dumps(meta.to_json())))
    assert (again.keys_emptied_until, again.emptied_tracked) == ("2027-01-15T11:01:00+00:00", True)
    # a state from before runs tracked it vouches for no read of a compacted topic
    older = StateMeta.from_json({"format": again.to_json()["format"], "run_id": "r1", "read_at_ms": 1})
    assert (older.keys_emptied_until, older.emptied_tracked) == (None, False)


def test_it_keeps_what_probed_sessions_left_unjudged_through_the_state_file():
    spans = [("g", 0, 6, 9, "s1", 1_700), ("g", 1, 0, 4, "s2", 1_800)]
    again = StateMeta.from_json(json.loads(json.dumps(StateMeta(passed_unjudged=spans).to_json())))
    assert again.passed_unjudged == spans
    # a span written before its commit time was kept takes the time its run read, later than the commit
    older_spans = {"format": again.to_json()["format"], "read_at_ms": 2_000, "passed_unjudged": [["g", 0, 6, 9, "s1"]]}
    assert StateMeta.from_json(older_spans).passed_unjudged == [("g", 0, 6, 9, "s1", 2_000)]
    # the highest marks of the sessions whose spans wait
    marks = [("g", 0, "s1", 12, 1_900)]
    assert StateMeta.from_json(json.loads(json.dumps(StateMeta(session_marks=marks).to_json()))).session_marks == marks
    assert StateMeta.from_json(older_spans).session_marks == []
    with pytest.raises(StateError, match="session_marks is malformed"):
        StateMeta.from_json({"format": again.to_json()["format"], "session_marks": [["g", 0, "s1", 12]]})
    # a state from before it was kept left nothing waiting: its runs dropped those records
    assert StateMeta.from_json({"format": again.to_json()["format"], "run_id": "r1"}).passed_unjudged == []
    closed = StateMeta.from_json(json.loads(json.dumps(StateMeta(sessions_closed=["s2", "s1"]).to_json())))
    assert closed.sessions_closed == ["s1", "s2"]
    with pytest.raises(StateError, match="passed_unjudged is malformed"):
        StateMeta.from_json({"format": again.to_json()["format"], "passed_unjudged": [["g", "x", 1, 2, "s"]]})
