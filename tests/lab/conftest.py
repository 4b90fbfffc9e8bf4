"""Fixtures of the fault lab's tests: users of every role, and the lab against the test stack."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.accounts.fixtures import client_as, role_users

__all__ = ["client_as", "role_users"]


@pytest.fixture
def lab_state(settings, tmp_path: Path) -> Path:
    """The reconciliation state of the lab's bindings in this test's own folder."""
    folder = tmp_path / "reconcile-state"
    settings.RECONCILE_STATE_DIR = str(folder)
    return folder
