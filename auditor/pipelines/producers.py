"""What the probed producers of a cluster reported about themselves (the clients topic), as
the stuck diagnosis and reconciliation both need it: how long a send's outcome can stay open
(spark_jobs.send_outcome)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaException

from auditor.lint.observed import read_reported_clients
from auditor.probes.topics import CLIENTS_TOPIC
from spark_jobs.send_outcome import SEND_OUTCOME_MS, UNBOUNDED, describe, send_outcome_ms


def observed_send_outcome(
    kafka_config: Mapping[str, Any], clients_topic: str = CLIENTS_TOPIC, timeout_s: float = 5.0
) -> tuple[int, str | None]:
    """(the send outcome bound in ms, 0: without limit; a note for the run when it is not
    librdkafka's defaults' or could not be read)."""
    try:
        reported = read_reported_clients(kafka_config, clients_topic, timeout=timeout_s)
    except KafkaException as exc:
        return SEND_OUTCOME_MS, (
            f"the producers' message timeouts could not be read from {clients_topic} ({exc}): "
            f"{describe(SEND_OUTCOME_MS)} assumed"
        )
    bound = send_outcome_ms(c.config for c in reported.clients if c.kind == "producer")
    notes = []
    if bound == UNBOUNDED:
        notes.append(f"{describe(bound)}: no send it never saw confirmed is judged")
    elif bound != SEND_OUTCOME_MS:
        notes.append(f"a send never confirmed is judged {describe(bound)} after it was sent")
    if not reported.complete:
        notes.append(
            f"{clients_topic} was not read to its end within {timeout_s:g} s: a producer that retries longer may be unseen"
        )
    return bound, "; ".join(notes) or None
