"""The acknowledgement or mute in force for each stuck item: shared by the stuck pages and the API."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from auditor.accounts.acknowledgements import acknowledgement_json, attach_acknowledgements
from auditor.stuck.models import STUCK_ITEM_ACK_KIND, StuckItem


def attach_items_acknowledgements(items: Iterable[StuckItem]) -> list[StuckItem]:
    """Set ``item.acknowledgement`` (the acknowledgement or mute in force, or None) on each."""
    return attach_acknowledgements(items, STUCK_ITEM_ACK_KIND, lambda item: item.acknowledgement_key)


def item_json(item: StuckItem) -> dict[str, Any]:
    """An item with the acknowledgement attached by attach_items_acknowledgements: page and API."""
    return {**item.as_dict(), "acknowledgement": acknowledgement_json(item)}
