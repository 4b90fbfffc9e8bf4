"""The auditor's shared vocabulary, declared once: delivery guarantees, reconciliation
finding kinds and causes, stuck-item verdicts. Every app imports them from here.

spark_jobs/ keeps its own copies (spark-submit ships that package alone, without Django):
tests/test_vocabulary.py keeps them equal.
"""

from __future__ import annotations

from collections.abc import Mapping

GUARANTEES = ("at-most-once", "at-least-once", "exactly-once")  # weakest first

FINDING_KINDS = ("missing", "duplicate", "orphan", "gap", "aborted", "unprocessed", "reprocessed")
# The causes a finding of each kind may carry; a kind absent here has none (cause null).
FINDING_CAUSES: Mapping[str, tuple[str, ...]] = {
    "missing": ("broker-lost",),
    "duplicate": ("producer-retry", "app-resend", "unknown"),
    "gap": ("send-failed", "send-unconfirmed", "broker-lost", "never-sent"),
    "orphan": ("no-key",),
}

# Where delivery of one stuck item broke (auditor/stuck/verdicts.py decides them).
STUCK_VERDICTS = (
    "never-produced",
    "produce-failed",
    "broker-lost",
    "aborted",
    "waiting",
    "skipped",
    "processed-not-updated",
    "expired",
    "unknown",
)
