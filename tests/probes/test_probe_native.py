"""The native produce() hot path (auditor/probes/_hotpath.c) against the pure-Python one,
without a broker: the same records handed to the client, the same sequence state, the same
errors, the lock's semantics, and threads that never share a sequence.

The truth is what the wrapped (fake) client received and the headers decoded from it with
the contract's own struct, not what either hot path says about itself.
"""

from __future__ import annotations

import gc
import random
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, Message

from auditor.probes import AUDIT, AuditedConsumer, AuditedProducer, ProcessedRanges, decode_ledger_record
from auditor.probes._hotpath import SeqLock
from auditor.probes.headers import AUDIT_V2
from auditor.probes.native import native_hot_path_available
from tests.probes.fakes import FactoryRecorder, FakeConsumer, FakeProducer, Produced


@pytest.fixture(autouse=True)
def native_built() -> None:
    # Failed, never skipped: make test builds the module (stack/bootstrap.sh).
    if not native_hot_path_available():
        pytest.fail(
            "the native hot path is not built (stack/bootstrap.sh builds it): python -m auditor.probes.build_native"
        )


def make(native: bool, factory: Callable[[dict[str, Any]], Any], **kwargs: Any) -> AuditedProducer:
    producer = AuditedProducer(
        {"bootstrap.servers": "fake:9092"},
        ledger_topic="ledger",
        clients_topic="clients",
        producer_factory=factory,
        ledger_flush_interval_s=3600,
        native=native,
        **kwargs,
    )
    assert producer.native is native
    return producer


def data(factory: FactoryRecorder) -> list[Produced]:
    return [p for p in factory.producers[0].delivered + factory.producers[0].queued if p.topic != "ledger"]


def decoded(item: Produced) -> tuple[int, bytes, int, int, bytes]:
    assert item.headers is not None and item.headers[0][0] == AUDIT
    value = item.headers[0][1]
    version, session, seq, ts_ms = AUDIT_V2.unpack_from(value)
    return version, session, seq, ts_ms, value[AUDIT_V2.size :]


CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    (("t", b"v0"), {}),
    (("t", b"v1", b"k1"), {}),
    (("t",), {"value": b"v2", "key": b"k2"}),
    (("t", b"v3", "text-key", 2), {}),
    (("u", b"v4"), {"key": b"k4", "partition": 1, "timestamp": 1_700_000_000_123}),
    (("t", None, None, -1, None, 5), {}),
    ((), {"topic": "u", "value": b"v6"}),
    (("t", b"v7"), {"headers": None, "on_delivery": None, "callback": None}),
]


@pytest.mark.parametrize("native", [True, False])
def test_it_hands_the_client_the_record_and_a_v2_header_and_advances_the_sequence(native: bool) -> None:
    factory = FactoryRecorder()
    producer = make(native, factory)
    before = time.time_ns() // 1_000_000
    for args, kwargs in CALLS:
        producer.produce(*args, **kwargs)
    after = time.time_ns() // 1_000_000
    sent = data(factory)
    assert [(p.topic, p.value, p.key, p.partition, p.timestamp, p.callback) for p in sent] == [
        ("t", b"v0", None, -1, 0, None),
        ("t", b"v1", b"k1", -1, 0, None),
        ("t", b"v2", b"k2", -1, 0, None),
        ("t", b"v3", "text-key", 2, 0, None),
        ("u", b"v4", b"k4", 1, 1_700_000_000_123, None),
        ("t", None, None, -1, 5, None),
        ("u", b"v6", None, -1, 0, None),
        ("t", b"v7", None, -1, 0, None),
    ]
    headers = [decoded(p) for p in sent]
    assert {h[0] for h in headers} == {2}
    assert {h[1] for h in headers} == {bytes.fromhex(producer.session_id)}
    # One sequence per topic, in call order; no audit-id appended (the key says it).
    assert [(p.topic, h[2]) for p, h in zip(sent, headers, strict=True)] == [
        ("t", 0), ("t", 1), ("t", 2), ("t", 3), ("u", 0), ("t", 4), ("u", 1), ("t", 5)
    ]  # fmt: skip
    assert all(before <= h[3] <= after for h in headers) and {h[4] for h in headers} == {b""}
    streams = producer._topics
    assert (streams["t"].next_seq, streams["u"].next_seq) == (6, 2)
    assert streams["t"].keys == [None, b"k1", b"k2", "text-key", None, None]
    assert streams["u"].keys == [b"k4", None]
    # The stamps: where the produce time changed, each the header's time of that sequence.
    header_ts = {(p.topic, h[2]): h[3] for p, h in zip(sent, headers, strict=True)}
    for topic in ("t", "u"):
        changes = streams[topic].stamps[1:]  # the first is the stream's start
        assert changes and changes[0][0] == 0
        assert all(header_ts[(topic, seq)] == ts for seq, ts in changes)
        assert streams[topic].last_ms == header_ts[(topic, streams[topic].next_seq - 1)]
    producer.close()


