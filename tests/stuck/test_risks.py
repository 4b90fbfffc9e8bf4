"""Cluster-side risks from an inline view: open/hanging transactions, retention lag, offsets expiry."""

from __future__ import annotations

from auditor.stuck.evidence import ClusterView, GroupState, PartitionState
from auditor.stuck.risks import cluster_risks

NOW = 1_800_000_000_000
HOUR = 3600_000


def test_it_reports_transactions_holding_the_last_stable_offset_back() -> None:
    view = ClusterView(topic="tickets", now_ms=NOW)
    view.partitions = {0: PartitionState(0, 0, 40, 75), 1: PartitionState(1, 0, 90, 95), 2: PartitionState(2, 0, 9, 9)}
    view.open_transaction_since_ms = {0: NOW - 20 * 60_000, 1: NOW - 5_000}

    (risk,) = cluster_risks(view)

    assert (risk["kind"], risk["severity"], risk["subject"]) == ("hanging-transaction", "error", "tickets/0")
    assert "35 record(s) behind" in risk["message"] and "read_committed consumers" in risk["message"]


def test_it_warns_when_a_groups_lag_approaches_retention() -> None:
    view = ClusterView(topic="tickets", now_ms=NOW, retention_ms=24 * HOUR)
    view.partitions = {0: PartitionState(0, 0, 100, 100), 1: PartitionState(1, 0, 100, 100)}
    slow = GroupState(
        "slow", committed={0: 10, 1: 50}, members=1, committed_timestamp_ms={0: NOW - 20 * HOUR, 1: NOW - HOUR}
    )
    fine = GroupState("fine", committed={0: 99}, members=1, committed_timestamp_ms={0: NOW - HOUR})
    view.groups = {"slow": slow, "fine": fine}

    (risk,) = cluster_risks(view)

    assert (risk["kind"], risk["subject"], risk["severity"]) == ("retention-lag", "slow", "error")
    assert risk["message"].startswith("group slow will lose data in 4.0 hours")
    assert risk["details"]["partition"] == 0


def test_it_counts_down_the_committed_offsets_of_an_empty_group() -> None:
    view = ClusterView(topic="tickets", now_ms=NOW, offsets_retention_minutes=10080)
    view.partitions = {0: PartitionState(0, 0, 10, 10)}
    view.groups = {"idle": GroupState("idle", committed={0: 10}, members=0), "busy": GroupState("busy", {0: 3}, 2)}

    (first,) = cluster_risks(view)
    assert (first["kind"], first["subject"], first["severity"]) == ("offsets-expiry", "idle", "warning")
    assert "7.0 days" in first["message"]

    # Later runs count from when the group was first seen empty.
    view.now_ms = NOW + 6 * 24 * HOUR + 12 * HOUR
    (later,) = cluster_risks(view, [first])
    assert later["details"]["empty_since_ms"] == NOW and later["severity"] == "error"
    assert "12.0 hours" in later["message"]


def test_it_reports_nothing_when_kafka_could_not_be_read() -> None:
    assert cluster_risks(ClusterView(topic="t", now_ms=NOW, kafka_error="down")) == []
