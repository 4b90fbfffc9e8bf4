"""Which reconciliation findings a lint rule's setting explains, and the other way round.

A finding is named by its kind and cause (auditor/vocabulary.py): ("gap", "broker-lost") is an acked record that
is missing from the topic, ("duplicate", "producer-retry") one send written twice, and
so on. A cause of None means any finding of that kind. The reconciliation pages use
`explains` to link a lint result to its findings, and `rules_explaining` to show on a
finding's page the settings that allow it.
"""

from __future__ import annotations

from collections.abc import Mapping

Explained = tuple[tuple[str, str | None], ...]

_LOST_BY_BROKER: Explained = (("gap", "broker-lost"), ("missing", None))
_SEND_FAILED: Explained = (("gap", "send-failed"), ("missing", None))
_NEVER_STARTED: Explained = (("missing", None),)  # the producer refuses to start: nothing is sent

EXPLAINS: Mapping[str, Explained] = {
    # producer
    # acks=1 loses acked writes on failover; acks=0 sends are never confirmed (send-unconfirmed).
    "P001": (*_LOST_BY_BROKER, ("gap", "send-unconfirmed")),
    "P002": _SEND_FAILED,
    "P003": _SEND_FAILED,
    "P004": _SEND_FAILED,
    "P005": (("aborted", None),),
    "P006": (("duplicate", "producer-retry"),),
    "P007": (("duplicate", "producer-retry"),),
    "P008": (("duplicate", "app-resend"),),
    "P009": (("duplicate", "app-resend"), ("aborted", None)),
    "P010": _NEVER_STARTED,
    "P011": (),  # an ignored key: the setting meant has no effect; the rules on that setting say what follows
    "P101": _NEVER_STARTED,
    "P102": _NEVER_STARTED,
    "P103": _NEVER_STARTED,
    "P104": _NEVER_STARTED,
    "P105": _NEVER_STARTED,
    "P106": _NEVER_STARTED,
    "P107": _NEVER_STARTED,
    "P108": _NEVER_STARTED,
    "P109": _NEVER_STARTED,
    # consumer
    "C001": (("unprocessed", None),),  # committed before processing: the record is skipped
    "C002": (("aborted", None),),  # aborted records reach the application
    "C003": (("unprocessed", None),),
    "C004": (("reprocessed", None),),
    "C005": (("reprocessed", None),),  # a rebalance hands the uncommitted batch to another member
    "C006": (("reprocessed", None), ("duplicate", "app-resend")),
    "C007": (),  # the setting itself changes nothing; C001/C004/C006 report the auto-commit
    "C008": (("reprocessed", None),),  # Spring's container commits after the listener processed the records
    "C009": (),  # an ignored key: the setting meant has no effect; the rules on that setting say what follows
    "C101": (),
    "C102": (),
    "C103": (),
    "C104": (),
    "C105": (),
    # topic
    "T001": _LOST_BY_BROKER,
    "T002": _LOST_BY_BROKER,
    "T003": _SEND_FAILED,
    "T004": _LOST_BY_BROKER,
    "T005": (("missing", None),),  # expired by retention before it was consumed
    "T006": (("missing", None),),  # compacted away before it was consumed
    "T007": (("missing", None),),  # a tombstone removed by the cleaner before it was consumed
    # broker
    "B001": (("reprocessed", None), ("unprocessed", None)),  # the group restarts from auto.offset.reset
    "B002": (("reprocessed", None), ("unprocessed", None)),
    "B003": (("aborted", None), ("duplicate", None)),
    "B004": (("aborted", None), ("duplicate", None)),
    "B005": (("duplicate", None),),  # a zombie's late write joins a later transaction
    "B006": _LOST_BY_BROKER,
    "B007": _LOST_BY_BROKER,
    "B008": _LOST_BY_BROKER,
    # streams
    "S001": (("duplicate", None), ("reprocessed", None)),
    "S002": (),
    "S003": (),
}


def explains(rule_id: str) -> Explained:
    """The findings (kind, cause or None) that a failing ``rule_id`` can produce."""
    return EXPLAINS.get(rule_id, ())


def rules_explaining(kind: str, cause: str | None = None) -> list[str]:
    """Rule ids whose setting can produce a finding of ``kind`` (and ``cause``), in catalog order.

    A rule that explains a kind without a cause explains every cause of it; a finding
    asked for without a cause matches every rule of its kind.
    """
    return [
        rule_id
        for rule_id, pairs in EXPLAINS.items()
        if any(k == kind and (c is None or cause is None or c == cause) for k, c in pairs)
    ]


def describe(pairs: Explained) -> list[str]:
    """["gap (broker-lost)", "missing"] for pages and the CSV export."""
    return [kind if cause is None else f"{kind} ({cause})" for kind, cause in pairs]
