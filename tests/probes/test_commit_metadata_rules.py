"""The consumer probe's commit metadata and its offset-store decision, as pure functions (the
broker round trips are in test_probe_commit_metadata.py)."""

from __future__ import annotations

from typing import Any

import pytest

from auditor.probes.wrapping import commit_metadata, inner_consumer_config, probe_stores_offsets


def test_metadata_read_back_and_committed_again_names_only_the_committing_session() -> None:
    """An application that commits the metadata committed() gave it (or a plain consumer that
    copies it) must not name the earlier session, nor pile up lines until it no longer fits."""
    metadata = commit_metadata("s0", "app-state")
    for n in range(1, 200):
        metadata = commit_metadata(f"s{n}", metadata)
    assert metadata == "app-state\naudit:v2:s199"
    assert commit_metadata("s2", "audit:v2:s1") == "audit:v2:s2"


def test_application_metadata_that_leaves_no_room_is_committed_unchanged_counting_the_terminator() -> None:
    """librdkafka sends the metadata with its NUL, which the broker counts against
    offset.metadata.max.bytes (4096): 4054 bytes plus a newline and a 41-byte line is 4096 + 1."""
    session = "a" * 32
    assert commit_metadata(session, "x" * 4054) == "x" * 4054
    assert commit_metadata(session, "x" * 4053) == "x" * 4053 + "\naudit:v2:" + session


@pytest.mark.parametrize(
    ("config", "stores"),
    [
        ({"group.id": "g"}, True),
        ({"group.id": "g", "enable.auto.offset.store": "t"}, True),  # librdkafka's spelling
        ({"group.id": "g", "enable.auto.offset.store": "false"}, False),
        ({"group.id": "g", "default.topic.config": {"enable.auto.offset.store": "false"}}, False),
        ({"group.id": "g", "enable.auto.offset.store": False, "default.topic.config": {}}, False),
        ({"group.id": "g", "enable.auto.offset.store": "yes"}, False),  # refused by the client: left to it
        ({"enable.auto.offset.store": True}, False),  # no group: nothing to commit
    ],
)
def test_the_probe_stores_offsets_only_where_librdkafka_would_have(config: dict[str, Any], stores: bool) -> None:
    """An application that stores offsets itself after processing (at-least-once) keeps doing
    so: the probe taking over the store there would commit what it never processed. The setting
    is read as librdkafka applies it: a nested default.topic.config last, t/f spellings."""
    assert probe_stores_offsets(config) is stores
    inner = inner_consumer_config(config)
    if stores:
        assert inner["enable.auto.offset.store"] is False
    else:
        assert inner == config


def test_the_inner_client_s_own_store_is_off_in_the_nested_topic_config_too() -> None:
    inner = inner_consumer_config({"group.id": "g", "default.topic.config": {"enable.auto.offset.store": "true"}})
    assert inner["default.topic.config"] == {"enable.auto.offset.store": False}
    assert inner["enable.auto.offset.store"] is False
