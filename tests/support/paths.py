"""Where the checkout is."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
