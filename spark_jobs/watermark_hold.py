"""How long a leader may hold an acknowledged record beyond its high watermark, from the brokers'
settings and the topic's in-sync replicas. No Spark here: the stuck diagnosis
(auditor/stuck/held_watermark.py) and the reconciliation job's driver both use it.

With acks=1 (and with acks=0, or acks not known) a leader acks a record once it has written
it, before any follower has it. The high watermark passes the record only once every in-sync
replica has fetched it, and a follower that stops fetching (paused, a long GC, a hung disk)
stays in the in-sync set until its last catch-up, which came before the record was written,
is replica.lag.time.max.ms old; the leader looks for such followers every half of that
(ReplicaManager's isr-expiration task). Until then a record the leader still holds stays
beyond the high watermark: no reader sees it, and it is not lost. And while a partition has
fewer in-sync replicas than min.insync.replicas its leader does not advance the high watermark
at all (Kafka 3.7 and later, KIP-966), however long that lasts.
"""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from spark_jobs.kafka_offsets import FUTURE_MARGIN_S, KafkaReadError

DEFAULT_REPLICA_LAG_MAX_MS = 30_000  # Kafka's replica.lag.time.max.ms
# The producers' clocks stamp the acks; the diagnosis's or the driver's reads the log end.
CLOCK_MARGIN_MS = 60_000


def hold_ms(replica_lag_max_ms: int) -> int:
    """How long after a record was written a follower that stopped fetching before it can
    keep the high watermark below it while staying in sync: the lag bound, plus the half of it
    the leader may wait before it checks again."""
    return replica_lag_max_ms + replica_lag_max_ms // 2


def may_be_held(acked_ms: int | None, replica_lag_max_ms: int, log_end_read_ms: int) -> bool:
    """Whether a record acked (by a leader alone) at `acked_ms`, a producer's clock, may still
    have been held beyond the high watermark when the log end was read at `log_end_read_ms`:
    within `hold_ms` plus the clock margin. An ack of unknown time may."""
    return acked_ms is None or acked_ms + hold_ms(replica_lag_max_ms) + CLOCK_MARGIN_MS >= log_end_read_ms


def longest_lag_bound(values: list[str | None], brokers: int) -> tuple[int, str | None]:
    """The longest of the brokers' replica.lag.time.max.ms (the partition's leader applies its
    own, and leaders move: the longest bounds them all), and a note when not every one of the
    `brokers` gave it (then Kafka's default counts too)."""
    known = [int(v) for v in values if v is not None]
    if known and len(known) == brokers:
        return max(known), None
    bound = max([DEFAULT_REPLICA_LAG_MAX_MS, *known])
    return bound, (
        f"replica.lag.time.max.ms was not given by every broker ({len(known)} of {brokers}): "
        f"{bound} ms assumed (Kafka's default is {DEFAULT_REPLICA_LAG_MAX_MS})"
    )


def lag_bound_unread(why: str) -> tuple[int, str]:
    """Kafka's default replica.lag.time.max.ms, and the note saying so, where the brokers'
    settings could not be read (`why`)."""
    return DEFAULT_REPLICA_LAG_MAX_MS, (
        f"replica.lag.time.max.ms could not be read ({why}): Kafka's default {DEFAULT_REPLICA_LAG_MAX_MS} ms assumed"
    )


def read_broker_settings(
    admin: AdminClient, names: tuple[str, ...], timeout_s: float = 10.0
) -> list[dict[str, str | None]]:
    """Each broker's value of each of `names` (None where a broker gives none), one dict per
    broker the cluster lists. librdkafka takes one broker resource per DescribeConfigs call.
    Raises KafkaException, ValueError or TimeoutError where they cannot be read."""
    brokers = sorted(admin.list_topics(timeout=timeout_s).brokers)
    answers = [
        future
        for b in brokers
        for future in admin.describe_configs(
            [ConfigResource(ResourceType.BROKER, str(b))], request_timeout=timeout_s
        ).values()
    ]
    configs = [f.result(timeout=timeout_s + FUTURE_MARGIN_S) for f in answers]
    return [
        {name: None if (e := c.get(name)) is None or e.value is None else str(e.value) for name in names}
        for c in configs
    ]


