"""A probed consumer whose positions go to a probed producer's transactions, without a broker:
its marks are written when the transaction commits, named `marks-aborted` when it aborts, and
named `marks-lost` when it closes with the transaction still open (docs/contracts.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Message, TopicPartition

from auditor.probes import AuditedConsumer, AuditedProducer, MarksAborted, MarksLost, ProcessedRanges
from auditor.probes import decode_ledger_record as decode
from auditor.probes.consumer import split_at_positions
from tests.probes.fakes import FactoryRecorder, FakeConsumer, FakeProducer

SOURCE = "source"


class TransactionalFake(FakeProducer):
    """A FakeProducer with the transactional calls, which it records."""

    def __init__(self, config: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.calls: list[tuple[str, Any]] = []

    def init_transactions(self, *timeout: float) -> None:
        self.calls.append(("init", None))

    def begin_transaction(self) -> None:
        self.calls.append(("begin", None))

    def send_offsets_to_transaction(self, positions: Any, metadata: Any, *timeout: float) -> None:
        self.calls.append(("send_offsets", (positions, bytes(metadata))))

    def commit_transaction(self, *timeout: float) -> None:
        self.calls.append(("commit", None))

    def abort_transaction(self, *timeout: float) -> None:
        self.calls.append(("abort", None))


_OPENED: list[AuditedConsumer | AuditedProducer] = []


@pytest.fixture(autouse=True)
def _closed_after_the_test() -> Iterator[None]:
    """Every consumer and producer a test built is closed after it: a holding consumer left
    open would hear later tests' aborts (HOLDING is the process's)."""
    yield
    while _OPENED:
        _OPENED.pop().close()


def _copier(hot_path: str, transactional: bool = False) -> tuple[AuditedConsumer, AuditedProducer, FactoryRecorder]:
    ledgers = FactoryRecorder()
    consumer = AuditedConsumer(
        {"group.id": "copier"},
        consumer_factory=lambda config: FakeConsumer(config),
        producer_factory=ledgers,
        ledger_flush_interval_s=600,
        transactional=transactional,
    )
    producer = AuditedProducer(
        {"transactional.id": "copier-1"},
        producer_factory=lambda config: TransactionalFake(config),
        ledger_flush_interval_s=600,
    )
    _OPENED.extend((consumer, producer))
    return consumer, producer, ledgers


def _mark(consumer: AuditedConsumer, *offsets: int, partition: int = 0) -> None:
    for offset in offsets:
        consumer.mark_processed(Message(topic=SOURCE, partition=partition, offset=offset, value=b"v"))


def _transaction(consumer: AuditedConsumer, producer: AuditedProducer, position: int, commit: bool) -> None:
    producer.send_offsets_to_transaction([TopicPartition(SOURCE, 0, position)], consumer.consumer_group_metadata())
    if commit:
        producer.commit_transaction()
    else:
        producer.abort_transaction()


def _ledger(consumer: AuditedConsumer, ledgers: FactoryRecorder) -> list[Any]:
    consumer.flush_ledger(1)
    return [decode(p.value) for p in ledgers.ledger.delivered + ledgers.ledger.queued]


def _processed(records: list[Any]) -> list[tuple[int, int, int]]:
    return [(r.partition, r.first, r.last) for rec in records if isinstance(rec, ProcessedRanges) for r in rec.ranges]


def _named(records: list[Any], kind: type) -> list[tuple[int, int, int]]:
    return [(r.partition, r.first, r.last) for rec in records if isinstance(rec, kind) for r in rec.ranges]


@pytest.mark.parametrize("transactional", [False, True])
def test_a_copiers_marks_are_written_when_their_transaction_commits_and_named_aborted_when_it_aborts(
    hot_path: str, transactional: bool
) -> None:
    consumer, producer, ledgers = _copier(hot_path, transactional)
    _mark(consumer, 0, 1, 2)
    _transaction(consumer, producer, 3, commit=True)
    _mark(consumer, 3, 4, 5)
    consumer.flush_ledger(1)  # the background flush: held marks stay held
    assert _processed(_ledger(consumer, ledgers)) == [(0, 0, 2)]
    _transaction(consumer, producer, 6, commit=False)
    _mark(consumer, 3, 4, 5, 6)  # again after seeking back, and one of the next transaction
    _transaction(consumer, producer, 6, commit=True)
    records = _ledger(consumer, ledgers)
    assert _processed(records) == [(0, 0, 2), (0, 3, 5)]
    aborted = [r for r in records if isinstance(r, MarksAborted)]
    assert [(r.sid, r.group, r.producer) for r in aborted] == [(consumer.session_id, "copier", producer.session_id)]
    assert _named(records, MarksAborted) == [(0, 3, 5)]
    # Offset 6 is past the committed transaction's position: it waits for the next one. The
    # consumer closed with it open: its outcome is unknown (marks-lost, never unprocessed).
    consumer.close()
    records = [decode(p.value) for p in ledgers.ledger.delivered + ledgers.ledger.queued]
    assert _processed(records) == [(0, 0, 2), (0, 3, 5)]
    assert _named(records, MarksLost) == [(0, 6, 6)]


def test_a_consumer_whose_positions_never_go_to_a_transaction_writes_its_marks_as_before(hot_path: str) -> None:
    consumer, _, ledgers = _copier(hot_path)
    _mark(consumer, 0, 1, 2)
    consumer.flush_ledger(1)
    assert _processed(_ledger(consumer, ledgers)) == [(0, 0, 2)]
    consumer.close()
    records = [decode(p.value) for p in ledgers.ledger.delivered + ledgers.ledger.queued]
    assert _named(records, MarksLost) == [] and _named(records, MarksAborted) == []


def test_a_consumer_that_commits_itself_writes_the_marks_it_held(hot_path: str) -> None:
    consumer, _, ledgers = _copier(hot_path, transactional=True)
    _mark(consumer, 0, 1)
    consumer.flush_ledger(1)  # the background flush: held marks stay held
    _mark(consumer, 2, 3)
    consumer.commit(offsets=[TopicPartition(SOURCE, 0, 4)], asynchronous=False)
    assert _processed(_ledger(consumer, ledgers)) == [(0, 0, 3)]  # one run, one entry


def test_it_splits_held_ranges_at_the_positions_a_transaction_carried() -> None:
    rows = [("s", 0, 0, 9, 1, 2), ("s", 1, 0, 4, 1, 2), ("s", 0, 12, 14, 3, 4), ("other", 0, 0, 3, 1, 2)]
    inside, outside = split_at_positions(rows, {("s", 0): 5, ("other", 0): 0})
    assert inside == [("s", 0, 0, 4, 1, 2)]
    assert outside == [("s", 0, 5, 9, 1, 2), ("s", 1, 0, 4, 1, 2), ("s", 0, 12, 14, 3, 4), ("other", 0, 0, 3, 1, 2)]


@pytest.mark.parametrize("transactional", [False, True])
def test_marks_of_a_transaction_aborted_before_its_offsets_were_sent_are_named_aborted_at_the_next_commit(
    hot_path: str, transactional: bool
) -> None:
    consumer, producer, ledgers = _copier(hot_path, transactional)
    if not transactional:  # a consumer that is not built transactional holds from its first transaction on
        _mark(consumer, 0)
        _transaction(consumer, producer, 1, commit=True)
    first = 1 if not transactional else 0
    _mark(consumer, *range(first, first + 5))
    producer.abort_transaction()  # processing failed before send_offsets_to_transaction
    _mark(consumer, *range(first, first + 5))  # again, after seeking back
    _transaction(consumer, producer, first + 5, commit=True)
    records = _ledger(consumer, ledgers)
    assert _processed(records) == ([(0, 0, 0)] if not transactional else []) + [(0, first, first + 4)]
    assert _named(records, MarksAborted) == [(0, first, first + 4)]
    assert [r.producer for r in records if isinstance(r, MarksAborted)] == [producer.session_id]


def test_marks_held_at_another_producers_abort_are_written_by_their_own_producers_commit(hot_path: str) -> None:
    consumer, producer, ledgers = _copier(hot_path, transactional=True)
    other = AuditedProducer(
        {"transactional.id": "copier-2"},
        producer_factory=lambda config: TransactionalFake(config),
        ledger_flush_interval_s=600,
    )
    _OPENED.append(other)
    _mark(consumer, 0, 1, 2)
    other.abort_transaction()  # another copier of the process aborts: not this consumer's transaction
    _mark(consumer, 3, 4)
    _transaction(consumer, producer, 5, commit=True)
    records = _ledger(consumer, ledgers)
    assert _named(records, MarksAborted) == []
    # written in marking order (the rows held across the abort first): the session's last
    # offset is the last one marked
    assert _processed(records) == [(0, 0, 4)] and consumer.last_offsets() == {SOURCE: {0: 4}}


def test_marks_of_a_partition_an_aborted_transaction_did_not_carry_are_named_aborted_when_one_carries_it(
    hot_path: str,
) -> None:
    consumer, producer, ledgers = _copier(hot_path, transactional=True)
    _mark(consumer, 0, 1)
    _mark(consumer, 7, 8, partition=1)
    _transaction(consumer, producer, 2, commit=False)  # carried partition 0 only
    _mark(consumer, 0, 1)
    _mark(consumer, 7, 8, partition=1)
    producer.send_offsets_to_transaction(
        [TopicPartition(SOURCE, 0, 2), TopicPartition(SOURCE, 1, 9)], consumer.consumer_group_metadata()
    )
    producer.commit_transaction()
    records = _ledger(consumer, ledgers)
    assert sorted(_processed(records)) == [(0, 0, 1), (1, 7, 8)]
    assert sorted(_named(records, MarksAborted)) == [(0, 0, 1), (1, 7, 8)]


def test_a_consumer_failing_to_note_an_abort_does_not_stop_the_abort(
    hot_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    consumer, producer, _ = _copier(hot_path, transactional=True)

    def broken() -> None:
        raise RuntimeError("compaction failed")

    with monkeypatch.context() as patched:
        patched.setattr(consumer, "_compact", broken)
        producer.abort_transaction()
    fake = producer.producer
    assert isinstance(fake, TransactionalFake) and ("abort", None) in fake.calls
