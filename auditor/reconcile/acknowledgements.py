"""The acknowledgement or mute in force for each finding: shared by the reconcile pages and the API."""

from __future__ import annotations

from collections.abc import Iterable

from auditor.accounts.acknowledgements import attach_acknowledgements
from auditor.reconcile.models import FINDING_ACK_KIND, Finding


def attach_findings_acknowledgements(findings: Iterable[Finding]) -> list[Finding]:
    """Set ``finding.acknowledgement`` (the acknowledgement or mute in force, or None) on each."""
    return attach_acknowledgements(findings, FINDING_ACK_KIND, lambda f: f.acknowledgement_key)
