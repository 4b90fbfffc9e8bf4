"""A contract-v2 audited producer to kill -9 between two ledger flushes (a test runs it in a
process of its own: ``python -m tests.support.killed_producer BOOTSTRAP TOPIC LEDGER CLIENTS``).

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


def main(argv: list[str]) -> int:
    bootstrap, topic, ledger, clients = argv
    reports: list[dict[str, Any]] = []

    def report(err: Any, msg: Any) -> None:
        reports.append(
            {
                "key": msg.key().decode(),
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
    )
    producer.produce(topic, b"{}", b"1")
    assert producer.flush(30) == 0 and reports and reports[0]["error"] is None, reports
    print("ledgered", producer.session_id, started_ms, flush=True)
    for line in sys.stdin:
        command, ticket = line.split()
        assert command == "send", line
        reports.clear()
        producer.produce(topic, b"{}", ticket.encode())
        deadline = time.monotonic() + 30
        while not reports and time.monotonic() < deadline:
            producer.poll(0.1)
        print(json.dumps(reports[0] if reports else None), flush=True)
    time.sleep(600)  # killed with SIGKILL long before this ends
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
