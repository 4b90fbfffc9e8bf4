"""The acknowledgement or mute in force for each alert: shared by the alert pages and the API."""

from __future__ import annotations

from collections.abc import Iterable

from auditor.accounts import acknowledgements
from auditor.accounts.models import Acknowledgement
from auditor.alerts.models import Alert
from auditor.alerts.problems import PROBLEM_ACK_KIND


def attach_acknowledgements(alerts: Iterable[Alert]) -> list[Alert]:
    """Set ``alert.acknowledgement`` to the acknowledgement or mute in force for its problem.

    An acknowledgement covers occurrences that started before it was made; a mute covers
    the fingerprint whenever it occurs, until it ends.
    """
    alerts = acknowledgements.attach_acknowledgements(alerts, PROBLEM_ACK_KIND, lambda a: a.fingerprint)
    for alert in alerts:
        # ignores: attach_acknowledgements sets this attribute; it is no model field.
        ack: Acknowledgement | None = alert.acknowledgement  # type: ignore[attr-defined]
        if ack is not None and ack.action == Acknowledgement.ACK and ack.created_at < alert.first_seen:
            alert.acknowledgement = None  # type: ignore[attr-defined]
    return alerts
