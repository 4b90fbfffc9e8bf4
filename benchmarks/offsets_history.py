"""How long the read of who committed (`spark_jobs.commit_history.offsets_history`) takes on a
busy `__consumer_offsets` partition, against a raw read of the same records.

Reconciliation reads the groups' partitions of `__consumer_offsets` from their log start on
every run, and so does every stuck diagnosis, within a 30 s budget (`READ_BUDGET_S`) past which
the read counts as failed (the marks alone judge, with a warning). How many records a busy
partition holds between two cleanings, and how long reading them takes, was never measured.

The script fills one partition of `__consumer_offsets`: `--groups` groups whose ids hash to the
same partition as the audited group, each committing `--commits` offsets between them from an
assigned consumer (asynchronous commits, batched polls; the commits of a busy cluster's many
groups). Then, interleaved `--rounds` times:
- raw: a plain confluent-kafka consumer reads the partition from its log start to its end
  (`consume(1000)` batches, the same client and batch size `read_ranges` uses), touching each
  record's key and value: the floor of any reader;
- history: `offsets_history(...)` for the audited group on a one-partition topic, as
  reconciliation calls it (parse every key, keep the group's commits and membership).

    .venv/bin/python benchmarks/offsets_history.py --commits 1000000 --groups 4

Needs a running broker (`make up`; KAFKA_BOOTSTRAP_SERVERS from .env). The last line is
``history_vs_raw=<median history/raw> records=<records read> history_s=<median> raw_s=<median>
us_per_record=<history, median> within_budget=<yes|no: under READ_BUDGET_S>``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from spark_jobs.commit_history import OFFSETS_TOPIC, READ_BUDGET_S, offsets_history, offsets_partition


def groups_on_one_partition(count: int, partitions: int, prefix: str) -> list[str]:
    """`count` group ids whose `__consumer_offsets` partition is the first one's."""
    first = f"{prefix}-0"
    home = offsets_partition(first, partitions)
    found, i = [first], 1
    while len(found) < count:
        candidate = f"{prefix}-{i}"
        if offsets_partition(candidate, partitions) == home:
            found.append(candidate)
        i += 1
    return found


def fill(bootstrap: str, topic: str, groups: list[str], commits: int) -> float:
    """Commit `commits` offsets spread over `groups` (asynchronously, polled in batches);
    the seconds it took."""
    consumers = [Consumer({"bootstrap.servers": bootstrap, "group.id": g, "enable.auto.commit": False}) for g in groups]
    started = time.monotonic()
    try:
        for i in range(commits):
            consumer = consumers[i % len(consumers)]
            consumer.commit(offsets=[TopicPartition(topic, 0, i + 1)], asynchronous=True)
            if i % 2000 == 1999:
                for c in consumers:
                    c.poll(0)
        for c in consumers:  # the last ones answered before the reads start
            c.commit(offsets=[TopicPartition(topic, 0, commits + 1)], asynchronous=False)
    finally:
        for c in consumers:
            c.close()
    return time.monotonic() - started


def raw_read(bootstrap: str, partition: int) -> tuple[float, int]:
    """Read the partition from its log start to its end; (seconds, records)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-raw-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(OFFSETS_TOPIC, partition), timeout=10)
        started = time.monotonic()
        consumer.assign([TopicPartition(OFFSETS_TOPIC, partition, low)])
        records, done = 0, False
        while not done:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is not None:
                    done = True  # the end of the partition
                    continue
                msg.key(), msg.value()
                records += 1
                if (msg.offset() or 0) >= high - 1:
                    done = True
        return time.monotonic() - started, records
    finally:
        consumer.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=1_000_000)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"bench-offsets-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    try:
        partitions = len(admin.list_topics(OFFSETS_TOPIC, timeout=10).topics[OFFSETS_TOPIC].partitions)
        groups = groups_on_one_partition(args.groups, partitions, f"bench-{uuid.uuid4().hex[:6]}")
        home = offsets_partition(groups[0], partitions)
        fill_s = fill(bootstrap, topic, groups, args.commits)
        print(f"filled {OFFSETS_TOPIC}/{home}: {args.commits} commits of {len(groups)} groups in {fill_s:.1f} s")
        raws: list[float] = []
        histories: list[float] = []
        records = 0
        for round_no in range(args.rounds):
            raw_s, records = raw_read(bootstrap, home)
            started = time.monotonic()
            # a budget long enough to time the whole read: past READ_BUDGET_S the auditor gives up
            _, history = offsets_history(admin, bootstrap, {}, [groups[0]], topic, timeout_s=600)
            history_s = time.monotonic() - started
            kept = sum(len(v) for v in history.get(groups[0], {}).values())
            print(
                f"round {round_no + 1}: raw {raw_s:.2f} s for {records} records, history {history_s:.2f} s "
                f"({kept} commits of the group kept)"
            )
            raws.append(raw_s)
            histories.append(history_s)
    finally:
        admin.delete_topics([topic])
    history_s, raw_s = statistics.median(histories), statistics.median(raws)
    ratios = [h / r for h, r in zip(histories, raws, strict=True)]
    print(
        f"history_vs_raw={statistics.median(ratios):.2f} records={records} history_s={history_s:.2f} "
        f"raw_s={raw_s:.2f} us_per_record={1e6 * history_s / max(records, 1):.2f} "
        f"within_budget={'yes' if history_s < READ_BUDGET_S else 'no'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
