"""recall_marks: the processed marks a run kept (processed_coverage), looked up by offset."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from auditor.reconcile.memory import IndexedTopic, IndexRows, recall_marks
from spark_jobs.state_location import StateLocation


def indexed(tmp_path: Path, rows: list[tuple[str, int, int, int]], starts: dict[int, int]) -> IndexedTopic:
    (tmp_path / "cov").mkdir()
    group, partition, start, end = (list(c) for c in zip(*rows, strict=True))
    table = pa.table(
        {
            "group": group,
            "partition": pa.array(partition, pa.int32()),
            "start": pa.array(start, pa.int64()),
            "end": pa.array(end, pa.int64()),
        }
    )
    pq.write_table(table, tmp_path / "cov" / "part-0.parquet")
    meta = {"datasets": {"processed_coverage": "cov"}}
    return IndexedTopic(starts=starts, run_id="run-1", index=IndexRows(StateLocation(str(tmp_path)), meta, []))


def test_it_finds_each_offset_in_its_groups_intervals_below_where_the_index_vouches(tmp_path: Path) -> None:
    memory = indexed(
        tmp_path,
        [("g", 0, 0, 2), ("g", 0, 5, 9), ("g", 0, 12, 12), ("h", 0, 3, 3), ("g", 1, 0, 50), ("other", 0, 0, 99)],
        starts={0: 12, 1: 100},
    )
    positions = [(0, 1), (0, 3), (0, 4), (0, 9), (0, 10), (0, 12), (1, 7), (2, 0)]
    marks = recall_marks(memory, ["g", "h"], positions)
    # (0, 12) is at the index's start (read again, not vouched for); "other" is not asked for
    assert sorted(marks) == [("g", 0, 1), ("g", 0, 9), ("g", 1, 7), ("h", 0, 3)]
    assert {m.seen_by_run for m in marks.values()} == {"run-1"}
    assert recall_marks(memory, [], positions) == {}


def test_it_recalls_nothing_from_an_index_it_cannot_use(tmp_path: Path) -> None:
    memory = indexed(tmp_path, [("g", 0, 0, 9)], starts={0: 10})
    memory.reason = "partition 0 was rewritten since the last reconciliation"
    assert recall_marks(memory, ["g"], [(0, 1)]) == {}
