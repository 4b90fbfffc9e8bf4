"""The cluster side of the lab: faults through the stack's own commands, and plain reads.

Faults go through `stack/stack.sh broker stop|kill|start|pause|resume ID` (the same script
`make broker-kill` uses), so the lab injects exactly what an operator can. Reads use a plain
confluent-kafka consumer and admin client: ground truth never passes through the auditor.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    ElectionType,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from django.conf import settings

STACK_SCRIPT = Path(settings.BASE_DIR) / "stack" / "stack.sh"
NEEDS_THREE = "needs a 3-broker stack: make up BROKERS=3"


class LabError(RuntimeError):
    """The lab could not set up or inject what a scenario asked for."""


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.3) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise LabError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def all_led(admin: AdminClient, topic: str, partitions: int) -> bool:
    """The answering broker's metadata has `topic` with its `partitions` partitions, each led
    (a topic made a moment ago may be known by name before, or not at all yet)."""
    meta = admin.list_topics(topic, timeout=10).topics.get(topic)
    if meta is None or meta.error is not None or len(meta.partitions) != partitions:
        return False
    return all(p.leader >= 0 for p in meta.partitions.values())


T = TypeVar("T")


def _asked_again(ask: Callable[[], T], codes: frozenset[int], timeout: float, refresh: Callable[[], None]) -> T:
    """ask(), asked again every half second, after refresh(), while Kafka answers with one of
    `codes`, for up to `timeout` s; any other error, or one past the deadline, is raised."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return ask()
        except KafkaException as exc:
            if exc.args[0].code() not in codes or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
            refresh()


def delete_records(admin: AdminClient, points: list[TopicPartition], timeout: float = 30) -> None:
    """Move each partition's log start to its point's offset (DeleteRecords). The request goes
    to each partition's leader, from the client's metadata: a topic made a moment ago, or not
    asked about for a while, may not be in it ("No leaders found": CI, stop 42); asking for
    the topics' metadata refreshes it, and the request is sent again."""

    def refresh() -> None:
        for topic in {point.topic for point in points}:
            admin.list_topics(topic, timeout=10)

    def ask() -> None:
        for future in admin.delete_records(points, operation_timeout=30).values():
            future.result(timeout=60)

    refresh()
    _asked_again(ask, frozenset({KafkaError._NOENT}), timeout, refresh)


# get_watermark_offsets is answered with these while a partition's leadership moves: the
# client's metadata, or the broker it asked, still names the old leader (CI, stop 44: a
# consumer made right after a failover was told NOT_LEADER_FOR_PARTITION). The client refreshes
# its metadata on them, and the new leader answers when asked again.
_LEADER_MOVING = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError._TRANSPORT,
    }
)


# What a consumer reports, and gets over by itself, while it reconnects to brokers it lost or
# waits for a topic made a moment ago to reach every broker's metadata.
_TRANSIENT = _LEADER_MOVING | {
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._TIMED_OUT,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION,
}


def watermark_offsets(consumer: Consumer, topic: str, partition: int, timeout: float = 30) -> tuple[int, int]:
    """(log start, log end) of one partition, asked again for up to `timeout` s while its
    leadership moves."""

    def refresh() -> None:
        try:
            consumer.list_topics(topic, timeout=10)
        except KafkaException:
            pass  # the next attempt says what is wrong

    def ask() -> tuple[int, int]:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return low, high

    return _asked_again(ask, _LEADER_MOVING, timeout, refresh)


@dataclass(frozen=True)
class PartitionView:
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


