"""What the stuck locate is asked (LocateRequest) and what either engine answers
(LocateResult): the contract between auditor/stuck/locate.py, its Python engine
(locate_python.py) and the Spark job (spark_jobs/stuck_locate.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from auditor.stuck.evidence import LedgerEntry, LocatedRecord, PartitionState, ProcessedMark, UntracedSession
from auditor.stuck.kafka_view import ReadPlan, client_settings


class LocateError(RuntimeError):
    """The records could not be located (Kafka failed mid-read, the Spark job failed)."""


@dataclass
class LocateResult:
    records: dict[str, list[LocatedRecord]] = field(default_factory=dict)
    records_scanned: int = 0
    keyed_records: int = 0
    ledger_entries: dict[str, list[LedgerEntry]] = field(default_factory=dict)
    ledger_entries_for_topic: int = 0
    # v2 ledgers resolve sequences in ranges that name no keys: the latest instant a range
    # with sequences absent from the topic (and not explained by failures) says records were
    # produced; None when there is none. The Spark engine does not check presence: for it,
    # every range counts.
    unattributed_to_ms: int | None = None
    # the earliest start of a probed producer session that ledgered records of the topic
    # (locate_python.ledger_covers_from): rows created before it may have been produced
    # before any producer was probed. None when the ledger holds no entry of the topic.
    ledger_covers_from_ms: int | None = None
    # Producer sessions of the ledger with no `closed` session-end (either contract): killed,
    # such a session may have sent records that no ledger record names (UntracedSession).
    untraced_sessions: list[UntracedSession] = field(default_factory=list)
    # the latest timestamp of a record read without any audit header (None: none read)
    unprobed_record_ms: int | None = None
    # the latest timestamp of a record read whose audit id (either contract) is not its
    # binding key, and its producer session (None: none read): that session's ledger names
    # other ids than the stuck items' keys
    miskeyed_record_ms: int | None = None
    miskeyed_session: str | None = None
    # python engine: per v2 session, the sequences found in the topic
    v2_seen: dict[str, set[int]] = field(default_factory=dict)
    marks: dict[tuple[str, int, int], ProcessedMark] = field(default_factory=dict)
    group_marks: dict[str, int] = field(default_factory=dict)
    max_mark_below_low: dict[tuple[str, int], int] = field(default_factory=dict)
    # per (group, partition): the lowest offset the group marked processed
    first_mark: dict[tuple[str, int], int] = field(default_factory=dict)
    # per group: when it first marked a record of the topic processed
    first_mark_ms: dict[str, int] = field(default_factory=dict)
    # per (group, partition): (first, last, reason) of marks its consumer's ledger could not
    # write (v2 marks-lost records)
    lost_marks: dict[tuple[str, int], list[tuple[int, int, str | None]]] = field(default_factory=dict)
    # per group: when it last marked a record that is now below its partition's log start
    last_mark_below_low_ms: dict[str, int] = field(default_factory=dict)
    engine: str = "python"
    timings: dict[str, float] = field(default_factory=dict)
    # the Spark engine's session settings for this locate only (a small read's)
    spark_settings: dict[str, str] = field(default_factory=dict)

    def add_mark(self, mark: ProcessedMark) -> None:
        """Keep the earliest mark of each position, with the latest one's time (merged)."""
        key = (mark.group, mark.partition, mark.offset)
        current = self.marks.get(key)
        self.marks[key] = mark if current is None else current.merged(mark)

    def add_lost_marks(self, group: str, partition: int, first: int, last: int, reason: str | None) -> None:
        self.lost_marks.setdefault((group, partition), []).append((first, last, reason))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LocateResult:
        """The Spark job's output (spark_jobs/stuck_locate.py) as a LocateResult."""
        result = cls(
            records_scanned=int(data["records_scanned"]),
            keyed_records=int(data["keyed_records"]),
            ledger_entries_for_topic=int(data["ledger_entries_for_topic"]),
            unattributed_to_ms=data.get("unattributed_to_ms"),
            ledger_covers_from_ms=data.get("ledger_covers_from_ms"),
            unprobed_record_ms=data.get("unprobed_record_ms"),
            miskeyed_record_ms=data.get("miskeyed_record_ms"),
            miskeyed_session=data.get("miskeyed_session"),
            untraced_sessions=[
                UntracedSession(str(s), int(last), None if alive is None else int(alive), bool(sends))
                for s, last, alive, sends in data.get("untraced_sessions") or []
            ],
            group_marks={str(g): int(n) for g, n in data["group_marks"].items()},
            last_mark_below_low_ms={str(g): int(ms) for g, ms in (data.get("last_mark_below_low_ms") or {}).items()},
            engine="spark",
            timings=dict(data.get("timings") or {}),
            spark_settings=dict(data.get("spark_settings") or {}),
        )
        for key, partition, offset, ts, state, session, seq in data["records"]:
            result.records.setdefault(key, []).append(LocatedRecord(key, partition, offset, ts, state, session, seq))
        for audit_id, session, seq, status, partition, offset, error, persisted, ts, *rest in data["ledger_entries"]:
            result.ledger_entries.setdefault(audit_id, []).append(
                LedgerEntry(audit_id, session, seq, status, partition, offset, error, persisted, ts, *rest[:2])
            )
        for group, partition, offset, session, ts in data["marks"]:
            result.add_mark(ProcessedMark(group, partition, offset, session, ts))
        for group, partition, offset in data["max_mark_below_low"]:
            result.max_mark_below_low[(group, partition)] = offset
        for group, partition, offset in data.get("first_mark") or []:
            result.first_mark[(group, partition)] = offset
        result.first_mark_ms = {str(g): int(ms) for g, ms in (data.get("first_mark_ms") or {}).items()}
        for group, partition, first, last, reason in data.get("lost_marks") or []:
            result.add_lost_marks(str(group), int(partition), int(first), int(last), reason)
        return result