def read_lag_bound(admin: AdminClient, timeout_s: float = 10.0) -> tuple[int, str | None]:
    """The brokers' longest replica.lag.time.max.ms (longest_lag_bound), Kafka's default with a
    note saying why where it cannot be read."""
    try:
        settings = read_broker_settings(admin, ("replica.lag.time.max.ms",), timeout_s)
        return longest_lag_bound([s["replica.lag.time.max.ms"] for s in settings], len(settings))
    except (KafkaException, ValueError) as exc:
        return lag_bound_unread(str(exc))
    except TimeoutError:
        return lag_bound_unread(f"no answer within {timeout_s:g} s")


def under_min_isr(topic: str, partition: int, replicas: int, in_sync: int, min_isr: int) -> str | None:
    """Why the partition's leader may keep its high watermark where it is however long, or
    None: with fewer in-sync replicas than min.insync.replicas (or than its replicas, where
    fewer) it does not advance it (Kafka 3.7 and later, KIP-966), until enough are back."""
    if in_sync >= min(min_isr, replicas):
        return None
    return (
        f"{topic}/{partition} has {in_sync} in-sync replica(s) of {replicas}, fewer than its min.insync.replicas "
        f"({min_isr}): its leader does not advance the high watermark until enough are back, however long that takes"
    )


def partitions_under_min_isr(admin: AdminClient, topic: str, timeout_s: float = 10.0) -> dict[int, str]:
    """Per partition of `topic` under min.insync.replicas now: why its high watermark may stay
    put however long (under_min_isr). Read after the log ends, which it speaks for. Raises
    KafkaReadError when it cannot tell."""
    try:
        described = admin.list_topics(topic, timeout=timeout_s).topics.get(topic)
        futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)], request_timeout=timeout_s)
        setting = next(iter(futures.values())).result(timeout=timeout_s + FUTURE_MARGIN_S).get("min.insync.replicas")
    except (KafkaException, TimeoutError) as exc:
        raise KafkaReadError(
            f"the in-sync replicas or min.insync.replicas of {topic} could not be read: {exc or type(exc).__name__}"
        ) from exc
    if described is None or described.error is not None or setting is None or setting.value is None:
        raise KafkaReadError(f"the in-sync replicas or min.insync.replicas of {topic} could not be read")
    try:
        min_isr = int(setting.value)
    except ValueError as exc:
        raise KafkaReadError(f"topic {topic!r} reports an unreadable min.insync.replicas: {exc}") from exc
    stalled = {
        p: under_min_isr(topic, p, len(meta.replicas), len(meta.isrs), min_isr)
        for p, meta in described.partitions.items()
    }
    return {p: why for p, why in stalled.items() if why is not None}


# An instant before any ack: every ack may be held.
EVERY_ACK_MS = -(1 << 62)


def acks_judged_until(
    admin: AdminClient, topic: str, log_end_read_ms: int, timeout_s: float = 10.0
) -> tuple[int, list[str]]:
    """For a reader that read `topic` up to the high watermarks it asked for at
    `log_end_read_ms` and knows neither the partition of an ack nor whether its producer used
    acks=all (contract v2 ranges, in reconciliation): the latest ack time (the producer's clock)
    whose record, not read, is known not to be held beyond them, and notes for the run.

    An ack after it may be of a record a leader acked alone and still holds (may_be_held: the
    brokers' longest replica.lag.time.max.ms, Kafka's default where unreadable); every ack may,
    EVERY_ACK_MS, while a partition of the topic is under min.insync.replicas or its in-sync
    replicas cannot be read. Read after the log ends, which it speaks for."""
    lag_ms, lag_note = read_lag_bound(admin, timeout_s)
    notes = [lag_note] if lag_note else []
    try:
        stalled = partitions_under_min_isr(admin, topic, timeout_s)
    except KafkaReadError as exc:
        stalled = {-1: str(exc)}
    if stalled:
        notes.append(
            f"{'; '.join(why for _, why in sorted(stalled.items()))}: acked records of contract-v2 producers that are not "
            "in the topic, whose partition their ledger does not name, may be held beyond the high watermark; none is "
            "judged by this run, nor their rows missing"
        )
        return EVERY_ACK_MS, notes
    return log_end_read_ms - hold_ms(lag_ms) - CLOCK_MARGIN_MS - 1, notes