class Cluster:
    """One stack's brokers: its admin client, and the script that starts and stops them."""

    def __init__(self, bootstrap: str, stack: str | None = None) -> None:
        self.bootstrap = bootstrap
        self.stack = stack or os.environ.get("STACK", "dev")
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.expected_brokers: set[int] = set()
        self.addresses: dict[int, str] = {}  # broker id → host:port, as the metadata names them
        self.down: set[int] = set()  # brokers the lab stopped, killed or paused, not yet back
        self._readers: dict[frozenset[int], AdminClient] = {}

    # --- brokers ---------------------------------------------------------------------------
    def broker_ids(self) -> set[int]:
        brokers = self.admin.list_topics(timeout=10).brokers
        self.addresses |= {b.id: f"{b.host}:{b.port}" for b in brokers.values()}
        return set(brokers)

    def reader(self) -> AdminClient:
        """An admin client for metadata reads during a fault: bootstrapped only to the brokers
        the lab has not taken down, so its requests do not wait on a paused or dead one (the
        shared client may send them there and wait out its request timeout: lab run #36)."""
        up = [address for broker_id, address in sorted(self.addresses.items()) if broker_id not in self.down]
        if not self.down or not up:
            return self.admin
        key = frozenset(self.down)
        if key not in self._readers:
            self._readers[key] = AdminClient({"bootstrap.servers": ",".join(up)})
        return self._readers[key]

    def require_three(self) -> None:
        try:
            ids = self.broker_ids()
        except KafkaException as exc:
            raise LabError(f"Kafka at {self.bootstrap} does not answer ({exc}); the lab {NEEDS_THREE}") from None
        if len(ids) < 3:
            raise LabError(f"{len(ids)} broker(s) up at {self.bootstrap}; the lab {NEEDS_THREE}")
        self.expected_brokers = ids

    def broker(self, action: str, broker_id: int) -> None:
        """stop (SIGTERM) | kill (-9) | start | pause (SIGSTOP) | resume (SIGCONT)."""
        if action in ("stop", "kill", "pause"):
            if broker_id not in self.addresses:
                # reader() bootstraps to the brokers still up by their addresses: learn them while
                # every one answers (without them, reads go through the shared client, which may
                # wait out its timeout on a paused broker: make test, stop 65)
                with contextlib.suppress(KafkaException):
                    self.broker_ids()
            self.down.add(broker_id)  # before: metadata reads avoid it from the moment it goes
        self._stack_script(180, "broker", action, str(broker_id))
        if action in ("start", "resume"):
            self.down.discard(broker_id)

    def _stack_script(self, timeout: float, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """stack.sh with these arguments on this cluster's stack; a LabError naming them when it
        fails (unless not `check`)."""
        done = subprocess.run(
            [str(STACK_SCRIPT), *args],
            env={**os.environ, "STACK": self.stack},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and done.returncode != 0:
            raise LabError(f"stack.sh {' '.join(args)} failed: {(done.stderr or done.stdout).strip()}")
        return done

    def broker_pid(self, broker_id: int) -> int | None:
        done = self._stack_script(30, "broker", "pid", str(broker_id), check=False)
        text = done.stdout.strip().splitlines()
        return int(text[-1]) if done.returncode == 0 and text and text[-1].isdigit() else None

    def heal(self) -> None:
        """Every broker the lab found at the start is running and unfrozen again."""
        for broker_id in sorted(self.expected_brokers):
            pid = self.broker_pid(broker_id)
            if pid is None:
                self.broker("start", broker_id)
            else:
                self.broker("resume", broker_id)
        if self.expected_brokers:
            wait_until(lambda: self.broker_ids() >= self.expected_brokers, 90, "every broker back in the metadata")

    def lose_disk(self, broker_id: int, topic: str, partition: int) -> None:
        """The broker loses the partition's log (a disk replaced): stopped, its log folder of the
        partition removed, started again. A partition whose only replica is there starts over
        empty at offset 0, under the same topic id, and new records take the lost offsets."""
        folder = (
            Path(settings.BASE_DIR) / "var" / self.stack / "kafka" / str(broker_id) / "data" / f"{topic}-{partition}"
        )
        self.broker("stop", broker_id)
        try:
            shutil.rmtree(folder)
        finally:
            self.broker("start", broker_id)

        def empty_and_led() -> bool:
            try:
                return self.watermarks(topic).get(partition) == (0, 0)
            except KafkaException:  # its leader not back yet
                return False

        wait_until(empty_and_led, 90, f"{topic}/{partition} led again, empty")

    def create_topic_on(self, topic: str, broker_id: int, partitions: int) -> None:
        """A topic whose partitions' one replica is on `broker_id`."""
        new = NewTopic(topic, partitions, replica_assignment=[[broker_id]] * partitions)
        self.admin.create_topics([new], operation_timeout=30)[topic].result(timeout=60)
        wait_until(lambda: self._all_led(topic, partitions), 30, f"leaders for every partition of {topic}")

    # --- topics ----------------------------------------------------------------------------
    def create_topic(self, topic: str, partitions: int, replication: int, config: dict[str, str]) -> None:
        new = NewTopic(topic, partitions, replication, config=config)
        self.admin.create_topics([new], operation_timeout=30)[topic].result(timeout=60)
        wait_until(lambda: self._all_led(topic, partitions), 30, f"leaders for every partition of {topic}")

    def add_partitions(self, topic: str, total: int) -> None:
        """Grow the topic to `total` partitions (what an operator does to scale a topic out)."""
        self.admin.create_partitions([NewPartitions(topic, total)], operation_timeout=30)[topic].result(timeout=60)
        wait_until(lambda: self._all_led(topic, total), 30, f"leaders for the {total} partitions of {topic}")

    def _all_led(self, topic: str, partitions: int) -> bool:
        return all_led(self.admin, topic, partitions)

    def delete_topic(self, topic: str) -> None:
        try:
            self.admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)
        except KafkaException:
            pass  # already gone

    def delete_records(self, topic: str, before: dict[int, int]) -> None:
        """Move each partition's log start to `before[p]` (kafka-delete-records.sh's request):
        what retention does to the oldest segments, at a chosen offset."""
        delete_records(self.admin, [TopicPartition(topic, p, offset) for p, offset in before.items()])

    def partition(self, topic: str, partition: int = 0, timeout: float = 30) -> PartitionView:
        """The partition's leader, replicas and ISR as the metadata says. A topic made a moment ago
        may not be in the answering broker's metadata yet (KRaft brokers learn it from the
        controller each at their own pace: CI, stop 41): it is asked again until it is. Asked
        through reader(): not of a broker the lab has taken down."""
        found: dict[str, PartitionView] = {}

        def known() -> bool:
            try:
                topics = self.reader().list_topics(topic, timeout=5).topics
            except KafkaException:
                # the request went to a broker the scenario paused or killed: ask again
                # (lab run #23: a follower under SIGSTOP timed the whole scenario out)
                return False
            meta = topics[topic].partitions.get(partition) if topic in topics else None
            if meta is not None:
                found["view"] = PartitionView(meta.leader, tuple(meta.replicas), tuple(meta.isrs))
            return meta is not None

        wait_until(known, timeout, f"{topic}/{partition} in the cluster's metadata")
        return found["view"]

    def wait_for_leader(
        self, topic: str, partition: int = 0, other_than: int | None = None, timeout: float = 60
    ) -> int:
        def led() -> bool:
            leader = self.partition(topic, partition).leader
            return leader >= 0 and leader != other_than

        wait_until(led, timeout, f"a leader of {topic}/{partition}" + (f" other than {other_than}" * bool(other_than)))
        return self.partition(topic, partition).leader

    def wait_for_isr(self, topic: str, size: int, partition: int = 0, timeout: float = 90) -> None:
        wait_until(lambda: len(self.partition(topic, partition).isr) >= size, timeout, f"{size} in-sync replicas")

    def elect(self, topic: str, partition: int, unclean: bool) -> str:
        """A leader election through the admin API; the broker's answer (or 'ok')."""
        kind = ElectionType.UNCLEAN if unclean else ElectionType.PREFERRED
        try:
            results = self.admin.elect_leaders(kind, [TopicPartition(topic, partition)]).result(timeout=30)
        except KafkaException as exc:
            return str(exc.args[0])
        errors = [str(error) for error in results.values() if error is not None]
        return "; ".join(errors) or "ok"

    def offsets_partition(self, group: str) -> int:
        """The __consumer_offsets partition holding `group`'s offsets, which its coordinator
        leads: Kafka's Utils.abs(group.hashCode()) % the topic's partition count."""
        offsets = self.admin.list_topics("__consumer_offsets", timeout=10).topics["__consumer_offsets"]
        units = group.encode("utf-16-be")  # Java's String.hashCode runs over UTF-16 code units
        code = 0
        for i in range(0, len(units), 2):
            code = (31 * code + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
        code = code - (1 << 32) if code >= 1 << 31 else code
        return (0 if code == -(1 << 31) else abs(code)) % len(offsets.partitions)

    def reassign(self, topic: str, partition: int, replicas: list[int]) -> None:
        """Move the partition to `replicas` (the first preferred as leader); returns once the
        move is complete and every one of them is in sync (stack.sh reassign)."""
        self._stack_script(120, "reassign", topic, str(partition), ",".join(str(r) for r in replicas))

    def set_topic_config(self, topic: str, config: dict[str, str]) -> None:
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

        resource = ConfigResource(
            ConfigResource.Type.TOPIC,
            topic,
            incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in config.items()
            ],
        )
        for future in self.admin.incremental_alter_configs([resource]).values():
            future.result(timeout=30)

    # --- reads -----------------------------------------------------------------------------
    def read_topic(self, topic: str, isolation: str = "read_uncommitted", timeout: float = 60) -> list[Record]:
        """Every record of the topic, read to each partition's end with a plain consumer."""
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"lab-truth-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": isolation,
            }
        )
        try:
            meta = consumer.list_topics(topic, timeout=10).topics[topic]
            partitions = sorted(meta.partitions)
            starts = {}
            for p in partitions:
                low, high = watermark_offsets(consumer, topic, p)
                if high > low:
                    starts[p] = low
            consumer.assign([TopicPartition(topic, p, o) for p, o in starts.items()])
            records: list[Record] = []
            at_end: set[int] = set()
            deadline = time.monotonic() + timeout
            while at_end != set(starts):
                if time.monotonic() > deadline:
                    raise LabError(f"reading the whole of {topic} took longer than {timeout:.0f}s")
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                error = msg.error()
                if error is not None:
                    # Only a partition's end ends its read. The client also reports a broker it
                    # lost meanwhile (restarted, failed over) as an error, and reconnects: taken
                    # for an end, that would cut the truth short (and an error without a
                    # partition ended partition 0's). Those are waited out until the deadline;
                    # anything else is raised.
                    if error.code() == KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition() or 0)
                    elif error.fatal() or not (error.retriable() or error.code() in _TRANSIENT):
                        raise LabError(f"reading the whole of {topic}: {error}")
                    continue
                key = msg.key()
                records.append(
                    Record(
                        msg.partition() or 0,
                        msg.offset() or 0,
                        None if key is None else (key.decode() if isinstance(key, bytes) else str(key)),
                        msg.value(),
                    )
                )
            return records
        finally:
            consumer.close()

    def watermarks(self, topic: str) -> dict[int, tuple[int, int]]:
        """Per partition: (log start, log end) as the broker reports them now."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"lab-marks-{uuid.uuid4().hex[:8]}"})
        try:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            return {p: watermark_offsets(consumer, topic, p) for p in sorted(partitions)}
        finally:
            consumer.close()

    def reset_offsets(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """Commit `offsets` for the group, which must have no member: the request
        kafka-consumer-groups.sh --reset-offsets --execute sends (AlterConsumerGroupOffsets),
        what an operator does to move a group past records, or back over them."""
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p, o) for p, o in offsets.items()])
        for future in self.admin.alter_consumer_group_offsets([request]).values():
            answer = future.result(timeout=30)
            failed = [tp for tp in answer.topic_partitions if tp.error is not None]
            if failed:
                raise LabError(f"resetting {group}'s offsets failed: {failed[0].error}")

    def delete_offsets(self, group: str, topic: str, partitions: list[int]) -> None:
        """Delete the group's committed offsets of these partitions (kafka-consumer-groups.sh
        --delete-offsets; stack.sh delete-offsets), once no member of the group is subscribed to
        the topic (one killed -9 stays until its session times out)."""
        self._stack_script(120, "delete-offsets", group, topic, ",".join(str(p) for p in partitions))

    def committed(self, group: str, topic: str, partitions: int = 1) -> dict[int, int]:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group, "enable.auto.commit": False})
        try:
            tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
            return {tp.partition: tp.offset for tp in tps if tp.offset >= 0}
        finally:
            consumer.close()


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: str | None
    value: bytes | None = None
