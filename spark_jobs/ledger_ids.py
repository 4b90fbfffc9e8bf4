"""The ids of the ledger topics a run reads.

A ledger topic deleted and created again under its name starts over at offset 0: where
earlier runs stopped reading the deleted one says nothing of the new one (resumed there, a
shorter new ledger failed the run and a longer one had its first records skipped). Kafka
gives the new topic another id, as it does a re-created binding topic (reconcile_plan reads
that one's id the same way): the state keeps each ledger topic's id with where runs stopped
reading it (StateMeta.ledger_ids), and a run that finds another id reads the ledger from its
start (reconcile_plan.forget_recreated_ledgers).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from confluent_kafka.admin import AdminClient

from spark_jobs.binding import Binding
from spark_jobs.kafka_offsets import KafkaReadError, topic_id, topic_partitions
from spark_jobs.reconcile_extract import ReconcileError, recreation_horizon

LEDGER_KINDS = ("producer", "consumer")


@dataclass(frozen=True)
class LedgerId:
    """A ledger topic the run reads and its id now."""

    topic: str
    # None: not known (the topic does not exist, the cluster gives no ids, or `error`)
    id: str | None
    error: str | None = None  # why the id could not be read


def ledgers_named(binding: Binding) -> dict[str, str]:
    """Per kind, the ledger topic a run of the binding reads: the consumer ledger only when
    the binding names a consumer group (extract_topic_offsets)."""
    named = {"producer": binding.producer_ledger_topic}
    if binding.consumer_groups:
        named["consumer"] = binding.consumer_ledger_topic
    return named


def read_ledger_id(admin: AdminClient, topic: str) -> str | None:
    """The ledger topic's id now (kafka_offsets.topic_id); None when it does not exist or the
    cluster gives no ids. Raises KafkaReadError."""
    if not topic_partitions(admin, topic, required=False):
        return None  # a ledger that never existed: the probes are not in use
    return topic_id(admin, topic)


def extract_ledger_ids(binding: Binding, admin: AdminClient) -> dict[str, LedgerId]:
    """Per kind, the id of the ledger topic the run reads, read before its offsets are (on
    the run's admin client)."""
    ids = {}
    for kind, topic in ledgers_named(binding).items():
        try:
            ids[kind] = LedgerId(topic, read_ledger_id(admin, topic))
        except KafkaReadError as exc:
            ids[kind] = LedgerId(topic, None, str(exc))
    return ids


def ledger_ids_after(
    kept: dict[str, dict[str, str]], ids: dict[str, LedgerId], ledgers_read: dict[str, dict[str, dict[int, int]]]
) -> dict[str, dict[str, str]]:
    """state.json's ledger_ids after a run: the id of each ledger topic it read (none where
    not known: then nothing vouches that the offsets kept are of the topic that has it), and
    for the ledger topics it did not read, the ids kept; only of topics in `ledgers_read`."""
    after: dict[str, dict[str, str]] = {}
    for kind, topics in ledgers_read.items():
        known = {topic: kept[kind][topic] for topic in topics if topic in kept.get(kind, {})}
        if (ledger := ids.get(kind)) is not None:
            known.pop(ledger.topic, None)
            if ledger.id is not None and ledger.topic in topics:
                known[ledger.topic] = ledger.id
        if known:
            after[kind] = known
    return after


def check_ledger_unchanged(admin: AdminClient, ledger: LedgerId) -> None:
    """Fail the run when the ledger topic it read has another id now than the one read before
    its offsets were: deleted (and created again) while the run planned and read it, the
    offsets it read up to would be taken for the new topic's by the next run. Nothing to
    check where the id was not known. `admin`: the run's admin client."""
    if ledger.id is None:
        return
    try:
        now = read_ledger_id(admin, ledger.topic)
    except KafkaReadError as exc:
        raise ReconcileError(
            f"ledger topic {ledger.topic!r} was read, but its id could not be read again to tell that it is the topic "
            f"whose offsets were planned: {exc}; the run is discarded (nothing was reported, the incremental state "
            "is unchanged), run it again"
        ) from exc
    if now != ledger.id:
        raise ReconcileError(
            f"ledger topic {ledger.topic!r} was deleted while this run read it (topic id {ledger.id}, now {now}); "
            "the run is discarded (nothing was reported, the incremental state is unchanged), run it again"
        )


def recreated_ledger_horizon(
    kind: str,
    recreated: dict[str, str],
    first_ms: dict[int, int | None],
    upper: datetime,
    grace_seconds: float,
    earlier: datetime | None,
    warnings: list[str],
) -> datetime | None:
    """`earlier` (a ledger's marks_lost_until or entries_lost_until), raised where the ledger
    topic of `kind` was deleted and created again since the last run read it (`recreated`,
    RunPlan.ledgers_recreated): what the deleted topic held that no run read went with it. Its
    records came before the new topic's first one (first_ms, per partition read from its
    start: recreation_horizon, `upper` when it has none yet), and a record of the topic is
    written before its mark or entry is. Appends a warning to `warnings`."""
    if kind not in recreated:
        return earlier
    until = recreation_horizon(first_ms, upper, grace_seconds)
    if kind == "consumer":
        unjudged = f"records written up to {until.isoformat()} are not judged unprocessed (their processed marks may "
        unjudged += "have been among them)"
    else:
        unjudged = f"sequence numbers produced up to {until.isoformat()} without a record or a ledger entry are not "
        unjudged += "reported never-sent where the topic no longer holds records that old either"
    warnings.append(f"{recreated[kind]}: what the deleted topic held that no run read went with it; {unjudged}")
    return until if earlier is None else max(earlier, until)
