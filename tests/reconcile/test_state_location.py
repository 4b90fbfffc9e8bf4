"""Where the reconciliation state lives (spark_jobs/state_location.py): a path or a URI,
parsed and joined the same way for Spark's paths and pyarrow's reads (no services)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs.state_location import StateLocation, StateLocationError


def test_a_path_and_a_file_uri_name_the_same_local_folder(tmp_path: Path) -> None:
    as_path = StateLocation(tmp_path).join("tickets")
    as_uri = StateLocation(f"file://{tmp_path}/").join("tickets")
    assert as_path.is_local and as_uri.is_local
    assert as_path.spark("keys/r1") == str(tmp_path / "tickets" / "keys" / "r1")
    assert as_uri.spark("keys/r1") == f"file://{tmp_path}/tickets/keys/r1"
    assert as_path.join("keys", "r1").filesystem()[1] == as_uri.join("keys/r1").filesystem()[1]


def test_an_object_store_uri_keeps_its_scheme_for_spark() -> None:
    location = StateLocation("s3a://bucket/reconcile-state/").join("tickets")
    assert not location.is_local
    assert location.spark("runs/r1/duplicates") == "s3a://bucket/reconcile-state/tickets/runs/r1/duplicates"
    assert str(StateLocation("gs://b/x").join("a", "b/")) == "gs://b/x/a/b"


def test_it_reads_writes_lists_and_removes_through_pyarrow(tmp_path: Path) -> None:
    root = StateLocation(f"file://{tmp_path}").join("tickets")
    meta = root.join("state.json")
    assert not meta.exists() and root.join("runs").child_folders() == []
    meta.write_text_atomic('{"run_id": "r1"}')
    meta.write_text_atomic('{"run_id": "r2"}')
    assert meta.read_text() == '{"run_id": "r2"}'
    assert sorted(p.name for p in (tmp_path / "tickets").iterdir()) == ["state.json"]  # no temporary left
    (tmp_path / "tickets" / "runs" / "r1" / "duplicates").mkdir(parents=True)
    (tmp_path / "tickets" / "runs" / "r2").mkdir()
    (tmp_path / "tickets" / "runs" / "r1" / "duplicates" / "part-0.parquet").write_bytes(b"x")
    assert root.join("runs").child_folders() == ["r1", "r2"]
    root.join("runs", "r1").remove_tree()
    root.join("runs", "absent").remove_tree()
    assert root.join("runs").child_folders() == ["r2"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "is empty"),
        ("   ", "is empty"),
        ("ftp://host/state", "unsupported scheme 'ftp'"),
        ("file://relative/state", "absolute path"),
    ],
)
def test_it_names_what_is_wrong_with_a_location(value: str, message: str) -> None:
    with pytest.raises(StateLocationError, match=message):
        StateLocation(value)
