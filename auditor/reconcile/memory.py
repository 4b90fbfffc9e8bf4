"""The auditor's memory of keys: what reconciliation runs saw, read back for other parts.

Two sources, both written by reconciliation and never by their readers:
- the job's key index (Parquet under the state dir, docs/contracts.md): where a record with
  each key was first seen and by which run, and the lost sightings (keys whose offset a later
  run found rewritten);
- the findings of the binding's latest successful run: rows it reported missing, which it only
  does while the topic held everything since the row was created.

Readers (stuck verdicts) use it when the topic no longer shows what happened: a record seen
and since deleted by retention, or truncated, or a row reported missing before the topic's
oldest records went.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from auditor.pipelines.models import Binding
from auditor.reconcile import conf
from auditor.reconcile.models import Finding, ReconcileRun
from auditor.stuck.evidence import KeyMemory, MissingReport, Sighting

CHUNK = 10_000  # keys per database query


class StateUnreadable(RuntimeError):
    """The state could not be read."""


def recall(binding: Binding, keys: Sequence[str], state_root: Path | None = None) -> KeyMemory:
    """What earlier runs of `binding` saw of `keys`. A part that cannot be read is named in
    `reason` and left empty: readers then say unknown, never guess."""
    memory = KeyMemory()
    if not keys:
        return memory
    root = state_root if state_root is not None else conf.state_dir() / binding.name
    try:
        memory.sightings = read_sightings(root, keys)
    except StateUnreadable as exc:
        memory.reason = str(exc)
    memory.missing = missing_reports(binding, keys)
    return memory


def read_sightings(root: Path, keys: Iterable[str]) -> dict[str, Sighting]:
    """Per key, its first sighting in the key index; lost sightings override (the record seen
    there was truncated later). An absent state (no run yet) is an empty memory."""
    meta_path = root / "state.json"
    if not meta_path.exists():
        return {}
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as exc:
        raise StateUnreadable(f"{meta_path} is unreadable: {exc}") from exc
    wanted = sorted(set(keys))
    sightings: dict[str, Sighting] = {}
    for row in _rows(root, list(meta.get("key_deltas") or []), wanted):
        sighting = Sighting(row["partition"], row["offset"], _ms(row.get("timestamp")), row.get("run_id"))
        current = sightings.get(row["key"])
        if current is None or (sighting.partition, sighting.offset) < (current.partition, current.offset):
            sightings[row["key"]] = sighting
    lost = (meta.get("datasets") or {}).get("lost_sightings")
    for row in _rows(root, [lost] if lost else [], wanted):
        sightings[row["key"]] = Sighting(
            row["partition"],
            row["offset"],
            _ms(row.get("timestamp")),
            row.get("run_id"),
            lost=True,
            detected_run=row.get("detected_run"),
        )
    return sightings


def _rows(root: Path, relatives: list[str], keys: list[str]) -> list[dict[str, Any]]:
    if not relatives or not keys:
        return []
    import pyarrow.dataset as ds  # deferred: only diagnoses with a reconciliation state need it

    wanted = ["key", "partition", "offset", "timestamp", "run_id", "detected_run"]
    rows: list[dict[str, Any]] = []
    try:
        for relative in relatives:
            dataset = ds.dataset(str(root / relative), format="parquet")
            columns = [c for c in wanted if c in dataset.schema.names]
            table = dataset.to_table(columns=columns, filter=ds.field("key").isin(keys))
            rows.extend(r for r in table.to_pylist() if r["partition"] is not None and r["offset"] is not None)
    except (OSError, ValueError) as exc:  # pyarrow raises ArrowInvalid (a ValueError) on bad files
        raise StateUnreadable(f"the key index under {root} is unreadable: {exc}") from exc
    return rows


def _ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def missing_reports(binding: Binding, keys: Sequence[str]) -> dict[str, MissingReport]:
    """Keys the binding's latest successful run (with its findings kept) reported missing,
    without a cause: no record up to that run's window upper bound."""
    if binding.pk is None:  # an unsaved binding (the benchmark) has no runs
        return {}
    run = (
        ReconcileRun.objects.filter(binding=binding, status=ReconcileRun.OK, findings_pruned=False)
        .order_by("-finished_at", "-id")
        .first()
    )
    upper = (run.window or {}).get("upper") if run else None
    if run is None or not upper:
        return {}
    upper_ms = int(datetime.fromisoformat(upper).timestamp() * 1000)
    reports: dict[str, MissingReport] = {}
    label = run.job_run_id or str(run.pk)
    read_to = {int(p): int(r[1]) for p, r in ((run.offset_ranges or {}).get("topic") or {}).items()}
    for start in range(0, len(keys), CHUNK):
        chunk = list(keys[start : start + CHUNK])
        found = Finding.objects.filter(run=run, kind="missing", cause__isnull=True, key__in=chunk)
        for key in found.values_list("key", flat=True):
            reports[str(key)] = MissingReport(label, upper_ms, read_to)
    return reports
