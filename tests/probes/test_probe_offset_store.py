"""The audited consumer's deferred offset store (auditor/probes/offset_store.py) commits what
librdkafka's own store would have: after close(), after commit() without offsets, after an
auto-commit tick (a consumer that stopped polling included) and for the partitions a rebalance
revokes, the group's committed offset of each partition is the last record the test's consumer
was handed there + 1, and its metadata names the session. Real brokers; read back with
AdminClient.list_consumer_group_offsets; each test runs on the native and the pure-Python path,
for both record contracts.

The truth is the records the test's clients were handed. Where the test must show that a
commit point stores by itself, the store's timer is made too slow to matter (STORE_INTERVAL_S)."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, ConsumerGroupTopicPartitions, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from auditor.probes import AuditedConsumer, AuditedConsumerV1, offset_store
from auditor.probes.native import HandedPositions, native_hot_path_available
from tests.probes.kafka_helpers import AuditTopics, TopicFactory, integration_marks, wait_for

pytestmark = integration_marks()

ROOT = Path(__file__).resolve().parents[2]

KINDS = [pytest.param(AuditedConsumer, id="v2"), pytest.param(AuditedConsumerV1, id="v1")]


def _produce(bootstrap: str, topic: str, per_partition: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(per_partition):
        for p in range(partitions):
            producer.produce(topic, b"v%d" % i, partition=p)
    assert producer.flush(30) == 0


def _committed(admin: AdminClient, group: str) -> dict[int, tuple[int, str | None]]:
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=30)
    return {tp.partition: (tp.offset, tp.metadata) for tp in listed.topic_partitions if tp.offset >= 0}


def _consumer(bootstrap: str, topics: AuditTopics, kind: Any, group: str | None = None, **config: Any) -> Any:
    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": group or f"store-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
        **config,
    }
    consumer = kind(settings, ledger_topic=topics.consumer_ledger, clients_topic=topics.clients)
    # the path the hot_path fixture chose (AUDITOR_PROBES_NATIVE) is the one polling
    native = native_hot_path_available()
    assert isinstance(consumer._offset_store.poll, HandedPositions) is native
    return consumer


def _expected(handed: dict[int, int], session: str) -> dict[int, tuple[int, str]]:
    return {partition: (offset + 1, f"audit:v2:{session}") for partition, offset in handed.items()}


def _hand(consumer: Any, count: int, handed: dict[int, int]) -> None:
    """Poll until `count` records were handed, noting the last offset of each partition."""
    got = 0
    deadline = time.monotonic() + 60
    while got < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            handed[msg.partition()] = msg.offset()
            got += 1
    assert got == count


@pytest.fixture
def timer_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the commit points store: a position the test sees committed was stored by them."""
    monkeypatch.setattr(offset_store, "STORE_INTERVAL_S", 3600.0)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("assigned", [False, True], ids=["subscribed", "assigned"])
def test_close_commits_the_last_handed_positions(
    probe_bootstrap: str,
    probe_admin: AdminClient,
    probe_topic: TopicFactory,
    audit_topics: AuditTopics,
    hot_path: str,
    timer_off: None,
    kind: Any,
    assigned: bool,
) -> None:
    """Subscribed, the close revokes the partitions (the probe's on_revoke stores); assigned by
    the application, the close itself stores before the client's close commits."""
    topic = probe_topic("store", 2)
    _produce(probe_bootstrap, topic, 20, 2)
    consumer = _consumer(
        probe_bootstrap, audit_topics, kind, **{"enable.auto.commit": True, "auto.commit.interval.ms": 600_000}
    )
    group, session = str(consumer.group), consumer.session_id
    if assigned:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING), TopicPartition(topic, 1, OFFSET_BEGINNING)])
    else:
        consumer.subscribe([topic])
    handed: dict[int, int] = {}
    _hand(consumer, 25, handed)  # not all: the close commits where the consumer stopped
    consumer.close()
    assert _committed(probe_admin, group) == _expected(handed, session)


