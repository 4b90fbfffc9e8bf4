"""A probed producer whose ledger lost a record in the middle of its session: the records it
held are gone, later ones were written. The sequences the lost record named are not known to
the auditor; a hole there must not read as sends the producer never made (`never-sent`).

Ground truth comes from the clients: each send's delivery report, and full reads of the data
topic and the ledger topic."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from auditor.probes import AuditedProducer
from auditor.probes.codec import ProducerRanges, SessionEnd
from auditor.probes.codec_decode import decode_ledger_record
from tests.probes.kafka_helpers import read_topic
from tests.support.reconcile_world import World, reconcile_once

pytestmark = pytest.mark.integration


def test_a_send_whose_failure_report_the_ledger_lost_is_not_called_never_sent(
    spark: SparkSession, world: World, make_topic: Any, tmp_path: Path
) -> None:
    """Tickets 1-3 are sent and ledgered; ticket 4's send carries a key too large for both
    topics (max.message.bytes 1500): the broker refuses the record, and the ledger refuses the
    record holding its failure report and key; tickets 5-7 are sent and ledgered after it."""
    topic = make_topic("lossy", 1, config={"max.message.bytes": "1500"})
    ledger = make_topic("lossy-ledger", 1, config={"max.message.bytes": "1500"})
    world.insert(1, 2, 3, 5, 6, 7)
    reports: dict[int, Any] = {}

    def send(producer: AuditedProducer, ticket: int, key: bytes) -> None:
        def report(err: Any, msg: Any) -> None:
            reports[ticket] = err

        # stamped ten minutes back, as sends made that long before the run (a hole is judged
        # only once the send outcome wait, 365 s by default, has passed since its sends)
        stamp = int(time.time() * 1000) - 600_000
        producer.produce(topic, json.dumps({"ticket_id": ticket}).encode(), key, on_delivery=report, timestamp=stamp)
        producer.flush(30)  # each send's ledger rows in records of their own

    producer = AuditedProducer(
        {"bootstrap.servers": world.bootstrap, "linger.ms": 0},
        ledger_topic=ledger,
        clients_topic=make_topic("_audit.clients"),
    )
    try:
        for ticket in (1, 2, 3):
            send(producer, ticket, str(ticket).encode())
        send(producer, 4, os.urandom(1500).hex().encode())  # 3000 bytes, incompressible
        for ticket in (5, 6, 7):
            send(producer, ticket, str(ticket).encode())
    finally:
        producer.close(30)

    assert [t for t, err in sorted(reports.items()) if err is not None] == [4]  # what the client was told
    assert sorted(json.loads(m.value())["ticket_id"] for m in read_topic(topic, bootstrap=world.bootstrap)) == [
        1, 2, 3, 5, 6, 7,
    ]  # fmt: skip
    written = [decode_ledger_record(m.value()) for m in read_topic(ledger, bootstrap=world.bootstrap)]
    assert producer.stats()["ledger_records_failed"] + producer.stats()["ledger_records_dropped"] > 0
    ranged = {r.first for rec in written if isinstance(rec, ProducerRanges) for r in rec.ranges}
    assert ranged == {0, 1, 2, 4, 5, 6}  # the ledger lost the record of sequence 3, not the later ones
    ends = [rec for rec in written if isinstance(rec, SessionEnd)]
    assert ends[-1].ledger_lost and not ends[-1].closed  # the probe says so

    time.sleep(2)  # past the grace: every send is judged
    binding = world.binding(
        topic=topic, producer_ledger_topic=ledger, consumer_groups=[], guarantee="at-least-once", grace="1s"
    )
    result = reconcile_once(spark, binding, tmp_path)

    assert result["status"] == "ok", result["error"]
    assert [(f["kind"], f["cause"], f["seq"]) for f in result["findings"]] == []

    # A later run, the state carried: still no hole where the lost record was.
    with AuditedProducer(
        {"bootstrap.servers": world.bootstrap}, ledger_topic=ledger, clients_topic=make_topic("_audit.clients")
    ) as later:
        world.insert(8)
        send(later, 8, b"8")
    time.sleep(2)
    again = reconcile_once(spark, binding, tmp_path)

    assert again["mode"] == "incremental" and again["status"] == "ok", again["error"]
    assert [(f["kind"], f["cause"], f["seq"]) for f in again["findings"]] == []
