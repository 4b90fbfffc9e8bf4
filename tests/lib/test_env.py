"""Strict environment readers: a bad value fails at start-up, naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from auditor.lib.env import SettingError, envchoice

ROOT = Path(__file__).resolve().parents[2]


def test_a_choice_is_one_of_its_values_or_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUDITOR_TEST_CHOICE", raising=False)
    assert envchoice("AUDITOR_TEST_CHOICE", ("a", "b"), "a") == "a"
    monkeypatch.setenv("AUDITOR_TEST_CHOICE", " b ")
    assert envchoice("AUDITOR_TEST_CHOICE", ("a", "b"), "a") == "b"
    monkeypatch.setenv("AUDITOR_TEST_CHOICE", "")
    assert envchoice("AUDITOR_TEST_CHOICE", ("a", "b"), "a") == "a"
    monkeypatch.setenv("AUDITOR_TEST_CHOICE", "c")
    with pytest.raises(SettingError, match=r"AUDITOR_TEST_CHOICE='c' is not one of a, b"):
        envchoice("AUDITOR_TEST_CHOICE", ("a", "b"), "a")


def test_a_misspelt_runner_stops_every_process_at_start_up() -> None:
    env = {**os.environ, "RECONCILE_RUNNER": "residnet", "DJANGO_SETTINGS_MODULE": "auditor.settings"}
    proc = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert "RECONCILE_RUNNER='residnet' is not one of submit, resident" in proc.stderr
