"""How long a send's outcome stays open, from the producers' own settings."""

from __future__ import annotations

import uuid

import pytest

from auditor.pipelines.models import Cluster
from auditor.pipelines.producers import cluster_send_outcome, observed_send_outcome, widest
from auditor.probes import AuditedProducer
from spark_jobs.binding import BindingError, binding_from_dict
from spark_jobs.send_outcome import (
    NOTHING_JUDGED_MS,
    SEND_OUTCOME_MS,
    UNBOUNDED,
    judged_until_ms,
    producer_outcome_ms,
    send_outcome_ms,
)
from tests.support.reconcile_world import MINIMAL_BINDING


def test_librdkafkas_defaults_give_the_default_bound() -> None:
    assert producer_outcome_ms({}) == SEND_OUTCOME_MS == 365_000
    assert send_outcome_ms([]) == SEND_OUTCOME_MS


def test_a_producer_that_retries_longer_widens_the_bound_and_one_that_retries_less_does_not_narrow_it() -> None:
    assert producer_outcome_ms({"message.timeout.ms": "900000"}) == 965_000
    assert producer_outcome_ms({"delivery.timeout.ms": 600000, "request.timeout.ms": 90000}) == 695_000
    assert send_outcome_ms([{}, {"message.timeout.ms": "900000"}, {"message.timeout.ms": "30000"}]) == 965_000
    assert send_outcome_ms([{"message.timeout.ms": "30000"}]) == SEND_OUTCOME_MS


def test_it_reads_the_timeout_a_producer_ran_with_the_later_alias_and_the_nested_topic_config_winning() -> None:
    # Stop 72: the first alias was read, and a nested default.topic.config never.
    assert producer_outcome_ms({"message.timeout.ms": 500, "delivery.timeout.ms": 900000}) == 965_000
    assert producer_outcome_ms({"delivery.timeout.ms": 900000, "message.timeout.ms": 500}) == SEND_OUTCOME_MS - 299_500
    assert producer_outcome_ms({"default.topic.config": {"message.timeout.ms": 900000}}) == 965_000
    nested_first = {"default.topic.config": {"delivery.timeout.ms": 0}, "message.timeout.ms": 900000}
    assert producer_outcome_ms(nested_first) == UNBOUNDED


def test_the_widest_of_two_bounds_is_kept() -> None:
    assert widest(None, SEND_OUTCOME_MS) == SEND_OUTCOME_MS
    assert widest(965_000, SEND_OUTCOME_MS) == 965_000
    assert widest(965_000, UNBOUNDED) == UNBOUNDED == widest(UNBOUNDED, 965_000)


def test_a_producer_that_retries_without_limit_leaves_every_send_unjudged() -> None:
    assert send_outcome_ms([{}, {"message.timeout.ms": "0"}]) == UNBOUNDED
    assert judged_until_ms(10**12, UNBOUNDED) == NOTHING_JUDGED_MS < 0
    assert judged_until_ms(10**12, SEND_OUTCOME_MS) == 10**12 - SEND_OUTCOME_MS


def test_the_job_takes_the_bound_and_refuses_a_bad_one() -> None:
    base = MINIMAL_BINDING
    assert binding_from_dict(base).send_outcome_ms == SEND_OUTCOME_MS
    assert binding_from_dict(base | {"send_outcome_ms": 965_000}).send_outcome_ms == 965_000
    assert binding_from_dict(base | {"send_outcome_ms": 0}).send_outcome_ms == UNBOUNDED
    assert binding_from_dict(base | {"send_outcome_ms": 1000}).send_outcome_ms == SEND_OUTCOME_MS  # never narrower
    with pytest.raises(BindingError, match="send_outcome_ms must be a whole number"):
        binding_from_dict(base | {"send_outcome_ms": "soon"})


@pytest.mark.integration
@pytest.mark.parametrize(("timeout_ms", "expected"), [("900000", 965_000), ("0", UNBOUNDED), (None, SEND_OUTCOME_MS)])
def test_the_bound_comes_from_what_the_probed_producers_reported(
    kafka_bootstrap: str, make_topic, timeout_ms: str | None, expected: int
) -> None:
    clients = make_topic("_audit.clients")
    config = {"bootstrap.servers": kafka_bootstrap, "client.id": f"patient-{uuid.uuid4().hex[:6]}"}
    if timeout_ms is not None:
        config["message.timeout.ms"] = timeout_ms
    # a producer with the defaults reports too: the longest one counts
    with AuditedProducer(
        {"bootstrap.servers": kafka_bootstrap}, ledger_topic=make_topic("_audit.producer-ledger"), clients_topic=clients
    ):
        pass
    with AuditedProducer(config, ledger_topic=make_topic("_audit.producer-ledger"), clients_topic=clients) as producer:
        producer.flush(30)

    bound, note = observed_send_outcome({"bootstrap.servers": kafka_bootstrap}, clients, timeout_s=15)

    assert bound == expected
    if expected == SEND_OUTCOME_MS:
        assert note is None
    else:
        assert note is not None and ("965 s" in note if expected else "without a time limit" in note)


@pytest.mark.integration
def test_a_clients_topic_that_cannot_be_read_leaves_the_defaults_and_says_so() -> None:
    bound, note = observed_send_outcome({"bootstrap.servers": "127.0.0.1:1"}, timeout_s=1)
    assert bound == SEND_OUTCOME_MS
    assert note is not None and "could not be read" in note


@pytest.mark.integration
@pytest.mark.django_db
def test_the_cluster_keeps_the_widest_bound_once_the_clients_topic_forgot_the_producer(
    kafka_bootstrap: str, make_topic
) -> None:
    cluster = Cluster.objects.create(name=f"c-{uuid.uuid4().hex[:6]}", bootstrap_servers=kafka_bootstrap)
    clients = make_topic("_audit.clients")
    config = {"bootstrap.servers": kafka_bootstrap, "message.timeout.ms": "900000"}
    with AuditedProducer(config, ledger_topic=make_topic("_audit.producer-ledger"), clients_topic=clients) as producer:
        producer.flush(30)

    assert cluster_send_outcome(cluster, clients_topic=clients, timeout_s=15)[0] == 965_000
    assert Cluster.objects.get(pk=cluster.pk).send_outcome_ms == 965_000
    # Retention deleted the producer's report (an empty clients topic stands in): the bound stays.
    bound, note = cluster_send_outcome(cluster, clients_topic=make_topic("_audit.clients"), timeout_s=15)
    assert bound == 965_000
    assert note is not None and "earlier run" in note
    # Unreachable: nothing read, the kept bound stands.
    assert cluster_send_outcome(cluster, read=False)[0] == 965_000
