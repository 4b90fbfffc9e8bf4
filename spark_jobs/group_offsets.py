"""Driver-side look-ups a group coordinator answers: committed offsets, group descriptions.

Each is asked on a client of its own, destroyed once answered, and asked again while the
coordinator moves (kafka_offsets.asking_again).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, wait
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from spark_jobs.kafka_offsets import LEADER_FAILOVER_S, KafkaReadError, asking_again

K = TypeVar("K")

_COORDINATOR_MOVED = frozenset(
    {
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
    }
)


def coordinator_request(
    connection: Mapping[str, Any], request: Callable[[AdminClient], Mapping[K, Future[Any]]]
) -> dict[K, Any]:
    """The answers (a result, or the KafkaException it failed with) to request(client)'s
    futures, asked on an admin client of its own that is destroyed once they are answered.

    For every request a group coordinator answers (committed offsets, group descriptions).
    librdkafka 2.16 aborts the whole process (`rd_kafka_enq_once_del_source_return: Assertion
    'eonce->refcnt > 0'`, confluentinc/librdkafka#4605) when such a request times out while its
    client still waits for the coordinator (frozen, or not yet replaced) and the client later
    finds one: the lookup passes the timed-out request's freed state on. A client destroyed
    right after the timeout fails the pending lookup cleanly instead.

    The client must really be gone: no exception is raised while it is in scope (an exception
    a future raises keeps the frames that hold the client alive, in a cycle only the garbage
    collector breaks); answers are read with Future.exception()."""
    admin = AdminClient(dict(connection))
    failure: tuple[Any, ...] | None = None
    try:
        futures = dict(request(admin))
    except KafkaException as exc:
        failure = exc.args
    else:
        wait(list(futures.values()))
    del admin
    if failure is not None:
        raise KafkaException(*failure)
    answers: dict[K, Any] = {}
    for key, future in futures.items():
        error = future.exception()
        answers[key] = error if error is not None else future.result()
    return answers


def committed_offsets(
    connection: Mapping[str, Any],
    groups: list[str] | tuple[str, ...],
    topic: str,
    partitions: list[int],
    timeout_s: float = 10.0,
    failover_s: float = LEADER_FAILOVER_S,
) -> list[tuple[str, int, int]]:
    """(group, partition, committed offset) for partitions where the group has committed.
    `connection`: an admin client's settings; every request gets a client of its own
    (_group_offsets), within `timeout_s`; asked again for up to max(timeout_s,
    failover_s) while the coordinator moves or does not answer, or while a transaction
    holds offsets of the group not yet committed or aborted.

    Asked as a read_committed consumer asks where to resume (require_stable, KIP-447): the
    coordinator answers from everything its offsets partition holds, once that is committed.
    Without it, Kafka 4's group coordinator answers from the partition's high watermark:
    a coordinator elected a moment ago whose high watermark has not caught up (its followers
    not fetched yet, or fewer in sync than min.insync.replicas) answers the group's
    previous commit (or none) as if it were the current one, with no error."""
    rows: list[tuple[str, int, int]] = []
    deadline = time.monotonic() + max(timeout_s, failover_s)
    for group in groups:
        # Right after a broker restart the group's coordinator is still loading its offsets
        # ("Coordinator load in progress") or has moved; a coordinator that died or froze does
        # not answer (timed out) until the controller fences it and the group's offsets
        # partition gets a new leader: asked again, on a new client each time.
        try:
            result = asking_again(
                lambda group=group: _group_offsets(connection, group, topic, partitions, timeout_s),  # type: ignore[misc]
                _COORDINATOR_MOVED | {KafkaError._TIMED_OUT, KafkaError.UNSTABLE_OFFSET_COMMIT},
                deadline,
                f"reading committed offsets of group {group!r}",
                0.5,
            )
        except KafkaReadError as exc:
            raise KafkaReadError(f"{exc}{_why_unstable(connection, group, topic, partitions)}") from exc
        for tp in result:
            if tp.error is not None:
                raise KafkaReadError(f"committed offset of group {group!r} on {topic}/{tp.partition}: {tp.error}")
            if tp.offset >= 0:
                rows.append((group, tp.partition, tp.offset))
    return rows


def _why_unstable(connection: Mapping[str, Any], group: str, topic: str, partitions: list[int]) -> str:
    """Why a stable fetch got no answer, when the coordinator does answer an unstable one
    (from its high watermark, open transactions left out); '' when it does not answer that
    either (frozen, unreachable, moving)."""
    try:
        _group_offsets(connection, group, topic, partitions, 5.0, stable=False)
    except KafkaException:
        return ""
    return (
        "; the coordinator answers, but cannot yet say what the group committed: a transaction holds"
        " offsets of the group open (UNSTABLE_OFFSET_COMMIT), or its offsets partition has fewer replicas"
        " in sync than min.insync.replicas"
    )


def _group_offsets(
    connection: Mapping[str, Any],
    group: str,
    topic: str,
    partitions: list[int],
    timeout_s: float,
    stable: bool = True,
) -> list[TopicPartition]:
    """One stable OffsetFetch of `group` on `topic`'s partitions; raises the KafkaException it
    failed with, and the partition's error when a transaction holds offsets not yet committed
    (UNSTABLE_OFFSET_COMMIT: asked again, as a read_committed consumer does).

    Asked by a consumer with the group's id that never joins the group (no subscription,
    nothing committed, closed at once), not by the AdminClient: librdkafka (2.16, still so
    upstream) answers an admin OffsetFetch that the coordinator refuses with NOT_COORDINATOR
    or COORDINATOR_NOT_AVAILABLE by asking the client's consumer group, which an AdminClient
    has none of, to look its coordinator up: a NULL dereference that kills the whole process
    (SIGSEGV in rd_kafka_cgrp_op, confluentinc/librdkafka#5040). Kafka 4's coordinator answers
    a stable fetch it could not serve within offsets.commit.timeout.ms with NOT_COORDINATOR:
    4 diagnoses in 25 under a frozen coordinator died so. A consumer has its group handle
    and looks the coordinator up again instead."""
    settings = {
        **connection,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        # read_committed sends require_stable (KIP-447)
        "isolation.level": "read_committed" if stable else "read_uncommitted",
    }
    consumer = Consumer(settings)
    try:
        answer = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=timeout_s)
    finally:
        consumer.close()
    for tp in answer:
        if tp.error is not None and tp.error.code() == KafkaError.UNSTABLE_OFFSET_COMMIT:
            reason = f"{topic}/{tp.partition}: an open transaction holds offsets not yet committed or aborted"
            raise KafkaException(KafkaError(KafkaError.UNSTABLE_OFFSET_COMMIT, reason))
    return answer
