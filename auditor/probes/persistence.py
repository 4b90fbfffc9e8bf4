"""How sure we are that a failed message did not reach the log.

librdkafka knows each message's persistence status (rd_kafka_message_status():
NOT_PERSISTED, POSSIBLY_PERSISTED, PERSISTED) but confluent-kafka does not
expose it, so the producer ledger derives it from the delivery error and from
whether the producer may have sent the message more than once:

* librdkafka's status is per message and outlives its attempts. An attempt
  whose outcome is unknown (request timed out in flight, connection lost after
  sending, NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT) marks the
  message POSSIBLY_PERSISTED and, while ``retries`` remain, puts it back in
  its partition queue (rdkafka_request.c, rd_kafka_handle_Produce_error and its
  rd_kafka_err_action table; rdkafka_partition.c, rd_kafka_retry_msgq). A
  later attempt's error never lowers that status: "Don't downgrade a message
  from any form of PERSISTED to NOT_PERSISTED, since the original cause of
  indicating PERSISTED can't be changed. E.g., a previous ack or in-flight
  timeout." (rd_kafka_retry_msgq, and rd_kafka_msgq_set_metadata in
  rdkafka_msg.c). The delivery report carries the *last* attempt's error.
* So when a message may have been retried, its final error says nothing about
  the earlier attempts: a requeued message can end with any code, e.g. the retry
  refused with NOT_ENOUGH_REPLICAS after the first attempt was appended and
  timed out waiting for a paused follower (test_probe_persistence shows it on
  real brokers), purged from the queue (_PURGE_QUEUE), its partition gone
  (_UNKNOWN_PARTITION or the topic's error), or a permanent refusal of the
  re-formed batch (MSG_SIZE_TOO_LARGE when more messages joined it). Such a
  failure is "possibly".
* A message is only retried after such an attempt while its retry count is
  below ``retries`` (alias ``message.send.max.retries``; INT32_MAX by default
  since librdkafka 1.5.2, and at least 1 under idempotence). Retries librdkafka
  does not count (NOT_LEADER_FOR_PARTITION and other metadata errors, a request
  that never left the client) follow attempts it marks NOT_PERSISTED. With
  ``retries=0`` the final error is therefore the verdict on the one attempt
  that may have written the message, and librdkafka's own table decides:
  "not" for a message that never left the client (purged from the queue,
  unknown topic/partition) or that the broker refused before appending
  (size, authorization, not enough replicas, not leader, corrupt/invalid
  record, fenced/invalid transactional state...).
* "not" whatever the retries: the codes produce() itself raises (bad argument,
  queue full, serialization), which name a message that never entered the queue.
* "possibly": everything else. In particular ``_MSG_TIMED_OUT`` is always
  "possibly": librdkafka reports messages that expire in its queue (NOT
  persisted) and messages that expire while their request is in flight
  (POSSIBLY persisted) with the same code, and Python cannot tell the two apart.
  Over-reporting "possibly" only costs the reconciler a lookup; claiming "not"
  for a record that is in the log would turn a duplicate into a false loss.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError

from auditor.probes.codec import NOT_PERSISTED, POSSIBLY_PERSISTED
from auditor.probes.config import applied_setting

# Raised by produce() for a message that never entered librdkafka's queue.
_NEVER_QUEUED_CODES = frozenset(
    {
        KafkaError._INVALID_ARG,
        KafkaError._QUEUE_FULL,
        KafkaError._KEY_SERIALIZATION,
        KafkaError._VALUE_SERIALIZATION,
    }
)

# The attempt that ended with one of these wrote nothing (librdkafka: MSG_NOT_PERSISTED).
_NOT_WRITTEN_BY_LAST_ATTEMPT_CODES = _NEVER_QUEUED_CODES | frozenset(
    {
        KafkaError._PURGE_QUEUE,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
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

_RETRIES_NAMES = ("retries", "message.send.max.retries")  # librdkafka aliases


def sends_may_be_retried(config: Mapping[str, Any]) -> bool:
    """Whether a producer with this (librdkafka) config may send a message again after an
    attempt that may have written it: ``retries`` above 0, as by default. A value that is not
    a whole number counts as retrying (the cautious side; librdkafka refuses it anyway)."""
    value = applied_setting(config, _RETRIES_NAMES)  # the later alias wins, as librdkafka applies them
    if value is None:
        return True
    try:
        return int(str(value)) > 0
    except ValueError:
        return True


def classify_persistence(err: KafkaError, *, may_retry: bool = True) -> str:
    """``"not"`` or ``"possibly"`` for a failed delivery (see the module docstring).

    ``may_retry``: whether the producer may have retried the message
    (``sends_may_be_retried`` of its config; librdkafka's default retries do).
    """
    codes = _NEVER_QUEUED_CODES if may_retry else _NOT_WRITTEN_BY_LAST_ATTEMPT_CODES
    return NOT_PERSISTED if err.code() in codes else POSSIBLY_PERSISTED


def describe_error(err: KafkaError) -> str:
    """The ledger's error text: the stable code name, then librdkafka's message."""
    return f"{err.name()}: {err.str()}"
