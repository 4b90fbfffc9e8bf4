"""The canary runner after a fatal producer error, and when an error leaves its loop.

No broker: the clients are real confluent-kafka clients pointed at a closed port, so records
stay queued in the producer (the state a fatal error finds them in). The fatal error itself is
handed in as librdkafka hands it to error_cb; the real one (an unclean election) is the lab's
`canary-unclean-election`.
"""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from auditor.canary.accounting import CanaryAccounting
from auditor.canary.runner import CanaryOptions, CanaryService, InFlight, is_fatal

NOWHERE = "127.0.0.1:1"  # nothing listens: every client stays disconnected
FATAL = KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "sequence desynchronised", fatal=True)


def service(**options: object) -> CanaryService:
    return CanaryService(
        CanaryOptions(bootstrap_servers=NOWHERE, topic="canary-fatal", store_points=False, **options)  # type: ignore[arg-type]
    )


def test_it_tells_fatal_errors_from_the_others():
    assert is_fatal(KafkaException(FATAL))
    assert is_fatal(KafkaException(KafkaError(KafkaError._FATAL)))  # what produce() raises once fatal
    assert not is_fatal(KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)))
    assert not is_fatal(KafkaException("no KafkaError in it"))
    assert not is_fatal(KafkaException())


def test_it_settles_each_record_in_flight_once():
    in_flight = InFlight()
    in_flight.add(0, 0)
    in_flight.add(1, 0)
    in_flight.add(0, 1)
    assert in_flight.settle(0, 0)
    assert not in_flight.settle(0, 0)  # a repeated report
    assert in_flight.abandon() == [(0, 1), (1, 0)]
    assert not in_flight.settle(0, 1)  # the report of an abandoned record, after it was settled
    assert len(in_flight) == 0


def test_it_replaces_a_fatal_producer_and_counts_what_it_held_as_produce_errors():
    canary = service(sla_s=1.0)
    accounting = CanaryAccounting(canary.session, [0, 1], sla_ms=1000.0)
    first = canary._new_producer()
    canary._producer = first
    for partition in (0, 1):
        assert canary._produce_one(first, accounting, partition)
    assert len(canary._in_flight) == 2

    canary._client_error(FATAL)  # as librdkafka reports it through error_cb, served by poll()
    second = canary._current_producer(accounting)

    assert second is not first
    assert canary._producers_replaced == 1
    assert len(canary._in_flight) == 0
    # Long past the SLA: the abandoned records were never acknowledged, so never lost.
    accounting.expire(canary._monotonic() * 1000 + 60_000)
    totals = accounting.report()["totals"]
    assert (totals["sent"], totals["produce_errors"], totals["lost"], totals["received"]) == (2, 2, 0, 0)
    assert totals["pending"] == 0
    # The new producer takes the next records, from the next sequence.
    assert canary._produce_one(second, accounting, 0)
    assert accounting.report()["partitions"]["0"]["sent"] == 2
    canary._in_flight.abandon()
    canary._close_producer(second)


def test_it_ignores_transient_client_errors():
    canary = service()
    canary._client_error(KafkaError(KafkaError._ALL_BROKERS_DOWN))
    assert canary._fatal is None


def test_it_closes_the_open_minute_when_an_error_leaves_the_loop(caplog):
    calls = {"n": 0}

    def clock_that_fails_once() -> float:
        import time

        calls["n"] += 1
        # calls 1 and 2 label the first minute and time its end; 3 stamps the first send: 4 is
        # inside the loop, after a first round of sends
        if calls["n"] == 4:
            raise RuntimeError("an error nobody foresaw")
        return time.time()

    canary = CanaryService(
        CanaryOptions(bootstrap_servers=NOWHERE, topic="canary-fatal", store_points=False, drain_s=0.2),
        clock=clock_that_fails_once,
    )
    accounting = CanaryAccounting(canary.session, [0], sla_ms=20_000.0)
    canary._producer = canary._new_producer()
    admin = AdminClient({"bootstrap.servers": NOWHERE})
    consumer = Consumer({"bootstrap.servers": NOWHERE, "group.id": "canary-fatal-test"})
    try:
        with caplog.at_level(logging.INFO, logger="auditor.canary.runner"):
            with pytest.raises(RuntimeError, match="nobody foresaw"):
                canary._loop(admin, consumer, accounting, {}, {0: 0}, canary._monotonic())
    finally:
        consumer.close()
        canary._close_producer(canary._producer)
    closed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("minute ")]
    assert len(closed) == 1 and "(partial)" in closed[0], closed
    assert "sent 1" in closed[0]
