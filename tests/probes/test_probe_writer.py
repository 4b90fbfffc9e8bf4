"""LedgerWriter: ordering, batching, resilience to bad rows and a full queue."""

from __future__ import annotations

import json

import pytest

from auditor.probes import writer as writer_module
from auditor.probes.writer import LedgerWriter
from tests.probes.fakes import FactoryRecorder


def make_writer(factory: FactoryRecorder, **kwargs: object) -> LedgerWriter:
    options: dict[str, object] = {"batch_size": 3, "flush_interval_s": 3600, "name": "test"}
    options.update(kwargs)
    return LedgerWriter({"client.id": "w"}, "ledger", b"session", producer_factory=factory, **options)  # type: ignore[arg-type]


def written(factory: FactoryRecorder) -> list[dict[str, object]]:
    producer = factory.producers[0]
    return [json.loads(item.value) for item in producer.delivered + producer.queued]


def test_it_writes_records_after_the_rows_buffered_before_them() -> None:
    factory = FactoryRecorder()
    writer = make_writer(factory)
    rows = writer.stream({"v": 1, "type": "processed", "sid": "s", "group": None})
    rows.append(("t", 0, 0, "a", 1))
    writer.write(b'{"v":1,"type":"session-end","sid":"s","group":null,"ts":2}')
    assert [r["type"] for r in written(factory)] == ["processed", "session-end"]
    assert all(item.key == b"session" for item in factory.producers[0].queued)
    writer.close(1)
    assert factory.producers[0].closed


def test_it_splits_each_stream_by_batch_size() -> None:
    factory = FactoryRecorder()
    writer = make_writer(factory)
    first = writer.stream({"type": "batch", "topic": "a"})
    second = writer.stream({"type": "batch", "topic": "b"})
    first.extend((i,) for i in range(7))
    second.append((0,))
    assert writer.pending_count() == 8
    assert writer.flush_entries() == 8
    assert [(r["topic"], len(r["entries"])) for r in written(factory)] == [("a", 3), ("a", 3), ("a", 1), ("b", 1)]  # type: ignore[arg-type]
    writer.close(1)


def test_it_degrades_a_value_json_cannot_carry_instead_of_failing() -> None:
    factory = FactoryRecorder()
    writer = make_writer(factory)
    rows = writer.stream({"type": "processed"})
    rows.append(("t", 0, 0, b"\xffraw", 1))
    rows.append(("t", 0, 1, {1, 2}, 1))
    writer.flush_entries()
    [record] = written(factory)
    assert record["entries"] == [["t", 0, 0, "\\xffraw", 1], ["t", 0, 1, "{1, 2}", 1]]
    writer.close(1)


def test_it_counts_records_it_had_to_drop_when_the_queue_stays_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer_module, "_QUEUE_FULL_RETRY_S", 0.1)
    factory = FactoryRecorder()
    writer = LedgerWriter(
        {"client.id": "w", "queue.buffering.max.messages": 0},
        "ledger",
        b"k",
        batch_size=10,
        flush_interval_s=3600,
        name="full",
        producer_factory=factory,
    )
    writer.write(b"{}")
    assert writer.stats()["ledger_records_dropped"] == 1
    assert writer.last_error == "ledger producer queue full"
    writer.close(0.1)


def test_it_rejects_nonsense_settings() -> None:
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        make_writer(FactoryRecorder(), batch_size=0)
    with pytest.raises(ValueError, match="flush_interval_s must be > 0"):
        make_writer(FactoryRecorder(), flush_interval_s=0)
