"""The brokers' settings a diagnosis reads (real brokers where it needs them)."""

from __future__ import annotations

import pytest

from auditor.stuck.held_watermark import longest_lag_bound
from auditor.stuck.kafka_view import read_cluster_view, shortest_minutes
from tests.support.demo import DemoPipeline


def test_the_shortest_offsets_retention_of_all_brokers_bounds_them_all() -> None:
    assert shortest_minutes(["10080", "60", "1440"], 3) == 60
    assert shortest_minutes(["10080"], 1) == 10080


def test_offsets_retention_is_unknown_unless_every_broker_gave_it() -> None:
    assert shortest_minutes(["10080", None, "60"], 3) is None  # one broker without the entry
    assert shortest_minutes(["10080", "60"], 3) is None  # one broker did not answer
    assert shortest_minutes([], 0) is None


def test_the_longest_replica_lag_bound_of_all_brokers_bounds_them_all() -> None:
    # the leader's setting holds a follower in sync, and leaders move: the longest bounds them
    assert longest_lag_bound(["30000", "60000", "10000"], 3) == (60000, None)
    assert longest_lag_bound(["10000"], 1) == (10000, None)


def test_a_replica_lag_bound_not_given_by_every_broker_counts_kafkas_default_and_says_so() -> None:
    bound, note = longest_lag_bound(["10000", None, "20000"], 3)
    assert bound == 30000 and note is not None and "2 of 3" in note and "30000 ms assumed" in note
    assert longest_lag_bound(["45000", "20000"], 3)[0] == 45000  # one broker did not answer
    assert longest_lag_bound([], 0)[0] == 30000


@pytest.mark.integration
def test_the_view_reads_offsets_retention_from_every_broker(make_pipeline, kafka_admin) -> None:
    from confluent_kafka.admin import ConfigResource, ResourceType

    pipeline: DemoPipeline = make_pipeline(partitions=1)
    brokers = sorted(kafka_admin.list_topics(timeout=10).brokers)
    configs = [  # one broker per call: librdkafka refuses more
        f.result(timeout=30)
        for b in brokers
        for f in kafka_admin.describe_configs([ConfigResource(ResourceType.BROKER, str(b))]).values()
    ]
    answered = [c["offsets.retention.minutes"].value for c in configs]
    lag_bounds = [c["replica.lag.time.max.ms"].value for c in configs]
    assert len(answered) == len(lag_bounds) == len(brokers) >= 1

    view, _ = read_cluster_view(
        pipeline.kafka_config,
        pipeline.topic,
        [pipeline.group],
        pipeline.probes.producer_ledger,
        pipeline.probes.consumer_ledger,
    )

    assert view.offsets_retention_minutes == min(int(v) for v in answered)
    assert (view.replica_lag_max_ms, view.replica_lag_note) == (max(int(v) for v in lag_bounds), None)
