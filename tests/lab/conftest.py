"""Fixtures of the fault lab's tests: the lab against the test stack (users of every role come
from tests/support/fixtures, registered in the root conftest)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def lab_state(settings, tmp_path: Path) -> Path:
    """The reconciliation state of the lab's bindings in this test's own folder."""
    folder = tmp_path / "reconcile-state"
    settings.RECONCILE_STATE_DIR = str(folder)
    return folder