@pytest.mark.parametrize("kind", KINDS)
def test_commit_without_offsets_commits_the_last_handed_positions(
    probe_bootstrap: str,
    probe_admin: AdminClient,
    probe_topic: TopicFactory,
    audit_topics: AuditTopics,
    hot_path: str,
    timer_off: None,
    kind: Any,
) -> None:
    topic = probe_topic("store", 2)
    _produce(probe_bootstrap, topic, 20, 2)
    consumer = _consumer(probe_bootstrap, audit_topics, kind, **{"enable.auto.commit": False})
    group, session = str(consumer.group), consumer.session_id
    try:
        consumer.subscribe([topic])
        handed: dict[int, int] = {}
        _hand(consumer, 7, handed)
        consumer.commit(asynchronous=False)
        assert _committed(probe_admin, group) == _expected(handed, session)
        # consume() batches too: each partition's last record of the batch
        batch: list[Message] = []
        deadline = time.monotonic() + 30
        while len(batch) < 10 and time.monotonic() < deadline:
            batch += [m for m in consumer.consume(10 - len(batch), 0.5) if m.error() is None]
        for msg in batch:
            handed[msg.partition()] = msg.offset()
        consumer.commit(asynchronous=False)
        assert _committed(probe_admin, group) == _expected(handed, session)
    finally:
        consumer.close()


@pytest.mark.parametrize("kind", KINDS)
def test_an_auto_commit_tick_commits_the_positions_of_a_consumer_that_stopped_polling(
    probe_bootstrap: str,
    probe_admin: AdminClient,
    probe_topic: TopicFactory,
    audit_topics: AuditTopics,
    hot_path: str,
    kind: Any,
) -> None:
    """A consumer stuck processing its last record commits, like plain librdkafka, the position
    after it at the next tick: an at-most-once loss the auditor must see."""
    topic = probe_topic("store", 2)
    _produce(probe_bootstrap, topic, 50, 2)
    consumer = _consumer(
        probe_bootstrap, audit_topics, kind, **{"enable.auto.commit": True, "auto.commit.interval.ms": 200}
    )
    group, session = str(consumer.group), consumer.session_id
    try:
        consumer.subscribe([topic])
        handed: dict[int, int] = {}
        _hand(consumer, 31, handed)  # then no poll: "processing" the last record
        expected = _expected(handed, session)
        wait_for(lambda: _committed(probe_admin, group) == expected, 10, f"auto-commit of {expected}")
        time.sleep(0.5)  # later ticks commit the same
        assert _committed(probe_admin, group) == expected
    finally:
        consumer.close()


@pytest.mark.parametrize("kind", KINDS)
def test_the_handed_positions_are_stored_within_the_interval_without_another_poll(
    probe_bootstrap: str,
    probe_admin: AdminClient,
    probe_topic: TopicFactory,
    audit_topics: AuditTopics,
    hot_path: str,
    kind: Any,
) -> None:
    """The store itself, read by committing through the raw client (which stores nothing
    first): a few intervals after the last hand-over, with no poll since, it holds the
    positions after the last records handed."""
    topic = probe_topic("store", 2)
    _produce(probe_bootstrap, topic, 50, 2)
    consumer = _consumer(probe_bootstrap, audit_topics, kind, **{"enable.auto.commit": False})
    group, session = str(consumer.group), consumer.session_id
    try:
        consumer.subscribe([topic])
        handed: dict[int, int] = {}
        _hand(consumer, 23, handed)
        time.sleep(offset_store.STORE_INTERVAL_S * 5)  # slack for a loaded machine's scheduling
        consumer.consumer.commit(asynchronous=False)
        assert _committed(probe_admin, group) == _expected(handed, session)
    finally:
        consumer.close()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_partitions_revoked_by_a_rebalance_commit_the_last_handed_positions(
    probe_bootstrap: str,
    probe_admin: AdminClient,
    probe_topic: TopicFactory,
    audit_topics: AuditTopics,
    hot_path: str,
    timer_off: None,
    kind: Any,
    strategy: str,
) -> None:
    """A second consumer joins: librdkafka commits the revoked partitions' stored offsets once
    they are unassigned, after the probe's own on_revoke (the application gave none) stored
    them; confluent-kafka still unassigns them (incrementally with a cooperative strategy), or
    the rebalance would not finish."""
    topic = probe_topic("store", 2)
    _produce(probe_bootstrap, topic, 400, 2)
    group = f"store-{uuid.uuid4().hex[:8]}"
    audited = _consumer(
        probe_bootstrap,
        audit_topics,
        kind,
        group,
        **{
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 600_000,
            "max.poll.interval.ms": 60_000,
            "partition.assignment.strategy": strategy,
        },
    )
    session = audited.session_id
    joining = Consumer(
        {
            "bootstrap.servers": probe_bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": strategy,
        }
    )
    try:
        audited.subscribe([topic])
        handed: dict[int, int] = {}
        _hand(audited, 30, handed)
        while len(handed) < 2:  # records of both partitions handed (librdkafka hands them a fetch at a time)
            _hand(audited, 1, handed)
        assert {p.partition for p in audited.assignment()} == {0, 1}
        joining.subscribe([topic])
        # Both poll (the audited one a record at a time) until the audited one's partitions
        # are revoked: a poll that revoked them hands no record of that assignment, so what
        # was handed before that poll is what librdkafka's store held when it committed them.
        handed_at_revoke: dict[int, int] | None = None
        kept: set[int] = set()
        deadline = time.monotonic() + 60
        while handed_at_revoke is None and time.monotonic() < deadline:
            before = dict(handed)
            msg = audited.poll(0.01)
            kept = {p.partition for p in audited.assignment()}
            if kept != {0, 1}:
                handed_at_revoke = before
            elif msg is not None and msg.error() is None:
                handed[msg.partition()] = msg.offset()
            joining.poll(0.05)
        assert handed_at_revoke is not None, "the second consumer's join revoked nothing"
        while not joining.assignment() and time.monotonic() < deadline:  # the rebalance finishes
            audited.poll(0.05)
            joining.poll(0.05)
        assert joining.assignment(), "the second consumer never got a partition"
        # The eager protocol revokes both of the audited consumer's partitions, a cooperative
        # one only those it gives away: librdkafka committed those (nothing else of the group
        # commits: the joining one has auto-commit off, the audited one's timer never fires).
        revoked = {p: o for p, o in handed_at_revoke.items() if strategy == "range" or p not in kept}
        assert revoked
        expected = _expected(revoked, session)
        wait_for(
            lambda: _committed(probe_admin, group) == expected, 20, f"the revoked partitions' commit of {expected}"
        )
    finally:
        joining.close()
        audited.close()


