"""A version-1 audited producer whose sends stall, ended with flush(2) or close(2) and then
killed (-9): ``python -m tests.support.stalled_producer BOOTSTRAP TOPIC LEDGER CLIENTS flush|close``.

TOPIC does not exist yet and the producer may not create it, so its five sends (tickets 1-5,
key = ticket, value ``{"ticket_id": n}``) wait in the client for the topic's metadata
(``topic.metadata.propagation.max.ms``: ten minutes) without failing. It prints
``{"session", "returned", "reports"}`` (what flush/close returned, how many delivery reports
came) and waits to be killed. ``run_stalled_and_kill`` runs it for a test.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from typing import Any

from auditor.probes import AuditedProducerV1
from tests.support.paths import ROOT

TICKETS = (1, 2, 3, 4, 5)


def run_stalled_and_kill(bootstrap: str, topic: str, ledger: str, clients: str, ending: str) -> dict[str, Any]:
    """Run the producer, read what it printed, give its ledger producer a few seconds to write
    what it was handed, and kill it (-9)."""
    command = [sys.executable, "-m", "tests.support.stalled_producer", bootstrap, topic, ledger, clients, ending]
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        told: dict[str, Any] = json.loads(child.stdout.readline())
        time.sleep(5)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    return told


def main(argv: list[str]) -> int:
    bootstrap, topic, ledger, clients, ending = argv
    reports: list[Any] = []
    config = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "allow.auto.create.topics": False,
        "topic.metadata.propagation.max.ms": 600_000,
    }
    producer = AuditedProducerV1(config, ledger_topic=ledger, clients_topic=clients)
    for ticket in TICKETS:
        value = json.dumps({"ticket_id": ticket}).encode()
        producer.produce(topic, value, str(ticket).encode(), on_delivery=lambda err, msg: reports.append(err))
    returned = producer.flush(2) if ending == "flush" else producer.close(2)
    print(json.dumps({"session": producer.session_id, "returned": returned, "reports": len(reports)}), flush=True)
    time.sleep(600)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
