"""How sure we are that a failed message did not reach the log.

librdkafka knows each message's persistence status (rd_kafka_message_status():
NOT_PERSISTED, POSSIBLY_PERSISTED, PERSISTED) but confluent-kafka does not
expose it, so the producer ledger derives it from the delivery error:

* "not": the message never left the client (purged from the queue, unknown
  topic/partition, bad argument) or the broker rejected the whole request
  before appending it (size, authorization, not enough replicas, not leader,
  corrupt/invalid record, fenced/invalid transactional state...).
* "possibly": anything else. In particular ``_MSG_TIMED_OUT`` is always
  "possibly": librdkafka reports messages that expire in its queue (NOT
  persisted) and messages that expire while their request is in flight
  (POSSIBLY persisted) with the same code, and Python cannot tell the two apart.
  Over-reporting "possibly" only costs the reconciler a lookup; claiming "not"
  for a record that is in the log would turn a duplicate into a false loss.
"""

from __future__ import annotations

from confluent_kafka import KafkaError

from auditor.probes.codec import NOT_PERSISTED, POSSIBLY_PERSISTED

_NOT_PERSISTED_CODES = frozenset(
    {
        KafkaError._PURGE_QUEUE,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._INVALID_ARG,
        KafkaError._QUEUE_FULL,
        KafkaError._KEY_SERIALIZATION,
        KafkaError._VALUE_SERIALIZATION,
        KafkaError._FENCED,
        KafkaError.INVALID_MSG,  # CORRUPT_MESSAGE
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.INVALID_REQUIRED_ACKS,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        KafkaError.INVALID_TIMESTAMP,
        KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        KafkaError.UNSUPPORTED_COMPRESSION_TYPE,
        KafkaError.UNSUPPORTED_VERSION,
        KafkaError.POLICY_VIOLATION,
        KafkaError.INVALID_RECORD,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_TXN_STATE,
    }
)


def classify_persistence(err: KafkaError) -> str:
    """``"not"`` or ``"possibly"`` for a failed delivery (see the module docstring)."""
    return NOT_PERSISTED if err.code() in _NOT_PERSISTED_CODES else POSSIBLY_PERSISTED


def describe_error(err: KafkaError) -> str:
    """The ledger's error text: the stable code name, then librdkafka's message."""
    return f"{err.name()}: {err.str()}"