class _Traffic:
    """Records produced to every partition of a topic, one every 2 ms, until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self._topic, self._partitions = topic, partitions
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Traffic:
        self._thread.start()
        return self

    def _run(self) -> None:
        i = 0
        while not self._stop.wait(0.002):
            self._producer.produce(self._topic, b"v%d" % i, partition=i % self._partitions)
            self._producer.poll(0)
            i += 1
        self._producer.flush(30)

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)


@pytest.mark.parametrize("kind", KINDS)
def test_an_auto_committing_consumer_that_keeps_polling_commits_as_it_polls(
    probe_bootstrap: str,
    probe_admin: AdminClient,
    probe_topic: TopicFactory,
    audit_topics: AuditTopics,
    hot_path: str,
    kind: Any,
) -> None:
    """The common consumer: enable.auto.commit on, a loop that never stops polling. The group's
    commits follow what it was handed, as plain librdkafka's do. Before stop 77 the probe stored
    from its own thread, which confluent-kafka 2.16 keeps out of the client while another
    thread polls: such a consumer committed nothing until it closed. The truth is what the
    test's loop was handed; it keeps polling (every 10 ms) while it reads the group's offsets."""
    topic = probe_topic("store", 2)
    _produce(probe_bootstrap, topic, 100, 2)
    consumer = _consumer(
        probe_bootstrap, audit_topics, kind, **{"enable.auto.commit": True, "auto.commit.interval.ms": 200}
    )
    group, session = str(consumer.group), consumer.session_id
    try:
        consumer.subscribe([topic])
        handed: dict[int, int] = {}
        _hand(consumer, 200, handed)  # every record, both partitions
        expected = _expected(handed, session)
        seen = threading.Event()
        committed: dict[int, tuple[int, str | None]] = {}

        def read_the_group() -> None:  # from another thread: the application never pauses its polling
            nonlocal committed
            deadline = time.monotonic() + 15
            while committed != expected and time.monotonic() < deadline:
                committed = _committed(probe_admin, group)
                time.sleep(0.1)
            seen.set()

        threading.Thread(target=read_the_group, daemon=True).start()
        while not seen.is_set():
            assert consumer.poll(0.01) is None  # nothing more to hand: only the polling goes on
        assert committed == expected, "the auto-commits never followed the polling consumer"
    finally:
        consumer.close()


# The application of the freeze test, in its own process (a frozen client would hang the test's
# own exit): an audited auto-committing consumer polling without pause, printing each assignment
# it is given and, after every 20 records, the partitions of the last 20 (a frozen poll prints
# nothing).
POLLING_APPLICATION = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {root!r})
    from auditor.probes import AuditedConsumer, AuditedConsumerV1
    kind = AuditedConsumer if {kind!r} == "v2" else AuditedConsumerV1
    consumer = kind(
        {{"bootstrap.servers": {bootstrap!r}, "group.id": {group!r}, "auto.offset.reset": "earliest",
          "enable.auto.commit": True, "auto.commit.interval.ms": 1000, "session.timeout.ms": 6000}},
        ledger_topic={ledger!r}, clients_topic={clients!r},
    )
    partitions = []
    def on_assign(_consumer, assigned):
        partitions.clear()  # a line of records holds records of one assignment
        print(json.dumps({{"assigned": sorted(p.partition for p in assigned)}}), flush=True)
    consumer.subscribe([{topic!r}], on_assign=on_assign)
    if {worker!r} == "committing":  # a worker thread commits what was handed, as pipelines with workers do
        import threading, time
        from confluent_kafka import KafkaException
        def worker():
            while True:
                try:
                    consumer.commit(asynchronous=False)
                except KafkaException:
                    pass  # nothing stored yet, or the partitions moved meanwhile
                time.sleep(0.005)
        threading.Thread(target=worker, daemon=True).start()
    while True:
        msg = consumer.poll(0.05)
        if msg is not None and msg.error() is None:
            partitions.append(msg.partition())
            if len(partitions) == 20:
                print(json.dumps({{"handed": sorted(set(partitions))}}), flush=True)
                partitions.clear()
    """
)


