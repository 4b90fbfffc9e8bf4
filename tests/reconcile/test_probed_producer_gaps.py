"""Probed producers (both contract versions) against the real brokers and Spark, in the cases a
review of stop 70 found them misreported: a v1 copier passing on its input's v2 header, a
checkpoint written while sends were in flight, a failure named by another form of its key.

Ground truth comes from the clients (delivery reports, return values) and full reads of the
topics, never from the probe.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from auditor.probes import AuditedProducer, AuditedProducerV1
from tests.probes.kafka_helpers import read_topic
from tests.support.reconcile_world import World, reconcile_once

pytestmark = pytest.mark.integration

TICKETS = (1, 2, 3, 4, 5)


def _findings(result: dict[str, Any]) -> list[tuple[Any, ...]]:
    assert result["status"] == "ok", result["error"]
    return sorted((f["kind"], f["cause"], f["session"], f["seq"], f["key"]) for f in result["findings"])


def test_a_v1_copier_passing_on_its_inputs_v2_header_is_read_by_its_own_headers(
    spark: SparkSession, world: World, make_topic: Any, tmp_path: Path
) -> None:
    """A v2 producer writes five tickets to an input topic; a v1 copier copies each to the
    reconciled topic with the input record's headers (its v2 `audit` header among them)."""
    source = make_topic("in")
    world.insert(*TICKETS)
    config = {"bootstrap.servers": world.bootstrap, "linger.ms": 5}
    clients = make_topic("_audit.clients")
    with AuditedProducer(config, ledger_topic=world.producer_ledger, clients_topic=clients) as upstream:
        for ticket in TICKETS:
            upstream.produce(source, json.dumps({"ticket_id": ticket}).encode(), str(ticket).encode())
        assert upstream.flush(30) == 0
    inputs = read_topic(source, bootstrap=world.bootstrap)
    assert [m.key() for m in inputs] == [str(t).encode() for t in TICKETS]
    assert all(any(name == "audit" for name, _ in m.headers() or []) for m in inputs)

    delivered: list[tuple[int, int]] = []

    def report(err: Any, msg: Any) -> None:
        assert err is None, err
        delivered.append((msg.partition(), msg.offset()))

    copier = AuditedProducerV1(config, ledger_topic=world.producer_ledger, clients_topic=clients)
    try:
        for m in inputs:
            copier.produce(world.topic, m.value(), m.key(), headers=m.headers(), on_delivery=report)
        assert copier.flush(30) == 0
    finally:
        copier.close()
    assert len(delivered) == len(TICKETS)
    copied = read_topic(world.topic, bootstrap=world.bootstrap)
    assert sorted((m.partition(), m.offset()) for m in copied) == sorted(delivered)

    result = reconcile_once(spark, world.binding(consumer_groups=[], guarantee="at-least-once"), tmp_path)
    assert _findings(result) == []
