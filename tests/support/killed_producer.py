"""A contract-v2 audited producer to kill -9 between two ledger flushes (a test runs it in a
process of its own: ``python -m tests.support.killed_producer BOOTSTRAP TOPIC LEDGER CLIENTS
[RECORD_KEY]``).

A record's key is its ticket, its value ``{}``; given RECORD_KEY, every record has that key
and carries its ticket in its value (``{"ticket_id": ...}``), its audit-id (``audit_value``).

It sends ticket 1 and ledgers it with flush(), prints ``ledgered <session> <start ms>``, then
waits for ``send <ticket>`` on stdin: it sends that ticket, serves the delivery report with
poll() (never flush(): the ledger must not learn of it) and prints the report as JSON, then
waits to be killed. Its background ledger flush runs every 600 s, so none comes in between.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from auditor.probes import AuditedProducer


def audit_value(value: Any, key: Any) -> str:
    """The ticket a record with the shared record key carries (the audit-id key_fn)."""
    return str(json.loads(value)["ticket_id"])


def main(argv: list[str]) -> int:
    bootstrap, topic, ledger, clients = argv[:4]
    shared_key = argv[4].encode() if len(argv) > 4 else None

    def record(ticket: str) -> tuple[bytes, bytes]:
        """(value, key) of a ticket's record."""
        if shared_key is None:
            return b"{}", ticket.encode()
        return json.dumps({"ticket_id": ticket}).encode(), shared_key

    reports: list[dict[str, Any]] = []

    def report(err: Any, msg: Any) -> None:
        reports.append(
            {
                "key": msg.key().decode() if shared_key is None else audit_value(msg.value(), msg.key()),
                "error": None if err is None else str(err),
                "partition": msg.partition(),
                "offset": msg.offset(),
            }
        )

    started_ms = time.time_ns() // 1_000_000
    producer = AuditedProducer(
        {"bootstrap.servers": bootstrap, "linger.ms": 0, "on_delivery": report},
        ledger_topic=ledger,
        clients_topic=clients,
        ledger_flush_interval_s=600.0,
        delivery_reports="all",
        key_fn=None if shared_key is None else audit_value,
    )
    producer.produce(topic, *record("1"))
    assert producer.flush(30) == 0 and reports and reports[0]["error"] is None, reports
    print("ledgered", producer.session_id, started_ms, flush=True)
    for line in sys.stdin:
        command, ticket = line.split()
        assert command == "send", line
        reports.clear()
        producer.produce(topic, *record(ticket))
        deadline = time.monotonic() + 30
        while not reports and time.monotonic() < deadline:
            producer.poll(0.1)
        print(json.dumps(reports[0] if reports else None), flush=True)
    time.sleep(600)  # killed with SIGKILL long before this ends
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