@pytest.mark.parametrize("kind", ["v2", "v1"])
@pytest.mark.parametrize("worker", ["none", "committing"])
def test_a_member_joining_does_not_freeze_an_auto_committing_consumer_that_keeps_polling(
    probe_bootstrap: str,
    probe_topic: TopicFactory,
    audit_topics: AuditTopics,
    hot_path: str,
    kind: str,
    worker: str,
) -> None:
    """Under steady traffic a second member joins the group of an audited auto-committing
    consumer that polls without pause: the audited one gives a partition away and goes on
    handing records of the other. Before stop 77 its probe's store thread waited for the client
    while the application polled (confluent-kafka 2.16 lets one thread in at a time), holding
    the lock the probe's rebalance callback then waited for inside poll(): the application
    froze at the first rebalance, for good. With a worker thread committing meanwhile, the
    worker's store waits for the client the same way (review of stop 77's fix): the rebalance
    callback no longer waits for it. The truth is what the application reports it was handed
    and the assignment the joining client reports."""
    topic = probe_topic("store", 2)
    group = f"store-{uuid.uuid4().hex[:8]}"
    script = POLLING_APPLICATION.format(
        root=str(ROOT), kind=kind, worker=worker, bootstrap=probe_bootstrap, group=group, topic=topic,
        ledger=audit_topics.consumer_ledger, clients=audit_topics.clients,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    joining = Consumer({"bootstrap.servers": probe_bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    with _Traffic(probe_bootstrap, topic, 2):
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)  # env: the hot path
        assert child.stdout is not None
        output = child.stdout

        def relay() -> None:
            for line in output:
                lines.put(line)

        threading.Thread(target=relay, daemon=True).start()
        try:
            while _assigned(lines, time.monotonic() + 30) is None:
                pass
            _read(lines, 10, 30)  # its first assignment, then 200 records handed: it polls
            joining.subscribe([topic])
            deadline = time.monotonic() + 30
            while not joining.assignment() and time.monotonic() < deadline:
                joining.poll(0.05)
            given_away = {p.partition for p in joining.assignment()}
            assert given_away, "the joining consumer never got a partition: the rebalance never finished"
            # What it printed before it was given its new assignment, then 200 more records
            deadline = time.monotonic() + 30
            while (kept := _assigned(lines, deadline)) is None or kept & given_away:
                joining.poll(0.01)
            after = _read(lines, 10, 15)
            assert after and after <= kept, f"handed {after} after giving {given_away} away, assigned {kept}"
        finally:
            child.kill()
            child.wait(30)
            joining.close()


def _read(lines: queue.Queue[str], batches: int, timeout: float) -> set[int]:
    """The partitions of `batches` lines of 20 records the application printed within `timeout`
    seconds (an assignment it printed meanwhile fails the test: it was not to change)."""
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    for n in range(batches):
        try:
            line = json.loads(lines.get(timeout=max(0.0, deadline - time.monotonic())))
        except queue.Empty:
            raise AssertionError(f"the audited consumer handed {20 * n} records in {timeout} s: frozen") from None
        assert "handed" in line, f"assigned again: {line}"
        seen |= set(line["handed"])
    return seen


def _assigned(lines: queue.Queue[str], deadline: float) -> set[int] | None:
    """The next line the application printed: the partitions it was assigned, or None for a
    line of records."""
    try:
        line = json.loads(lines.get(timeout=max(0.0, deadline - time.monotonic())))
    except queue.Empty:
        raise AssertionError("the audited consumer printed nothing: frozen") from None
    return set(line["assigned"]) if "assigned" in line else None
