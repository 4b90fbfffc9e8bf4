"""The probes' native hot paths (auditor/probes/_hotpath.c), when built.

``python -m auditor.probes.build_native`` builds them (stack/bootstrap.sh does). Without them
the probes take pure-Python paths with the same steps; ``AUDITOR_PROBES_NATIVE=0`` chooses
those even when the module is built (a fault in the native code can be ruled out that way).
"""

from __future__ import annotations

import os

try:
    from auditor.probes._hotpath import HandedPositions, HotProduce, RangeMarker, SeqLock
except ImportError:  # pragma: no cover - depends on the build
    HandedPositions = HotProduce = RangeMarker = SeqLock = None  # type: ignore[assignment,misc]

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})

__all__ = ["HandedPositions", "HotProduce", "RangeMarker", "SeqLock", "native_hot_path_available", "use_native"]


def native_hot_path_available() -> bool:
    """Whether new audited clients take the native hot paths: built, and not turned off
    with AUDITOR_PROBES_NATIVE=0. Another value is an error that names it (the probes import
    nothing of the auditor's, so not auditor.lib.env's envbool, whose words these are)."""
    raw = os.environ.get("AUDITOR_PROBES_NATIVE")
    wanted = True
    if raw is not None:
        lowered = raw.strip().lower()
        if lowered not in _TRUE | _FALSE:
            raise ValueError(f"AUDITOR_PROBES_NATIVE={raw!r} is not a boolean (use true/false)")
        wanted = lowered in _TRUE
    return HotProduce is not None and wanted


def use_native(native: bool | None) -> bool:
    """A client's ``native`` argument decided: None means whenever available; True when the
    module is not built is an error that says how to build it."""
    if native is None:
        return native_hot_path_available()
    if native and HotProduce is None:
        raise RuntimeError("the probes' native hot path is not built: run `python -m auditor.probes.build_native`")
    return native
