"""A topic deleted and created again under its name, as an operator does it with
kafka-topics.sh --delete and --create."""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient, NewTopic

from auditor.lab.cluster import all_led, wait_until
from spark_jobs.kafka_offsets import KafkaReadError, admin_client, topic_id


def create_again(bootstrap: str, topic: str, partitions: int = 1) -> None:
    """Delete `topic` and create it again with `partitions` partitions (another topic, another
    id); the creation is tried again while the deletion is still under way, for up to a minute.
    Returns once the new topic leads every partition and every broker describes it with its new
    id, asserting that the id changed."""
    admin = admin_client(bootstrap)
    before = topic_id(admin, topic)
    admin.delete_topics([topic])[topic].result(timeout=30)
    deadline = time.monotonic() + 60
    while True:
        try:
            admin.create_topics([NewTopic(topic, partitions)])[topic].result(timeout=30)
            break
        except Exception:  # noqa: BLE001 - the deletion may still be under way
            assert time.monotonic() < deadline, f"could not create {topic} again"
            time.sleep(0.5)
    wait_until(lambda: all_led(admin, topic, partitions), 20, f"topic {topic} created again with a leader")
    # Each broker learns of the new topic from the metadata log in its own time, and a describe
    # goes to any of them: wait until every one answers for it with its new id.
    for broker in bootstrap.split(","):
        one = admin_client(broker)
        wait_until(
            lambda one=one: _described_anew(one, topic, before), 20, f"broker {broker} describing {topic} created again"
        )


def _described_anew(admin: AdminClient, topic: str, before: str | None) -> bool:
    try:
        return topic_id(admin, topic) not in (before, None)
    except KafkaReadError:  # not yet known to the broker asked
        return False
