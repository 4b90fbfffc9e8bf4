"""The brokers' settings a diagnosis reads (real brokers where it needs them)."""

from __future__ import annotations

import pytest

from auditor.stuck.kafka_view import read_cluster_view, shortest_minutes
from tests.support.demo import DemoPipeline


def test_the_shortest_offsets_retention_of_all_brokers_bounds_them_all() -> None:
    assert shortest_minutes(["10080", "60", "1440"], 3) == 60
    assert shortest_minutes(["10080"], 1) == 10080


def test_offsets_retention_is_unknown_unless_every_broker_gave_it() -> None:
    assert shortest_minutes(["10080", None, "60"], 3) is None  # one broker without the entry
    assert shortest_minutes(["10080", "60"], 3) is None  # one broker did not answer
    assert shortest_minutes([], 0) is None


@pytest.mark.integration
def test_the_view_reads_offsets_retention_from_every_broker(make_pipeline, kafka_admin) -> None:
    from confluent_kafka.admin import ConfigResource, ResourceType

    pipeline: DemoPipeline = make_pipeline(partitions=1)
    brokers = sorted(kafka_admin.list_topics(timeout=10).brokers)
    answered = [  # one broker per call: librdkafka refuses more
        f.result(timeout=30)["offsets.retention.minutes"].value
        for b in brokers
        for f in kafka_admin.describe_configs([ConfigResource(ResourceType.BROKER, str(b))]).values()
    ]
    assert len(answered) == len(brokers) >= 1

    view, _ = read_cluster_view(
        pipeline.kafka_config,
        pipeline.topic,
        [pipeline.group],
        pipeline.probes.producer_ledger,
        pipeline.probes.consumer_ledger,
    )

    assert view.offsets_retention_minutes == min(int(v) for v in answered)
