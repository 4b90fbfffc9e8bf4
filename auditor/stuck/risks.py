"""Cluster-side risks shown beside the stuck items: things that will make items stuck soon.

- open or hanging transactions: the last stable offset behind the high watermark for a
  while stalls every read_committed consumer of the partition;
- consumer groups whose lag in time approaches the topic's retention.ms: records will be
  deleted before the group reads them ("group X will lose data in N hours");
- groups with no active members: their committed offsets expire offsets.retention.minutes
  after the group became empty, and the group then restarts from auto.offset.reset;
- groups with no active members and no committed offset on a partition that holds records
  (offsets expired, never committed, a partition added while they were away, a wrong group
  name): their next consumer starts there from auto.offset.reset;
- active groups with no committed offset on a partition assigned to their members that holds
  records: where their consumers are is not visible, and with auto.offset.reset=latest (a
  partition added while they ran, offsets that expired) they started past those records
  and will never read them.

Kafka does not say since when a group is empty; the first diagnosis that saw it empty is
used (carried over from the previous run's risks). A simple consumer group (consumers that
commit without joining: assign(), Flink's KafkaSource) is always empty; Kafka expires its
offsets a retention after each one's last commit, which no API shows, so it gets no
countdown. When Kafka or the committed offsets could not be read, the group risks are
``unknown`` with the reason, never an empty list that would read as "no risk".
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from auditor.stuck.evidence import ClusterView, ms_to_iso

OPEN_TRANSACTION_WARN_MS = 60_000
HANGING_TRANSACTION_MS = 15 * 60_000  # the broker's default transaction.max.timeout.ms
RETENTION_WARN_FRACTION = 0.5
RETENTION_ERROR_FRACTION = 0.8
OFFSETS_EXPIRY_ERROR_MS = 24 * 3600_000


def _hours(ms: float) -> str:
    hours = ms / 3600_000
    if hours >= 48:
        return f"{hours / 24:.1f} days"
    if hours >= 1:
        return f"{hours:.1f} hours"
    return f"{max(0.0, ms / 60_000):.0f} minutes"


def open_transactions(view: ClusterView) -> list[dict[str, Any]]:
    risks = []
    for partition, state in sorted(view.partitions.items()):
        if state.stable >= state.high:
            continue
        since = view.open_transaction_since_ms.get(partition)
        age = view.now_ms - since if since is not None else None
        if age is not None and age < OPEN_TRANSACTION_WARN_MS:
            continue
        hanging = age is not None and age >= HANGING_TRANSACTION_MS
        behind = state.high - state.stable
        risks.append(
            {
                "kind": "hanging-transaction" if hanging else "open-transaction",
                "severity": "error" if hanging else "warning",
                "subject": f"{view.topic}/{partition}",
                "message": (
                    f"{'hanging' if hanging else 'open'} transaction on {view.topic}/{partition}"
                    + (f" for {_hours(age)}" if age is not None else "")
                    + f": the last stable offset {state.stable} is {behind} record(s) behind the high watermark "
                    f"{state.high}; read_committed consumers of this partition are stalled"
                ),
                "details": {
                    "partition": partition,
                    "last_stable": state.stable,
                    "high_watermark": state.high,
                    "open_since": ms_to_iso(since),
                },
            }
        )
    return risks


def overtaken_groups(view: ClusterView) -> list[dict[str, Any]]:
    """Groups the log start has passed: records were deleted (retention, delete-records)
    before the group committed them. Seen, not inferred from a lag in time."""
    risks = []
    for group in view.groups.values():
        if not group.overtaken:
            continue
        worst = max(group.overtaken.values(), key=lambda o: o.records)
        more = len(group.overtaken) - 1
        risks.append(
            {
                "kind": "retention-lag",
                "severity": "error",
                "subject": group.group,
                "message": (
                    f"group {group.group} is losing data now: it committed offset {worst.committed} on "
                    f"{view.topic}/{worst.partition} but the log starts at {worst.log_start}: {worst.records} "
                    "record(s) were deleted before it committed them"
                    + (f" ({more} more partition(s) likewise)" if more else "")
                ),
                "details": {
                    "group": group.group,
                    "partition": worst.partition,
                    "committed": worst.committed,
                    "log_start": worst.log_start,
                    "deleted_uncommitted": worst.records,
                    "partitions": sorted(group.overtaken),
                    "retention_ms": view.retention_ms,
                },
            }
        )
    return risks


def retention_lag(view: ClusterView) -> list[dict[str, Any]]:
    retention = view.retention_ms
    if retention is None or retention <= 0:
        return []
    risks = []
    for group in view.groups.values():
        if group.overtaken:
            continue  # overtaken_groups says more than a lag in time could
        worst: tuple[int, int] | None = None
        for partition, committed in group.committed.items():
            state = view.partitions.get(partition)
            oldest = group.committed_timestamp_ms.get(partition)
            if state is None or oldest is None or committed >= state.high:
                continue
            lag = view.now_ms - oldest
            if worst is None or lag > worst[0]:
                worst = (lag, partition)
        if worst is None or worst[0] < RETENTION_WARN_FRACTION * retention:
            continue
        lag, partition = worst
        left = retention - lag
        message = (
            f"group {group.group} is losing data now: its oldest unread record on {view.topic}/{partition} is older "
            f"than retention.ms ({_hours(retention)})"
            if left <= 0
            else f"group {group.group} will lose data in {_hours(left)}: its lag on {view.topic}/{partition} is "
            f"{_hours(lag)} of the topic's {_hours(retention)} retention"
        )
        risks.append(
            {
                "kind": "retention-lag",
                "severity": "error" if lag >= RETENTION_ERROR_FRACTION * retention else "warning",
                "subject": group.group,
                "message": message,
                "details": {
                    "group": group.group,
                    "partition": partition,
                    "lag_seconds": round(lag / 1000),
                    "retention_ms": retention,
                    "hours_left": round(left / 3600_000, 2),
                },
            }
        )
    return risks


def _empty_since(previous: Iterable[dict[str, Any]]) -> dict[str, int]:
    """When each group was first seen empty, from the previous run's risks (also carried
    through a run that could not read the groups)."""
    since: dict[str, int] = {}
    for risk in previous:
        details = risk.get("details")
        if not isinstance(details, dict):
            continue
        if risk.get("kind") == "offsets-expiry" and isinstance(details.get("empty_since_ms"), int):
            since[str(risk.get("subject"))] = details["empty_since_ms"]
        elif risk.get("kind") == "risks-unknown" and isinstance(details.get("empty_since_ms"), dict):
            since.update({str(g): ms for g, ms in details["empty_since_ms"].items() if isinstance(ms, int)})
    return since


def offsets_expiry(view: ClusterView, previous: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    minutes = view.offsets_retention_minutes
    if not minutes or minutes <= 0:
        return []
    empty_since = _empty_since(previous)
    retention_ms = minutes * 60_000
    risks = []
    for group in view.groups.values():
        if group.members != 0 or not group.committed:
            continue
        if group.simple:
            risks.append(
                {
                    "kind": "offsets-expiry",
                    "severity": "info",
                    "subject": group.group,
                    "message": (
                        f"group {group.group} commits without joining (a simple consumer group: assign(), Flink's "
                        f"KafkaSource): Kafka expires each of its committed offsets {_hours(retention_ms)} "
                        f"(offsets.retention.minutes={minutes}) after its last commit, which no Kafka API shows, "
                        "so the auditor gives no countdown"
                    ),
                    "details": {"group": group.group, "simple": True, "offsets_retention_minutes": minutes},
                }
            )
            continue
        since = empty_since.get(group.group) or view.now_ms
        left = retention_ms - (view.now_ms - since)
        risks.append(
            {
                "kind": "offsets-expiry",
                "severity": "error" if left < OFFSETS_EXPIRY_ERROR_MS else "warning",
                "subject": group.group,
                "message": (
                    f"group {group.group} has no active members (seen empty since {ms_to_iso(since)}): its committed "
                    f"offsets expire in about {_hours(left)} (offsets.retention.minutes={minutes}), then it restarts "
                    "from auto.offset.reset"
                ),
                "details": {
                    "group": group.group,
                    "empty_since_ms": since,
                    "offsets_retention_minutes": minutes,
                    "hours_left": round(left / 3600_000, 2),
                },
            }
        )
    return risks


def uncommitted_partitions(view: ClusterView) -> list[dict[str, Any]]:
    """Groups with no committed offset on partitions that hold records: idle groups on any
    partition, active ones on the partitions assigned to their members. Simple groups are
    left out (they may read a subset on purpose), and so are groups that could not be described."""
    risks = []
    for group in view.groups.values():
        if group.members is None or group.simple is not False:
            continue
        active = group.members > 0  # then only partitions its members read (assignment known) count
        bare = {
            p: state.high - state.low
            for p, state in sorted(view.partitions.items())
            if state.high > state.low and (group.unseen_position(p) if active else p not in group.committed)
        }
        if not bare:
            continue
        where = ", ".join(f"{view.topic}/{p}" for p in bare)
        records = sum(bare.values())
        if active:
            message = (
                f"group {group.group} is active ({group.members} member(s)) but has no committed offset on {where}, "
                f"assigned to its members ({records} record(s) there): where its consumers are is not visible; with "
                "auto.offset.reset=latest (a partition added while they ran, offsets that expired) they started "
                "past these records and will never read them (a consumer that reads them commits its position as it "
                "goes, unless it commits only every so many records)"
            )
        else:
            message = (
                f"group {group.group} has no active members and no committed offset on {where} "
                f"({records} record(s) there): its next consumer starts there from auto.offset.reset "
                "(latest skips them, earliest reads them all); "
                + (
                    "it has committed nothing on this topic: it never ran, its offsets expired, or the group "
                    "name is wrong"
                    if not group.committed
                    else "its offsets there expired, were never committed, or the partitions were added "
                    "while it was away"
                )
            )
        risks.append(
            {
                "kind": "no-committed-offset",
                "severity": "warning",
                "subject": group.group,
                "message": message,
                "details": {"group": group.group, "partitions": list(bare), "records": records, "active": active},
            }
        )
    return risks


def _unassessed(view: ClusterView, reason: str, previous: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "kind": "risks-unknown",
        "severity": "unknown",
        "subject": view.topic,
        "message": f"the consumer groups' risks on {view.topic} are unknown: {reason}",
        # the offsets-expiry countdowns go on from when each group was first seen empty
        "details": {"reason": reason, "empty_since_ms": _empty_since(previous)},
    }


def cluster_risks(view: ClusterView, previous: Iterable[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    before = list(previous)
    if view.kafka_error:
        return [_unassessed(view, f"Kafka could not be read: {view.kafka_error}", before)]
    risks = open_transactions(view)
    if view.groups_error:
        return [*risks, _unassessed(view, f"committed offsets could not be read: {view.groups_error}", before)]
    return (
        risks
        + overtaken_groups(view)
        + retention_lag(view)
        + offsets_expiry(view, before)
        + uncommitted_partitions(view)
    )
