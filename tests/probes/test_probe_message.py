"""record_position and record_headers: typed reads of a consumed record."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Message

from auditor.probes.message import record_headers, record_position


def test_it_reads_a_records_position() -> None:
    msg = Message(topic="tickets", partition=2, offset=41)
    assert record_position(msg) == ("tickets", 2, 41)


def test_it_refuses_an_error_event_as_a_record() -> None:
    event = Message(error=KafkaError(KafkaError._TRANSPORT))
    with pytest.raises(AssertionError, match="an error event"):
        record_position(event)


def test_it_reads_headers_and_none_as_no_headers() -> None:
    assert record_headers(Message(topic="t", partition=0, offset=0, headers=[("a", b"1"), ("b", None)])) == [
        ("a", b"1"),
        ("b", None),
    ]
    assert record_headers(Message(topic="t", partition=0, offset=0)) == []
