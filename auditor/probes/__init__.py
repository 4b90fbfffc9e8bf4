"""Audit probes: wrappers around confluent-kafka clients that stamp audit headers
and keep producer/consumer ledgers (docs/contracts.md).

A plain library: it imports nothing from Django so applications can embed it.
"""

from auditor.probes.codec import (
    ClientRecord,
    ConsumerBatch,
    ConsumerEntry,
    LedgerDecodeError,
    LedgerRecord,
    ProducerBatch,
    ProducerEntry,
    SessionEnd,
    SessionStart,
    decode_ledger_record,
    decode_ledger_records,
    encode_client_record,
    encode_consumer_batch,
    encode_producer_batch,
    encode_session_end,
    encode_session_start,
)
from auditor.probes.config import mask_config
from auditor.probes.consumer import AuditedConsumer
from auditor.probes.headers import (
    AUDIT_HEADER_NAMES,
    AUDIT_ID,
    AUDIT_PID,
    AUDIT_SEQ,
    AUDIT_TS,
    AuditHeaders,
    parse_audit_headers,
)
from auditor.probes.ledger import (
    ConsumerSession,
    DuplicateSequence,
    ProducerSession,
    Reprocessed,
    SeenRecord,
    SequenceGap,
    TopicLedger,
    find_duplicate_sequences,
    find_reprocessed,
    find_sequence_gaps,
    processed_offsets,
    seen_record_from_message,
    summarize_consumer_ledger,
    summarize_producer_ledger,
)
from auditor.probes.persistence import classify_persistence
from auditor.probes.producer import AuditedProducer
from auditor.probes.topics import (
    AUDIT_TOPICS,
    CLIENTS_TOPIC,
    CONSUMER_LEDGER_TOPIC,
    PRODUCER_LEDGER_TOPIC,
    ensure_audit_topics,
)

__all__ = [
    "AUDIT_HEADER_NAMES",
    "AUDIT_ID",
    "AUDIT_PID",
    "AUDIT_SEQ",
    "AUDIT_TOPICS",
    "AUDIT_TS",
    "CLIENTS_TOPIC",
    "CONSUMER_LEDGER_TOPIC",
    "PRODUCER_LEDGER_TOPIC",
    "AuditHeaders",
    "AuditedConsumer",
    "AuditedProducer",
    "ClientRecord",
    "ConsumerBatch",
    "ConsumerEntry",
    "ConsumerSession",
    "DuplicateSequence",
    "LedgerDecodeError",
    "LedgerRecord",
    "ProducerBatch",
    "ProducerEntry",
    "ProducerSession",
    "Reprocessed",
    "SeenRecord",
    "SequenceGap",
    "SessionEnd",
    "SessionStart",
    "TopicLedger",
    "classify_persistence",
    "decode_ledger_record",
    "decode_ledger_records",
    "encode_client_record",
    "encode_consumer_batch",
    "encode_producer_batch",
    "encode_session_end",
    "encode_session_start",
    "ensure_audit_topics",
    "find_duplicate_sequences",
    "find_reprocessed",
    "find_sequence_gaps",
    "mask_config",
    "parse_audit_headers",
    "processed_offsets",
    "seen_record_from_message",
    "summarize_consumer_ledger",
    "summarize_producer_ledger",
]