@dataclass
class LocateRequest:
    kafka_config: dict[str, Any]
    plan: ReadPlan
    record_key: str
    keys: list[str]
    groups: list[str]
    # Per partition, where to start reading the topic (the key index stands in for what lies
    # below, memory.indexed_records); the log start where absent.
    starts: dict[int, int] = field(default_factory=dict)
    # The keys' records below those starts, as the index knows them: the engines count them
    # found (their processed marks are read too).
    known: dict[str, list[LocatedRecord]] = field(default_factory=dict)
    # Per producer session, the sequences reconciliation runs read below those starts (its
    # seq coverage): records found in the topic then, for the v2 presence check.
    seen_intervals: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def start(self, state: PartitionState) -> int:
        return min(max(self.starts.get(state.partition, state.low), state.low), state.stable)

    @property
    def records_to_read(self) -> int:
        """Topic and ledger records the engines will read."""
        ledgers = [r.total for r in (self.plan.producer_ledger, self.plan.consumer_ledger) if r is not None]
        return sum(s.high - self.start(s) for s in self.plan.partitions.values()) + sum(ledgers)

    def to_json(self, keys_path: str | None = None) -> dict[str, Any]:
        bootstrap, config = client_settings(self.kafka_config)

        def ledger(r: Any) -> dict[str, Any] | None:
            if r is None:
                return None
            return {"topic": r.topic, "ranges": {str(p): list(v) for p, v in r.ranges.items()}}

        data: dict[str, Any] = {
            "topic": self.plan.topic,
            "bootstrap_servers": bootstrap,
            "kafka_config": config,
            "record_key": self.record_key,
            "groups": self.groups,
            "partitions": {str(p): [s.low, s.stable, s.high] for p, s in self.plan.partitions.items()},
            "starts": {str(p): self.start(s) for p, s in self.plan.partitions.items()},
            "known_records": [
                [r.key, r.partition, r.offset, r.timestamp_ms, r.state, r.session, r.seq]
                for records in self.known.values()
                for r in records
            ],
            "producer_ledger": ledger(self.plan.producer_ledger),
            "consumer_ledger": ledger(self.plan.consumer_ledger),
            "seen_intervals": [
                [session, start, end] for session, spans in self.seen_intervals.items() for start, end in spans
            ],
            "records_to_read": self.records_to_read,
        }
        if keys_path is None:
            data["keys"] = self.keys
        else:
            data["keys_path"] = keys_path
        return data
