"""Ground truth helpers: what the clients and a plain read of the topic say, never the auditor."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from auditor.lab.cluster import LabError, Record
from auditor.lab.workload import Delivery


def copies(records: Iterable[Record]) -> Counter[str]:
    return Counter(r.key for r in records if r.key is not None)


def acked(reports: Iterable[Delivery]) -> set[str]:
    return {d.key for d in reports if d.error is None and d.offset >= 0}


def failed(reports: Iterable[Delivery]) -> set[str]:
    return {d.key for d in reports if d.error is not None}


def all_sent(reports: list[Delivery]) -> list[Delivery]:
    """`reports`, once none of them is a failure: a scenario's set-up sends must all succeed."""
    errors = [d.error for d in reports if d.error]
    if errors:
        raise LabError(f"the workload's sends failed: {errors[:3]}")
    return reports


def probed_consumer_side(
    tickets: Iterable[int],
    rows: dict[int, str],
    processed: dict[int, int],
    committed: int,
    position: dict[str | None, int],
) -> dict[str, set[str]]:
    """The findings and stuck verdicts a probed consumer's tickets call for, from the table
    (`rows`: id → status), the application's own log (`processed`: id → times processed), the
    group's committed offset and a plain read of the topic (`position`: key → offset):
    processed more than once → `reprocessed`; still NEW, never processed and below the commit
    → skipped (`stuck:skipped`, `unprocessed`). One partition."""
    expected: dict[str, set[str]] = {}
    for ticket in tickets:
        key = str(ticket)
        if processed.get(ticket, 0) > 1:
            expected[key] = {"reprocessed"}
        elif rows[ticket] == "NEW" and not processed.get(ticket) and position.get(key, 1 << 62) < committed:
            expected[key] = {"stuck:skipped", "unprocessed"}
    return expected


def producer_side(
    tickets: Iterable[int],
    final: Iterable[Record],
    *,
    seen_before: Iterable[Record] = (),
    probed_acked: Iterable[str] = (),
    duplicate_cause: str = "unknown",
) -> dict[str, set[str]]:
    """Reconciliation's expected findings per ticket, from the final read of the topic.

    Absent: `missing`, with cause broker-lost when a read before the fault saw the record
    (or a probed producer's delivery report acked it: the ledger holds that report, and the
    acked send is also a hole in the producer's sequence: `gap` broker-lost). More than
    one copy: `duplicate` with the cause the evidence allows (producer-retry only when the
    records carry the probe's session and sequence; plain records cannot say which).
    """
    now = copies(final)
    before = copies(seen_before)
    acked_by_probe = set(probed_acked)
    lost_evidence = set(before) | acked_by_probe
    expected: dict[str, set[str]] = {}
    for ticket in tickets:
        key = str(ticket)
        if now[key] == 0:
            expected[key] = {"missing/broker-lost" if key in lost_evidence else "missing"}
            if key in acked_by_probe:
                expected[key].add("gap/broker-lost")
        elif now[key] > 1:
            expected[key] = {f"duplicate/{duplicate_cause}"}
    return expected


def died_with_its_marks(expected: dict[str, set[str]]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(required, optional): `expected` with `unprocessed` made optional where the ticket is
    `stuck:skipped`, for a record the last commit of a killed consumer passed. Reconciliation
    cannot tell whether that consumer processed it before it died with the marks it had not
    flushed (a commit before the processing: at-most-once, auto-commit), so it leaves it
    unjudged; the stuck diagnosis sees the row still NEW and says skipped."""
    required: dict[str, set[str]] = {}
    optional: dict[str, set[str]] = {}
    for key, verdicts in expected.items():
        if "unprocessed" in verdicts and "stuck:skipped" in verdicts:
            required[key] = verdicts - {"unprocessed"}
            optional[key] = {"unprocessed"}
        else:
            required[key] = set(verdicts)
    return required, optional
