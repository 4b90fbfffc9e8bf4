"""What a key's page shows beside its findings: its records in Kafka and its source row.

Records are read on demand with confluent-kafka (read_uncommitted, so records of aborted
transactions show too) from two places, both bounded:

* the exact positions the key's findings name (a duplicate names every copy), and
* a scan of each partition around the source row's creation time (records are produced
  when the row is written), at most SCAN_RECORDS_PER_PARTITION records each.

The source row is read with psycopg; table and column names are validated and quoted,
the key is a bound parameter.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import psycopg
from confluent_kafka import Consumer, KafkaException, Message, TopicPartition
from psycopg import sql

from auditor.lib.identifiers import IdentifierError, validate_identifier, validate_table_name
from auditor.lib.record_keys import record_key_of
from auditor.lib.secrets import MASK, MissingEnvError, is_secret_key, mask_db_error
from auditor.pipelines.models import Binding
from auditor.probes.headers import AUDIT, AUDIT_V2_SIZE, decode_audit_header, parse_audit_headers
from auditor.probes.message import record_headers, record_position
from spark_jobs.binding import parse_record_key
from spark_jobs.group_offsets import committed_offsets
from spark_jobs.kafka_offsets import KafkaReadError

MAX_POSITIONS = 200
SCAN_RECORDS_PER_PARTITION = 5000
SCAN_BEFORE = timedelta(minutes=1)
SCAN_AFTER = timedelta(minutes=10)
READ_TIMEOUT_S = 10.0
PREVIEW_CHARS = 500
HEADER_PREVIEW_CHARS = 200
SOURCE_ROWS = 5


@dataclass
class RecordView:
    partition: int
    offset: int
    timestamp: datetime | None
    key: str | None
    business_key: str | None
    headers: list[tuple[str, str]]
    value_preview: str
    value_size: int
    found_by: set[str] = field(default_factory=set)
    aborted: bool = False  # a finding says it is only in an aborted transaction
    # The audit fields under their version-1 names, from either contract version's headers.
    audit_fields: dict[str, str] = field(default_factory=dict)

    @property
    def audit(self) -> dict[str, str]:
        if self.audit_fields:
            return self.audit_fields
        return {name: value for name, value in self.headers if name.startswith("audit-")}


@dataclass
class RecordLookup:
    records: list[RecordView] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    # group → partition → its committed offset now, for the partitions holding the records;
    # a group that could not be asked is named in committed_errors instead.
    committed: dict[str, dict[int, int]] = field(default_factory=dict)
    committed_errors: dict[str, str] = field(default_factory=dict)


@dataclass
class SourceLookup:
    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    created: datetime | None = None
    error: str | None = None

    @property
    def labelled_rows(self) -> list[list[tuple[str, str]]]:
        return [list(zip(self.columns, row, strict=False)) for row in self.rows]


def _text(data: bytes | None, limit: int) -> str:
    if data is None:
        return ""
    text = data.decode("utf-8", errors="replace")
    return text if len(text) <= limit else text[:limit] + "…"


def business_key(message: Message, record_key: str) -> str | None:
    """The record's key by the binding's rule, as the job reads it (auditor.lib.record_keys: a
    key that is not UTF-8 in the probes' backslash escapes, as the job and the diagnosis write it)."""
    return record_key_of(message, parse_record_key(record_key, "binding"))


def _audit_fields(message: Message) -> dict[str, str]:
    """The record's audit fields named as in contract version 1, whichever version wrote them."""
    parsed = parse_audit_headers(record_headers(message), message.key())
    if parsed is None or not parsed.valid:
        return {}
    fields = {"audit-pid": str(parsed.pid), "audit-seq": str(parsed.seq), "audit-ts": str(parsed.ts_ms)}
    if parsed.audit_id is not None:
        fields["audit-id"] = parsed.audit_id
    return fields


def _header_text(name: str, value: bytes | None) -> str:
    if name == AUDIT and value is not None:
        parsed = decode_audit_header(value)
        if parsed.valid:
            named = value[AUDIT_V2_SIZE:]
            tail = f" id={_text(named, HEADER_PREVIEW_CHARS)}" if named else ""
            return f"v{parsed.version} session={parsed.pid} seq={parsed.seq} ts={parsed.ts_ms}{tail}"
        return f"(undecodable: {parsed.problem})"
    return _text(value, HEADER_PREVIEW_CHARS)


def _view(message: Message, record_key: str, found_by: str) -> RecordView:
    _ts_type, ts_ms = message.timestamp()
    value = message.value()
    _topic, partition, offset = record_position(message)
    return RecordView(
        partition=partition,
        offset=offset,
        timestamp=datetime.fromtimestamp(ts_ms / 1000, UTC) if ts_ms and ts_ms > 0 else None,
        key=None if message.key() is None else _text(message.key(), HEADER_PREVIEW_CHARS),
        business_key=business_key(message, record_key),
        headers=[(name, _header_text(name, v)) for name, v in record_headers(message)],
        value_preview=_text(value, PREVIEW_CHARS),
        value_size=len(value or b""),
        found_by={found_by},
        audit_fields=_audit_fields(message),
    )


def _consumer(binding: Binding) -> Consumer:
    config = binding.cluster.client_config()
    config.update(
        {
            "group.id": f"auditor-key-page-{uuid.uuid4().hex[:8]}",  # never commits
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_uncommitted",
            "enable.partition.eof": True,
            "socket.timeout.ms": 10000,
            "log_level": 3,
        }
    )
    return Consumer(config)


def _read_at(consumer: Consumer, topic: str, partition: int, offset: int, deadline: float) -> Message | None:
    consumer.assign([TopicPartition(topic, partition, offset)])
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error():
            return None  # end of partition, or the offset is gone
        return message if message.offset() == offset else None
    return None


def _scan(
    consumer: Consumer, binding: Binding, key: str, around: datetime, deadline: float, lookup: RecordLookup
) -> list[RecordView]:
    metadata = consumer.list_topics(binding.topic, timeout=READ_TIMEOUT_S).topics.get(binding.topic)
    if metadata is None or metadata.error is not None:
        lookup.notes.append(f"topic {binding.topic} cannot be read: {metadata.error if metadata else 'not found'}")
        return []
    start_ms = int((around - SCAN_BEFORE).timestamp() * 1000)
    end = around + timedelta(seconds=binding.grace_seconds) + SCAN_AFTER
    wanted = [TopicPartition(binding.topic, p, start_ms) for p in sorted(metadata.partitions)]
    starts = [tp for tp in consumer.offsets_for_times(wanted, timeout=READ_TIMEOUT_S) if tp.offset >= 0]
    found: list[RecordView] = []
    for tp in starts:
        consumer.assign([tp])
        seen = 0
        while seen < SCAN_RECORDS_PER_PARTITION and time.monotonic() < deadline:
            batch = consumer.consume(500, timeout=0.5)
            if not batch:
                continue
            done = False
            for message in batch:
                if message.error():
                    done = True  # end of the partition
                    break
                seen += 1
                ts_ms = message.timestamp()[1]
                if ts_ms > 0 and ts_ms > end.timestamp() * 1000:
                    done = True
                    break
                if business_key(message, binding.record_key) == key:
                    found.append(_view(message, binding.record_key, "scan"))
            if done:
                break
    lookup.notes.append(
        f"Scanned each partition from {around - SCAN_BEFORE:%Y-%m-%d %H:%M:%S} to {end:%Y-%m-%d %H:%M:%S} UTC "
        f"(record timestamps, at most {SCAN_RECORDS_PER_PARTITION} records per partition); "
        "records outside that window are shown only where a finding names them."
    )
    return found


def find_records(binding: Binding, key: str, positions: list[tuple[int, int]], around: datetime | None) -> RecordLookup:
    """Records of ``key``: those at the findings' positions, and those a bounded scan finds."""
    lookup = RecordLookup()
    deadline = time.monotonic() + 2 * READ_TIMEOUT_S
    by_position: dict[tuple[int, int], RecordView] = {}
    try:
        consumer = _consumer(binding)
    except (KafkaException, MissingEnvError, ValueError) as exc:
        lookup.error = f"cannot connect to cluster {binding.cluster.name}: {exc}"
        return lookup
    try:
        if len(positions) > MAX_POSITIONS:
            lookup.notes.append(f"Only the first {MAX_POSITIONS} of {len(positions)} positions were read.")
        for partition, offset in positions[:MAX_POSITIONS]:
            message = _read_at(consumer, binding.topic, partition, offset, deadline)
            if message is None:
                lookup.notes.append(
                    f"{binding.topic}/{partition}@{offset}: no record there now "
                    "(expired by retention, compacted, a transaction marker, or a timeout)."
                )
                continue
            held = business_key(message, binding.record_key)
            if held != key:
                # a position remembered for this key (a finding, the key index, stuck evidence)
                # that holds another record now: the log was truncated and rewritten there (an
                # unclean leader election) or the topic was re-created; never shown as this key's
                lookup.notes.append(
                    f"{binding.topic}/{partition}@{offset}: holds a record of "
                    + (f"another key ({_text(held.encode(), HEADER_PREVIEW_CHARS)})" if held else "no key")
                    + " now, not this key's: the log was truncated and rewritten there, or the topic was re-created."
                )
                continue
            by_position[(partition, offset)] = _view(message, binding.record_key, "finding")
        if around is not None:
            for view in _scan(consumer, binding, key, around, deadline, lookup):
                existing = by_position.setdefault((view.partition, view.offset), view)
                existing.found_by |= view.found_by
        else:
            lookup.notes.append("No source row to date the key: only the positions its findings name were read.")
        if time.monotonic() >= deadline:
            lookup.notes.append("The lookup stopped at its time limit; some records may be missing here.")
    except KafkaException as exc:
        lookup.error = f"reading topic {binding.topic} failed: {exc}"
    finally:
        consumer.close()
    lookup.records = [by_position[p] for p in sorted(by_position)]
    if lookup.records and binding.consumer_groups:
        read_committed(binding, lookup)
    return lookup


def read_committed(binding: Binding, lookup: RecordLookup) -> None:
    """Where each of the binding's groups stands now on the partitions of the key's records."""
    partitions = sorted({view.partition for view in lookup.records})
    connection = {**binding.cluster.client_config(), "log_level": 3}
    for group in binding.consumer_groups:
        try:
            rows = committed_offsets(connection, [group], binding.topic, partitions, READ_TIMEOUT_S, failover_s=0)
            lookup.committed[group] = {partition: offset for _, partition, offset in rows}
        except (KafkaException, KafkaReadError, TimeoutError) as exc:
            lookup.committed_errors[group] = f"its committed offsets could not be read: {exc}"


def _shown(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _in_zone(wall: datetime, zone_name: str) -> datetime | None:
    """A wall-clock time of `zone_name` as an instant; in a repeated hour, the later one (as
    PostgreSQL's AT TIME ZONE reads it); None when Python does not know the zone."""
    try:
        zone = ZoneInfo(zone_name)
    except (ZoneInfoNotFoundError, ValueError):
        return None
    return wall.replace(tzinfo=zone, fold=1)


def _stuck_rule_columns(binding: Binding) -> set[str]:
    return {column for rule in binding.stuck_rules.all() for column in (rule.status_column, rule.age_column)}


def read_source_row(binding: Binding, key: str) -> SourceLookup:
    """The binding's source row(s) whose key column equals ``key`` (every column, as text; a
    column named like a secret (is_secret_key: password_hash, api_token) as ****, for the key
    page reaches every viewer; the key column is the key, already in the page's address, and
    the created column and the stuck rules' status and age columns are what the page judges
    the row by, so they are never masked)."""
    lookup = SourceLookup()
    try:
        schema, table = validate_table_name(binding.table)
        key_column = validate_identifier(binding.key_column, "key_column")
        created_column = (
            validate_identifier(binding.created_column, "created_column") if binding.created_column else None
        )
        url = binding.source.resolved_url()
    except (IdentifierError, MissingEnvError) as exc:
        lookup.error = f"binding {binding.name}: {exc}"
        return lookup
    target = sql.Identifier(schema, table) if schema else sql.Identifier(table)
    query = sql.SQL("SELECT * FROM {} WHERE {} = %s LIMIT {}").format(
        target, sql.Identifier(key_column), sql.Literal(SOURCE_ROWS)
    )
    try:
        with psycopg.connect(url, connect_timeout=5, autocommit=True) as conn:
            conn.execute("SET statement_timeout = 5000")
            cursor = conn.execute(query, [key])
            lookup.columns = [column.name for column in cursor.description or []]
            rows = cursor.fetchall()
            zone_name = binding.timestamp_zone or str(conn.execute("SHOW TimeZone").fetchone()[0])  # type: ignore[index]
    except psycopg.errors.DataError:
        lookup.error = f"{key!r} is not a valid value of column {key_column}: no row can have it"
        return lookup
    except psycopg.Error as exc:
        detail = mask_db_error(exc, url)
        lookup.error = f"reading {binding.table} in source {binding.source.name} failed: {detail}"
        return lookup
    # the binding's and its stuck rules' own columns are what the page is about (a status
    # column may well be named token_status): shown as they are, and judged unmasked
    own = {key_column, created_column, *_stuck_rule_columns(binding)} - {None}
    hidden = [is_secret_key(column) and column not in own for column in lookup.columns]
    lookup.rows = [
        [MASK if hide and v is not None else _shown(v) for v, hide in zip(row, hidden, strict=True)] for row in rows
    ]
    if rows and created_column in lookup.columns:
        value = rows[0][lookup.columns.index(created_column)]
        if isinstance(value, datetime):
            lookup.created = value if value.tzinfo else _in_zone(value, zone_name)
    return lookup
