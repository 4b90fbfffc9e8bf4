"""Which probed producers ack with acks=all, from the config their probe reported
(`_audit.clients`): the stuck diagnosis takes their acks as proof the high watermark passed."""

from __future__ import annotations

from typing import Any

from auditor.lint.observed import acks_all
from auditor.probes.codec import ClientRecord


def reported(config: dict[str, Any], library_version: str = "2.16.0") -> ClientRecord:
    return ClientRecord("producer", "s1", "app", None, "librdkafka", library_version, config, "host", 0)


def test_it_reads_acks_and_its_alias() -> None:
    assert acks_all(reported({"acks": "all"})) and acks_all(reported({"request.required.acks": -1}))
    assert not acks_all(reported({"acks": "1"})) and not acks_all(reported({"request.required.acks": "0"}))


def test_idempotence_and_transactions_imply_acks_all() -> None:
    assert acks_all(reported({"enable.idempotence": True})) and acks_all(reported({"transactional.id": "t"}))
    assert acks_all(reported({"enable.idempotence": "true", "acks": "all"}))


def test_unset_it_is_librdkafkas_default_since_1_0_and_unknown_otherwise() -> None:
    assert acks_all(reported({}))
    assert not acks_all(reported({}, library_version="0.11.6"))  # acks=1 was the default then
    assert not acks_all(reported({}, library_version=""))


def test_a_nested_default_topic_config_wins_over_the_top_level_whatever_the_order() -> None:
    # confluent-kafka 2.16 applies default.topic.config after every other key: with
    # enable.idempotence it accepts {'default.topic.config': {'acks': 'all'}, 'acks': 1} and
    # refuses {'default.topic.config': {'acks': 1}, 'acks': 'all'} ("`acks` must be set to `all`")
    assert acks_all(reported({"default.topic.config": {"acks": "all"}, "acks": 1}))
    assert acks_all(reported({"acks": 1, "default.topic.config": {"acks": "all"}}))
    assert not acks_all(reported({"default.topic.config": {"acks": 1}, "acks": "all"}))
    assert not acks_all(reported({"acks": "all", "default.topic.config": {"request.required.acks": "1"}}))
    assert not acks_all(reported({"default.topic.config": {"acks": 0}, "enable.idempotence": True}))


def test_the_later_of_acks_and_its_alias_wins() -> None:
    # librdkafka sets both spellings on one property, in the order the dict gives them
    assert not acks_all(reported({"acks": "all", "request.required.acks": 1}))
    assert acks_all(reported({"request.required.acks": 1, "acks": "all"}))
