"""The apps' API and metrics modules are listed in code; these lists and the files agree."""

from __future__ import annotations

from auditor.api.dispatch import API_MODULES
from auditor.metrics.registry import COLLECTOR_APPS
from tests.support.paths import ROOT


def test_it_lists_every_apps_api_module() -> None:
    on_disk = {f"auditor.{p.parent.name}.api" for p in (ROOT / "auditor").glob("*/api.py")}
    assert set(API_MODULES) == on_disk


def test_it_lists_every_apps_metrics_collector() -> None:
    on_disk = {p.parent.name for p in (ROOT / "auditor").glob("*/metrics.py")}
    assert set(COLLECTOR_APPS) == on_disk
