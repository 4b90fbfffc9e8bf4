"""A second look at the consumer ledger before a record is called `skipped`.

A processed mark may trail its group's commit: an auto-commit, or an asynchronous commit,
can reach the broker before the probe's next background flush writes the marks of the records
it covers (spark_jobs.mark_rules.MARK_SETTLE_SECONDS). A diagnosis that read the committed
offsets and the consumer ledger's end within that time sees the commit without the mark.

Rather than wait on every diagnosis, the diagnosis reads the ledger's tail again only when a
verdict would be `skipped`: MARK_SETTLE_SECONDS after the committed offsets were read, from
the ends the first read stopped at to the ends now, for the positions those verdicts look up.

The same second look serves marks the first read did not look for: the first read looks up
the positions of the records it found and of acked ledger entries; a record deleted since a
reconciliation run saw it is known only by that sighting, after the read. When a `skipped`
or `expired` verdict rests on such a position, the ledger is read again from the first
read's starts (`from_start`).

The ledger's tail may also hold a `marks-lost` record: a probe whose ledger refused its marks
names them once the ledger takes records again, possibly between the first read and this one
(a run made during the outage called those records `unprocessed`; a diagnosis made then
reads them as committed past). Its ranges are read with the marks, so that the verdicts
say `unknown` (verdict_outcomes.lost_mark) as a diagnosis that read the record first does.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka.admin import AdminClient

from auditor.stuck.kafka_view import LedgerRange, ReadPlan, client_settings, ledger_view
from auditor.stuck.locate_python import read_marks
from auditor.stuck.locate_request import LocateError, LocateRequest, LocateResult
from spark_jobs.kafka_security import admin_config


def ledger_tail(old: LedgerRange, now: LedgerRange) -> dict[int, tuple[int, int]]:
    """Per partition, [where the first read stopped, the end now): what was written since.
    A partition the first read did not know is read from its start."""
    tail: dict[int, tuple[int, int]] = {}
    for partition, (low, high) in now.ranges.items():
        start = max(old.ranges.get(partition, (low, low))[1], low)
        if high > start:
            tail[partition] = (start, high)
    return tail


def read_trailing_marks(
    kafka_config: dict[str, Any],
    plan: ReadPlan,
    record_key: str,
    groups: list[str],
    positions: set[tuple[int, int]],
    settle_until: float,
    timeout_s: float,
    from_start: bool = False,
) -> LocateResult:
    """The groups' processed marks at `positions` (`marks`) and the ranges their marks-lost
    records name (`lost_marks`), written to the consumer ledger after the plan's ends
    (from_start: since the starts the plan read from too), read once `settle_until` (a
    time.monotonic() instant) has passed. Raises LocateError when the ledger cannot be read."""
    old = plan.consumer_ledger
    if old is None or not groups or not positions:
        return LocateResult()
    time.sleep(max(0.0, settle_until - time.monotonic()))
    bootstrap, config = client_settings(kafka_config)
    admin = AdminClient(admin_config(bootstrap, config, timeout_s))
    seen, now, _ = ledger_view(admin, old.topic, timeout_s)
    if now is None:
        raise LocateError(f"the consumer ledger {old.topic} could not be read again: {seen.reason}")
    tail = ledger_tail(old, now)
    if from_start:
        # the plan's ranges and the tail, as one range a partition
        for partition, (first, last) in old.ranges.items():
            low, high = now.ranges.get(partition, (first, first))
            if last > first and high > max(first, low):
                tail[partition] = (max(first, low), high)
    if not tail:
        return LocateResult()
    request = LocateRequest(
        kafka_config,
        ReadPlan(plan.topic, plan.partitions, consumer_ledger=LedgerRange(old.topic, tail)),
        record_key,
        [],
        groups,
    )
    return read_marks(request, positions)
