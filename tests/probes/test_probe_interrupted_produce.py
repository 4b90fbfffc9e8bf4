"""A KeyboardInterrupt (or another exception a signal handler raises that is not an
``Exception``) landing inside produce() never reuses a sequence number, leaves one unsent,
misaligns the ledgered keys, or leaves the sequence lock held (stop 72).

The client is a stand-in whose produce() is a C function that keeps its last call's arguments
(``BaseException.__init__``), as confluent-kafka's C produce() queues a record: CPython runs a
signal handler only at calls, function starts and backward jumps, so the handler's exception
lands where it would with the real client, at the latest as the call returns. The test is about
the wrapper's bookkeeping: no broker needed.
"""

from __future__ import annotations

import signal
import struct
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from auditor.probes import AuditedProducer, AuditedProducerV1
from auditor.probes.headers import AUDIT, AUDIT_SEQ


class Interrupted(BaseException):  # not an Exception, like KeyboardInterrupt
    pass


class LastCallClient:
    """A producer stand-in whose produce() (a C function) keeps the arguments of its last call.
    Ledger writes (keyword arguments) are refused: the test reads no ledger."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._last = Exception()
        self.produce = Exception.__init__.__get__(self._last)

    def last_call(self) -> tuple[Any, ...]:
        return self._last.args

    def poll(self, *args: Any) -> int:
        return 0

    def flush(self, *args: Any) -> int:
        return 0

    def __len__(self) -> int:
        return 0


@pytest.fixture
def interrupting() -> Iterator[None]:
    def raise_interrupted(*_: Any) -> None:
        raise Interrupted()

    previous = signal.signal(signal.SIGALRM, raise_interrupted)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        time.sleep(0.01)  # an alarm already delivered runs its handler here
    except Interrupted:
        pass
    signal.signal(signal.SIGALRM, previous)


def produce_interrupted(
    produce_one: Callable[[int], None], client: LastCallClient, locked: Callable[[], bool], count: int
) -> tuple[int, list[tuple[Any, ...]]]:
    """Call produce_one(1..count) with an alarm raising Interrupted every few calls; returns
    how many times it raised and the arguments of every call the client took. Fails at once
    when an interrupted call left the sequence lock held."""
    raised = 0
    armed = False
    i = 0
    taken: list[tuple[Any, ...]] = []
    last: tuple[Any, ...] = ()

    def take() -> None:  # idempotent: an alarm landing in it is followed by another call
        nonlocal last
        args = client.last_call()
        if args is not last and args:
            last = args
            taken.append(args)

    while i < count:
        try:
            while i < count:
                if not armed:
                    armed = True
                    signal.setitimer(signal.ITIMER_REAL, 0.00002)
                i += 1
                produce_one(i)
                take()
            signal.setitimer(signal.ITIMER_REAL, 0)
            time.sleep(0.001)  # an alarm already delivered runs its handler here
        except Interrupted:
            armed = False
            raised += 1
            take()
            assert not locked(), "an interrupted produce() left the sequence lock held"
    return raised, taken


@pytest.mark.usefixtures("interrupting")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # an alarm landing in a gc callback
@pytest.mark.parametrize(
    ("native", "headers"),
    [(False, None), (False, [("h", b"1")]), (True, [("h", b"1")]), (True, None)],
    ids=["python", "python-headers", "native-headers", "native"],
)
def test_an_interrupted_v2_produce_uses_each_sequence_once_and_ledgers_its_key(
    native: bool, headers: list[tuple[str, bytes]] | None
) -> None:
    producer = AuditedProducer(
        {"bootstrap.servers": "fake:9092"}, producer_factory=LastCallClient, native=native, ledger_flush_interval_s=3600
    )
    client = producer.producer
    assert isinstance(client, LastCallClient)
    raised, taken = produce_interrupted(
        lambda i: producer.produce("t", b"v", b"k%d" % i, headers=headers), client, producer._seq_lock.locked, 20_000
    )
    assert raised > 10  # the alarm did land inside produce() calls

    key_of_seq: dict[int, bytes] = {}
    uses = Counter[int]()
    for args in taken:
        seq = struct.unpack(">B16sQQ", dict(args[7])[AUDIT][:33])[2]
        uses[seq] += 1
        key_of_seq[seq] = args[2]
    stream = producer._topics["t"]
    assert [seq for seq, n in uses.items() if n > 1] == []
    assert set(uses) == set(range(stream.next_seq))  # every sequence used up was sent
    assert stream.keys_base + len(stream.keys) == stream.next_seq
    assert stream.keys == [key_of_seq[seq] for seq in range(stream.next_seq)]
    firsts = [first for first, _ in stream.stamps][1:]  # after the one at or before keys_base
    assert firsts == sorted(set(firsts))  # no stamp of a sequence given back and used again
    producer._ledger.close(0)


@pytest.mark.usefixtures("interrupting")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # an alarm landing in a gc callback
@pytest.mark.parametrize("headers", [None, [("h", b"1")]], ids=["plain", "headers"])
def test_an_interrupted_v1_produce_uses_each_sequence_once(headers: list[tuple[str, bytes]] | None) -> None:
    producer = AuditedProducerV1(
        {"bootstrap.servers": "fake:9092"}, producer_factory=LastCallClient, ledger_flush_interval_s=3600
    )
    client = producer.producer
    assert isinstance(client, LastCallClient)
    raised, taken = produce_interrupted(
        lambda i: producer.produce("t", b"v", b"k%d" % i, headers=headers), client, producer._seq_lock.locked, 20_000
    )
    assert raised > 10

    uses = Counter(int(dict(args[7])[AUDIT_SEQ]) for args in taken)
    assert [seq for seq, n in uses.items() if n > 1] == []
    assert set(uses) == set(range(producer._topics["t"].next_seq))
    producer._ledger.close(0)
