"""An exactly-once copier (read_committed AuditedConsumer, transactional AuditedProducer with
send_offsets_to_transaction) whose transaction aborts, against the real brokers and Spark.

Ground truth comes from the clients: the copier's abort and commit calls returned, a full
read_committed read of its output topic, and the offsets each consumer polled.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from pyspark.sql import SparkSession

from auditor.probes import AuditedConsumer, MarksAborted, decode_ledger_record
from tests.probes.kafka_helpers import read_topic
from tests.support.copier import run_copier
from tests.support.kafka_reads import consume
from tests.support.reconcile_world import World, reconcile_once

pytestmark = pytest.mark.integration

TICKETS = tuple(range(1, 16))
BATCH = 5  # records per transaction
FROM_THE_START = pytest.mark.parametrize(
    "transactional", [False, True], ids=["held-from-its-first-transaction-on", "held-from-the-start"]
)


def _source(world: World) -> None:
    """Tickets 1-15 at offsets 0-14 of partition 0, and their rows."""
    for ticket in TICKETS:
        world.produce(f"t{ticket}", ticket, partition=0, age_s=120)
    world.insert(*TICKETS)
    assert [world.at(f"t{t}") for t in TICKETS] == [(0, offset) for offset in range(len(TICKETS))]


def _copier_args(world: World, make_topic: Any, output: str) -> list[str]:
    return [
        world.bootstrap,
        world.topic,
        output,
        world.group,
        world.consumer_ledger,
        make_topic("_audit.producer-ledger"),
        make_topic("_audit.clients"),
        str(BATCH),
    ]


def _batch(start: int) -> list[int]:
    return list(range(start, start + BATCH))


def _copied_once(world: World, output: str, count: int) -> None:
    """A full read_committed read of the copier's output: `count` records, each once."""
    copies = Counter(m.value() for m in read_topic(output, bootstrap=world.bootstrap))
    assert len(copies) == count and set(copies.values()) == {1}


def _findings(result: dict[str, Any], kind: str) -> dict[str, list[tuple[int, int]]]:
    """Per group, the (partition, offset) of each finding of `kind`."""
    assert result["status"] == "ok", result["error"]
    found: dict[str, list[tuple[int, int]]] = {}
    for f in result["findings"]:
        if f["kind"] == kind:
            found.setdefault(f["group"], []).append((f["partition"], f["offset"]))
    return {group: sorted(at) for group, at in found.items()}


def _process_twice(world: World, group: str, make_topic: Any) -> None:
    """A non-transactional probed consumer of `group` that really processes every ticket twice
    (seeks back), then commits past them."""
    settings = {"bootstrap.servers": world.bootstrap, "group.id": group, "enable.auto.commit": False}
    probed = AuditedConsumer(settings, ledger_topic=world.consumer_ledger, clients_topic=make_topic("_audit.clients"))
    try:
        for _ in range(2):
            polled = consume(probed, world.topic, 0, 0, len(TICKETS))  # every record, from offset 0
            assert [m.offset() for m in polled] == list(range(len(TICKETS)))
            for msg in polled:
                probed.mark_processed(msg)
        probed.commit(offsets=[TopicPartition(world.topic, 0, len(TICKETS))], asynchronous=False)
    finally:
        probed.close()


@FROM_THE_START
@pytest.mark.parametrize("mode", ["abort-then-commit", "abort-before-send-offsets"])
def test_an_exactly_once_copier_whose_transaction_aborted_is_not_reported_reprocessed(
    spark: SparkSession, world: World, make_topic: Any, tmp_path: Path, transactional: bool, mode: str
) -> None:
    """The copier's consumer holds its marks from its first send_offsets_to_transaction on (a
    first transaction committed), or from the start (``transactional=True``). The transaction
    it aborts had its positions sent, or was aborted before (processing failed first)."""
    _source(world)
    output = make_topic("copy")
    told = run_copier(mode, *_copier_args(world, make_topic, output), transactional=transactional)
    # The copier processed a batch twice: once in the transaction it aborted (the abort call
    # returned), once in the one it committed; its output holds each record once.
    first = [] if transactional else _batch(0)
    assert told.get("first", []) == first
    assert told["aborted"] == told["committed"] == _batch(len(first))
    _copied_once(world, output, len(first) + BATCH)
    # A non-transactional consumer that processes every record twice, beside it.
    plain = f"plain-{uuid.uuid4().hex[:8]}"
    _process_twice(world, plain, make_topic)

    result = reconcile_once(spark, world.binding(consumer_groups=[world.group, plain]), tmp_path)
    twice = [(0, offset) for offset in range(len(TICKETS))]
    assert _findings(result, "reprocessed") == {plain: twice}
    # Every record was processed (committed) by both groups: none is unprocessed.
    assert _findings(result, "unprocessed") == {}
    # The aborted marks are in the consumer ledger, named as such, for the copier's session.
    aborted = [
        r
        for r in map(
            decode_ledger_record, (m.value() for m in read_topic(world.consumer_ledger, bootstrap=world.bootstrap))
        )
        if isinstance(r, MarksAborted)
    ]
    assert [(r.sid, [(x.partition, x.first, x.last) for x in r.ranges]) for r in aborted] == [
        (told["session"], [(0, told["aborted"][0], told["aborted"][-1])])
    ]


@FROM_THE_START
def test_a_copier_killed_in_its_transaction_and_run_again_is_not_reported_reprocessed(
    spark: SparkSession, world: World, make_topic: Any, tmp_path: Path, transactional: bool
) -> None:
    """Killed (-9) with its transaction open, past three ledger flush intervals after marking
    its records; run again, the copier processes them again (the group's offsets never moved
    past them) and commits."""
    _source(world)
    output = make_topic("copy")
    args = _copier_args(world, make_topic, output)
    killed = run_copier("stop-mid-transaction", *args, transactional=transactional, kill_after_report=True)
    first = [] if transactional else _batch(0)
    assert killed.get("first", []) == first and killed["processed"] == _batch(len(first))
    # Run again: its init_transactions fences the killed one's transaction (aborted), and it
    # copies the killed one's records again from the group's committed offset (in its first
    # transaction, which it commits, or in the one it aborts and then again in the next).
    told = run_copier("abort-then-commit", *args, transactional=transactional)
    again = told["first"] if not transactional else told["committed"]
    assert again == killed["processed"]
    _copied_once(world, output, len(first) + BATCH + (0 if transactional else BATCH))

    result = reconcile_once(spark, world.binding(), tmp_path)
    assert _findings(result, "reprocessed") == {}
    assert _findings(result, "unprocessed") == {}