class CopyingClient(FakeProducer):
    """Keeps copies of what it was handed, as librdkafka does (the native path may then
    refill the same list for the next record)."""

    def produce(self, topic: str, value: Any = None, *args: Any, **kwargs: Any) -> None:
        headers = kwargs.pop("headers", args[5] if len(args) > 5 else None)
        copied = None if headers is None else [(name, bytes(v)) for name, v in headers]
        super().produce(topic, value, *args[:5], headers=copied, **kwargs)


class ExtendingClient(CopyingClient):
    """Adds a header of its own to the list it was handed and keeps nothing (as a tracing
    wrapper does), or keeps only the audit tuple."""

    keep_tuple = False
    kept: list[Any] = []

    def produce(self, topic: str, value: Any = None, *args: Any, **kwargs: Any) -> None:
        headers = kwargs.get("headers", args[5] if len(args) > 5 else None)
        if headers is None or topic != "t":
            pass
        elif self.keep_tuple:
            self.kept.append(headers[0])
        else:
            headers.append(("traceparent", b"00-x"))
        super().produce(topic, value, *args, **kwargs)


@pytest.mark.parametrize("client", [CopyingClient, ExtendingClient, "keep-tuple"])
def test_each_record_gets_its_own_header_whatever_the_client_keeps(client: Any) -> None:
    def factory(config: dict[str, Any]) -> FakeProducer:
        if client == "keep-tuple":
            inner = ExtendingClient(dict(config))
            inner.keep_tuple, inner.kept = True, []
            return inner
        return cast(FakeProducer, client(dict(config)))

    producer = make(True, factory)
    for i in range(50):
        producer.produce("t", b"v%d" % i)
    inner = cast(FakeProducer, producer._producer)
    sent = [p for p in inner.queued if p.topic == "t"]
    extra = [("traceparent", b"00-x")] if client is ExtendingClient else []
    assert [p.headers[1:] if p.headers else None for p in sent] == [extra] * 50
    assert [decoded(p)[2] for p in sent] == list(range(50))
    if client == "keep-tuple":
        kept = cast(ExtendingClient, inner).kept
        assert [AUDIT_V2.unpack_from(v)[2] for _, v in kept] == list(range(50))
    producer._ledger.close(1)


