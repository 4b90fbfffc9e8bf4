"""Where the checkout is, and where this test process keeps its own files."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# pytest-xdist names each worker process (gw0, gw1, ...); "" in a run without workers.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")

# Logs and files of the processes a test session starts beside itself: one folder per worker.
TEST_LOGS = ROOT / "var" / "test-logs" / WORKER if WORKER else ROOT / "var" / "test-logs"
