"""Reconciliation settings read from the environment or settings.py (auditor/reconcile/conf.py)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from auditor.lib.env import SettingError
from auditor.reconcile import conf


def test_the_resident_driver_is_retired_after_500_runs_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RECONCILE_RESIDENT_MAX_RUNS", raising=False)
    assert conf.resident_max_runs() == 500
    monkeypatch.setenv("RECONCILE_RESIDENT_MAX_RUNS", "0")
    assert conf.resident_max_runs() == 0  # one driver for good
    monkeypatch.setenv("RECONCILE_RESIDENT_MAX_RUNS", "40")
    assert conf.resident_max_runs() == 40


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        ("-1", ImproperlyConfigured, "RECONCILE_RESIDENT_MAX_RUNS: -1 is negative"),
        ("many", SettingError, "RECONCILE_RESIDENT_MAX_RUNS='many' is not an integer"),
    ],
)
def test_a_bad_resident_run_limit_is_named(
    monkeypatch: pytest.MonkeyPatch, value: str, error: type[Exception], message: str
) -> None:
    monkeypatch.setenv("RECONCILE_RESIDENT_MAX_RUNS", value)
    with pytest.raises(error, match=message):
        conf.resident_max_runs()