@pytest.mark.parametrize("native", [True, False])
def test_it_takes_the_options_path_for_headers_callbacks_and_a_key_function(native: bool) -> None:
    factory = FactoryRecorder()
    producer = make(native, factory)
    calls: list[Any] = []
    producer.produce("t", b"a", b"k", headers={"trace": b"1", "audit-id": "TCK-1"})
    producer.produce("t", b"b", on_delivery=lambda err, msg: calls.append(err))
    producer.produce("t", b"c", callback=lambda err, msg: calls.append(err))
    sent = data(factory)
    assert decoded(sent[0])[4] == b"TCK-1" and sent[0].headers is not None and sent[0].headers[1] == ("trace", b"1")
    assert sent[1].callback is not None and sent[2].callback is not None
    assert [decoded(p)[2] for p in sent] == [0, 1, 2]
    assert producer._topics["t"].keys == ["TCK-1", None, None]
    producer.close()

    keyed = FactoryRecorder()
    with_fn = make(native, keyed, key_fn=lambda value, key: value.decode())
    with_fn.produce("t", b"id-7", b"k")
    assert decoded(data(keyed)[0])[4] == b"id-7" and with_fn._topics["t"].keys == ["id-7"]
    with_fn.close()


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((), {}),
        (("t", b"v", None, -1, None, 0, None, "extra"), {}),
        (("t",), {"colour": "blue"}),
        (("t", b"v"), {"value": b"again"}),
    ],
)
def test_it_rejects_a_bad_call_as_the_python_one_does(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    errors = []
    for native in (True, False):
        factory = FactoryRecorder()
        producer = make(native, factory)
        with pytest.raises(TypeError) as raised:
            producer.produce(*args, **kwargs)
        errors.append(raised.type)
        assert data(factory) == []
        assert "t" not in producer._topics or producer._topics["t"].next_seq == 0
        producer.close()
    assert errors[0] is errors[1]


@pytest.mark.parametrize("native", [True, False])
def test_it_does_not_use_up_a_sequence_when_the_client_refuses_the_record(native: bool) -> None:
    factory = FactoryRecorder()
    producer = make(native, factory)
    factory.producers[0].max_queue = 2
    producer.produce("t", b"a", b"ka")
    producer.produce("t", b"b", b"kb")
    with pytest.raises(BufferError):
        producer.produce("t", b"c", b"kc")
    assert producer._topics["t"].next_seq == 2 and producer._topics["t"].keys == [b"ka", b"kb"]
    assert not producer._seq_lock.locked()  # released on the error path
    factory.producers[0].deliver()
    producer.produce("t", b"c", b"kc")
    assert [decoded(p)[2] for p in data(factory)] == [0, 1, 2]
    producer.close()


@pytest.mark.parametrize("native", [True, False])
def test_it_gives_concurrent_threads_distinct_sequences_each_with_its_own_key(native: bool) -> None:
    factory = FactoryRecorder()
    producer = make(native, factory)
    threads_n, each = 4, 5000
    start = threading.Barrier(threads_n)

    def send(thread: int) -> None:
        start.wait()
        for i in range(each):
            producer.produce("t", b"v", b"%d-%d" % (thread, i))

    threads = [threading.Thread(target=send, args=(n,)) for n in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sent = data(factory)
    seqs = [decoded(p)[2] for p in sent]
    assert sorted(seqs) == list(range(threads_n * each))
    keys = producer._topics["t"].keys
    assert all(keys[decoded(p)[2]] == p.key for p in sent)  # the keys list is in sequence order
    producer.close()


def test_the_native_lock_behaves_like_a_threading_lock() -> None:
    lock = SeqLock()
    assert lock.acquire() is True and lock.locked()
    assert lock.acquire(blocking=False) is False
    started = time.monotonic()
    assert lock.acquire(timeout=0.05) is False and time.monotonic() - started >= 0.04
    lock.release()
    assert not lock.locked()
    with pytest.raises(RuntimeError):
        lock.release()
    with pytest.raises(ValueError):
        lock.acquire(blocking=False, timeout=1)
    with lock:
        assert lock.locked()
    assert not lock.locked()

    # A holder in another thread: acquire() waits (without holding the GIL) until it releases.
    order: list[str] = []
    holding = threading.Event()

    def hold() -> None:
        with lock:
            holding.set()
            time.sleep(0.1)
            order.append("released")

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait(5)
    with lock:
        order.append("acquired")
    holder.join()
    assert order == ["released", "acquired"]


@pytest.mark.parametrize("native", [True, False])
def test_a_closed_producer_is_collected(native: bool) -> None:
    # produce() refers to the producer (its options path) and the producer to produce(): a
    # cycle the collector must be able to walk through the native object too.
    factory = FactoryRecorder()
    producer = make(native, factory)
    producer.produce("t", b"v")
    producer.close()
    ref = weakref.ref(producer)
    del producer, factory  # the fake client keeps the config, whose on_delivery is the producer's
    gc.collect()
    assert ref() is None


def make_consumer(native: bool, producers: FactoryRecorder) -> AuditedConsumer:
    consumer = AuditedConsumer(
        {"bootstrap.servers": "fake:9092", "group.id": "g"},
        ledger_topic="cledger",
        clients_topic="clients",
        consumer_factory=lambda config: FakeConsumer(config, []),
        producer_factory=producers,
        ledger_flush_interval_s=3600,  # the test decides when marks are written
        native=native,
    )
    assert consumer.native is native
    return consumer


def marks_sequence(rng: random.Random, count: int) -> list[Message]:
    """Marks as an application makes them: mostly the next offset of the partition it is on,
    sometimes another partition or topic, a repeat, a seek back, or an error event."""
    position = {("a", 0): 0, ("a", 1): 0, ("b", 0): 0}
    current = ("a", 0)
    marks: list[Message] = []
    for _ in range(count):
        roll = rng.random()
        if roll < 0.05:
            marks.append(Message(topic=current[0], partition=current[1], error=KafkaError(KafkaError._PARTITION_EOF)))
            continue
        if roll < 0.15:
            current = rng.choice(list(position))
        elif roll < 0.18:
            position[current] = max(0, position[current] - rng.randint(1, 3))  # a seek back: marks again
        elif roll < 0.20:
            position[current] += rng.randint(1, 3)  # a gap: records skipped
        topic, partition = current
        marks.append(Message(topic=topic, partition=partition, offset=position[current], value=b"v"))
        position[current] += 1
    return marks


def runs_by_hand(marks: list[Message]) -> list[tuple[str, int, int, int]]:
    runs: list[list[Any]] = []
    for msg in marks:
        if msg.error() is not None:
            continue
        topic, partition, offset = msg.topic(), msg.partition(), cast(int, msg.offset())
        if runs and runs[-1][:2] == [topic, partition] and runs[-1][3] == offset - 1:
            runs[-1][3] = offset
        else:
            runs.append([topic, partition, offset, offset])
    return [(run[0], run[1], run[2], run[3]) for run in runs]


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_it_ledgers_each_run_of_marks_of_a_consumer(native: bool, seed: int) -> None:
    marks = marks_sequence(random.Random(seed), 3000)
    producers = FactoryRecorder()
    consumer = make_consumer(native, producers)
    for msg in marks:
        consumer.mark_processed(msg)
    # Marks wait as messages (pure Python) or as closed runs (native) until a batch is full.
    assert consumer.stats()["runs_pending" if native else "marks_pending"] < 128
    consumer.close()
    ledger = producers.ledger
    records = [decode_ledger_record(i.value) for i in ledger.delivered + ledger.queued if i.topic == "cledger"]
    ranges = [
        (r.topic, r.partition, r.first, r.last)
        for rec in records
        if isinstance(rec, ProcessedRanges)
        for r in rec.ranges
    ]
    truth = runs_by_hand(marks)
    assert len(truth) > 100  # the sequence breaks runs often enough to matter
    # Every mark in marking order, repeats included; a run may be split where the ledger
    # wrote a record, never joined across a break.
    expanded = [(t, p, o) for t, p, first, last in ranges for o in range(first, last + 1)]
    assert expanded == [(m.topic(), m.partition(), m.offset()) for m in marks if m.error() is None]
    ends = {(t, p, last) for t, p, _, last in truth}
    assert {(t, p, last) for t, p, _, last in ranges} >= ends and len(ranges) <= len(truth) + len(records)


class SubMessage(Message):
    """Not the exact Message type: the marker calls its methods instead of reading its fields."""


def test_the_native_marker_reads_a_message_as_its_methods_do() -> None:
    from auditor.probes._hotpath import RangeMarker

    exact = RangeMarker(1_000_000, lambda: None, Message)
    # The installed confluent-kafka's layout is found, so the fields path is what runs here.
    assert exact.reads_fields() is True
    by_methods = RangeMarker(1_000_000, lambda: None, Message)
    marks = marks_sequence(random.Random(7), 2000)
    for msg in marks:
        exact(msg)
        fields: dict[str, Any] = {
            "topic": msg.topic(),
            "partition": msg.partition(),
            "offset": msg.offset(),
            "error": msg.error(),
            "value": msg.value(),
        }
        by_methods(SubMessage(**{k: v for k, v in fields.items() if v is not None}))
    truth = runs_by_hand(marks)
    assert exact.take() == truth
    assert by_methods.take() == truth
    # A field its method renders as None is not a record on either path.
    for bad in (Message(topic="t", partition=0), Message(topic="t", offset=3)):
        with pytest.raises(TypeError):
            exact(bad)
        with pytest.raises(TypeError):
            by_methods(SubMessage(topic=bad.topic(), partition=bad.partition(), offset=bad.offset()))
    # No topic: both paths take what topic() says.
    exact(Message(partition=0, offset=3))
    by_methods(SubMessage(partition=0, offset=3))
    assert exact.take() == by_methods.take() == [(None, 0, 3, 3)]


def test_consecutive_marks_stay_in_the_native_marker_until_runs_break() -> None:
    from auditor.probes._hotpath import RangeMarker

    calls: list[list[tuple[str, int, int, int]]] = []
    marker: Any = None

    def compact() -> None:
        calls.append(marker.take())

    marker = RangeMarker(2, compact, Message)
    for offset in range(10_000):
        marker(Message(topic="t", partition=0, offset=offset))
    assert calls == [] and len(marker) == 10_000 and marker.runs_waiting() == 0
    marker(Message(topic="t", partition=1, offset=0))  # closes run 1
    assert calls == []
    marker(Message(topic="t", partition=0, offset=0))  # closes run 2: a batch of runs is full
    assert calls == [[("t", 0, 0, 9_999), ("t", 1, 0, 0), ("t", 0, 0, 0)]]
    assert len(marker) == 0


class SwitchesThreads:
    """Garbage whose finalizer lets other threads run: the cyclic GC may call it while the
    marker builds a run's tuple."""

    def __init__(self) -> None:
        self.cycle = self

    def __del__(self) -> None:
        time.sleep(0)


def test_marks_and_takes_from_two_threads_lose_and_repeat_nothing() -> None:
    from auditor.probes._hotpath import RangeMarker

    marker = RangeMarker(1_000_000, lambda: None, Message)
    messages = [Message(topic="t", partition=i % 3, offset=i // 3 + (i % 7 == 0)) for i in range(60_000)]
    taken: list[tuple[str, int, int, int]] = []
    done = threading.Event()

    def take_all() -> None:
        while not done.is_set():
            taken.extend(marker.take())
            time.sleep(0)
        taken.extend(marker.take())

    thresholds = gc.get_threshold()
    gc.set_threshold(5)  # collections during marking, each running finalizers
    taker = threading.Thread(target=take_all)
    taker.start()
    try:
        for msg in messages:
            SwitchesThreads()
            marker(msg)
    finally:
        done.set()
        taker.join()
        gc.set_threshold(*thresholds)
    expanded = sorted((t, p, o) for t, p, first, last in taken for o in range(first, last + 1))
    assert expanded == sorted((m.topic(), m.partition(), m.offset()) for m in messages)


def test_the_native_marker_rejects_a_call_without_one_message() -> None:
    consumer = make_consumer(True, FactoryRecorder())
    mark: Any = consumer.mark_processed
    with pytest.raises(TypeError):
        mark()
    with pytest.raises(AttributeError):
        mark(object())  # not a message: no error() to call
    consumer.close()


def test_the_switch_takes_boolean_words_and_names_any_other_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUDITOR_PROBES_NATIVE", "off")
    assert native_hot_path_available() is False
    assert make(False, FactoryRecorder()).native is False
    monkeypatch.setenv("AUDITOR_PROBES_NATIVE", "maybe")
    with pytest.raises(ValueError, match="AUDITOR_PROBES_NATIVE='maybe'"):
        native_hot_path_available()


def test_the_native_handed_positions_keep_the_last_record_of_each_partition_as_python_does() -> None:
    from auditor.probes._hotpath import HandedPositions
    from auditor.probes.offset_store import PythonHandedPositions

    rng = random.Random(11)
    handed = marks_sequence(rng, 3000)
    feeds = [iter(handed), iter(handed), iter(handed)]
    native = HandedPositions(lambda timeout: next(feeds[0]), Message)
    assert native.reads_fields() is True
    by_methods = HandedPositions(lambda timeout: SubMessage(**_fields(next(feeds[1]))), Message)
    python = PythonHandedPositions(lambda timeout: next(feeds[2]))
    truth: dict[tuple[str, int], int] = {}

    def taken(keeper: Any) -> dict[tuple[str, int], int]:
        return {(m.topic(), m.partition()): m.offset() for m in keeper.take()}

    for n, msg in enumerate(handed):
        got = [native(None), by_methods(), python.poll(0.5)]
        assert [m.offset() for m in got] == [msg.offset()] * 3  # each poll hands the record it got
        if msg.error() is None:
            truth[(msg.topic(), msg.partition())] = msg.offset()
        if n % 97 == 0:  # a store between records: each keeper hands over what was handed since the last
            assert len(native) == len(by_methods) == len(python) == len(truth)
            assert taken(native) == taken(by_methods) == taken(python) == truth
            truth = {}
    batch = [Message(topic="c", partition=2, offset=5), Message(topic="c", partition=2, offset=6)]
    for keeper in (native, by_methods, python):
        keeper.note([*batch, Message(topic="c", partition=2, error=KafkaError(KafkaError._PARTITION_EOF))])
    truth[("c", 2)] = 6
    assert taken(native) == taken(by_methods) == taken(python) == truth
    assert native.take() == by_methods.take() == python.take() == []
    with pytest.raises(TypeError):
        native(1.0, 2.0)


def _fields(msg: Message) -> dict[str, Any]:
    fields = {"topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(), "error": msg.error()}
    return {k: v for k, v in fields.items() if v is not None}


def _keepers(poll: Callable[..., Any], store: Callable[[], None], interval: float) -> list[Any]:
    from auditor.probes._hotpath import HandedPositions
    from auditor.probes.offset_store import PythonHandedPositions

    return [HandedPositions(poll, Message, store, interval), PythonHandedPositions(poll, store, interval)]


@pytest.mark.parametrize("which", [0, 1], ids=["native", "python"])
def test_the_polling_thread_stores_what_it_handed_at_most_once_an_interval(which: int) -> None:
    """A poll that handed records stores them as it returns when the interval passed since its
    last store: the first one at once, then not again within the interval, then again."""
    stores: list[int] = []
    offsets = iter(range(1000))
    keeper: Any = None

    def store() -> None:
        stores.append(len(keeper))
        keeper.take()

    keeper = _keepers(lambda timeout: Message(topic="t", partition=0, offset=next(offsets)), store, 2.0)[which]
    call = keeper.poll if which else keeper
    call(0)
    assert stores == [1]  # the first record, stored as it was handed
    for _ in range(5):
        call(0)
    assert stores == [1] and len(keeper) == 1  # within the interval: kept, not stored
    time.sleep(2.1)
    call(0)
    assert stores == [1, 1] and len(keeper) == 0


@pytest.mark.parametrize("which", [0, 1], ids=["native", "python"])
def test_a_long_poll_on_a_quiet_topic_stores_what_was_handed_before_it_while_it_waits(which: int) -> None:
    """A poll with a long timeout (or none) that gets nothing: the poll goes to the client in
    pieces of the interval, and what was handed before it is stored between them, as
    librdkafka's own store holds it while the application waits; it returns None once the
    whole timeout passed."""
    stores: list[float] = []
    pieces: list[float] = []
    feed = [Message(topic="t", partition=0, offset=1), Message(topic="t", partition=0, offset=2)]
    keeper: Any = None

    def poll(timeout: float) -> Message | None:
        if feed:
            return feed.pop(0)
        pieces.append(timeout)
        time.sleep(timeout)
        return None

    def store() -> None:
        stores.append(time.monotonic())
        keeper.take()

    keeper = _keepers(poll, store, 0.2)[which]
    call = keeper.poll if which else keeper
    call(0)
    call(0)  # within the interval: kept
    assert len(stores) == 1 and len(keeper) == 1
    started = time.monotonic()
    assert call(1.0) is None
    assert time.monotonic() - started >= 0.99
    assert len(stores) == 2 and stores[1] - started <= 0.5 and len(keeper) == 0
    assert pieces and max(pieces) <= 0.2 + 1e-9 and sum(pieces) >= 0.99


@pytest.mark.parametrize("which", [0, 1], ids=["native", "python"])
def test_the_stores_own_thread_gets_in_only_between_calls_and_holds_the_next_one_back(which: int) -> None:
    """try_begin_store() refuses while a poll is in progress (the client is busy: a store would
    wait for it, and a rebalance callback inside the poll for the store) or returned less than
    `idle` ago; once it succeeds, a poll waits until end_store()."""
    during: list[bool] = []
    inner_calls: list[float] = []
    keeper: Any = None

    def poll(timeout: float) -> None:
        during.append(keeper.try_begin_store(0.0))
        inner_calls.append(time.monotonic())
        return None

    keeper = _keepers(poll, lambda: None, 3600.0)[which]
    call = keeper.poll if which else keeper
    keeper.note([Message(topic="t", partition=0, offset=1)])
    call(0)
    assert during == [False]  # refused inside the call
    assert keeper.try_begin_store(60.0) is False  # the last call returned just now
    time.sleep(0.05)
    assert keeper.try_begin_store(0.01) is True
    assert keeper.try_begin_store(0.01) is False  # one store at a time
    started = time.monotonic()
    waiting = threading.Thread(target=call, args=(0,))
    waiting.start()
    time.sleep(0.2)
    assert len(inner_calls) == 1  # the poll is held back while the store runs
    keeper.end_store()
    waiting.join(5)
    assert len(inner_calls) == 2 and inner_calls[1] - started >= 0.2
    keeper.take()
    assert keeper.try_begin_store(0.0) is False  # nothing kept: nothing to store
    keeper.enter()
    keeper.note([Message(topic="t", partition=0, offset=2)])
    assert keeper.try_begin_store(0.0) is False  # consume() brackets its call the same way
    keeper.leave()
