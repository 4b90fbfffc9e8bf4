"""Binding validation and the driver-side helpers that need neither Spark nor a broker."""

from __future__ import annotations

import pytest

from spark_jobs.binding import (
    BindingError,
    RecordKeySpec,
    binding_from_dict,
    identity_changes,
    jdbc_url_and_properties,
    parse_duration,
    redact_url,
)
from spark_jobs.kafka_offsets import PartitionOffsets
from spark_jobs.reconcile_extract import OffsetRange, ReconcileError, plan_offsets

BASE = {
    "name": "tickets",
    "topic": "tickets",
    "bootstrap_servers": "127.0.0.1:9092",
    "source_url": "postgresql://app:s3cret@127.0.0.1:5432/tickets",
    "table": "public.tickets",
    "key_column": "id",
    "created_column": "created_at",
}


def test_it_reads_a_binding_with_defaults():
    binding = binding_from_dict(BASE | {"record_key": "json:$.ticket_id", "grace": "2m", "consumer_groups": ["p"]})
    assert binding.record_key == RecordKeySpec("json", "$.ticket_id")
    assert (binding.schema_name, binding.table_name) == ("public", "tickets")
    assert binding.grace_seconds == 120
    assert binding.consumer_groups == ("p",)
    assert binding.transactions is None  # decided per run from the offsets
    assert binding_from_dict(BASE | {"guarantee": "exactly-once"}).transactions is True
    assert binding_from_dict(BASE | {"transactions": False, "guarantee": "exactly-once"}).transactions is False


def test_a_state_built_for_another_topic_key_or_table_is_told_apart_and_an_older_state_is_not():
    def identity(**fields: str) -> dict[str, str]:
        return binding_from_dict(BASE | {"record_key": "json:$.ticket_id"} | fields).identity()

    kept = identity()
    assert kept == {"topic": "tickets", "record_key": "json:$.ticket_id", "table": "public.tickets", "key_column": "id"}
    assert identity_changes(kept, identity(record_key=" json:$.ticket_id", grace="5m")) == []
    assert identity_changes(kept, identity(topic="tickets-v2")) == ["topic 'tickets' → 'tickets-v2'"]
    assert identity_changes(kept, identity(record_key="key", key_column="ref")) == [
        "record_key 'json:$.ticket_id' → 'key'",
        "key_column 'id' → 'ref'",
    ]
    assert identity_changes(kept, identity(table="public.orders")) == ["table 'public.tickets' → 'public.orders'"]
    # a state written before the identity was kept: nothing to tell, nothing changed
    assert identity_changes({}, kept) == identity_changes(None, kept) == []


@pytest.mark.parametrize(
    ("value", "seconds"), [("30s", 30), ("2m", 120), ("1h", 3600), ("1d", 86400), ("500ms", 0.5), (15, 15.0)]
)
def test_it_parses_durations(value: object, seconds: float):
    assert parse_duration(value, "grace") == seconds


def test_it_names_missing_fields_and_bad_choices():
    with pytest.raises(BindingError, match=r"binding 'tickets': missing required field\(s\): topic, key_column"):
        binding_from_dict(BASE | {"topic": "", "key_column": None})
    with pytest.raises(BindingError, match="guarantee must be one of"):
        binding_from_dict(BASE | {"guarantee": "twice"})
    with pytest.raises(BindingError, match="consumer_groups must be a list"):
        binding_from_dict(BASE | {"consumer_groups": "p"})


def test_it_turns_a_dsn_into_a_jdbc_url_without_credentials():
    url, props = jdbc_url_and_properties("postgresql://app:p%40ss@db.example:5433/tickets?sslmode=require")
    assert url == "jdbc:postgresql://db.example:5433/tickets"
    assert props == {"driver": "org.postgresql.Driver", "user": "app", "password": "p@ss", "sslmode": "require"}
    assert redact_url(BASE["source_url"]) == "postgresql://app:****@127.0.0.1:5432/tickets"
    with pytest.raises(BindingError, match="source url"):
        jdbc_url_and_properties("mysql://x/y")


def test_it_plans_offsets_from_the_last_run_to_the_last_stable_offset():
    offsets = {0: PartitionOffsets(0, low=0, stable=10, high=12), 1: PartitionOffsets(1, low=50, stable=70, high=70)}
    plan = plan_offsets("t", offsets, {0: 4, 1: 20})
    assert plan.ranges == {0: (4, 10), 1: (50, 70)}
    assert plan.lost == {1: (20, 50)}  # deleted (retention, delete_records) before this run could read them
    assert plan.total == 26
    first = plan_offsets("t", offsets, {})
    assert first.ranges == {0: (0, 10), 1: (50, 70)}
    assert first.lost == {1: (0, 50)}  # a first or --full run wants every record from offset 0
    assert OffsetRange("t", {0: (4, 10)}).to_json() == {"0": [4, 10]}


def test_it_refuses_offsets_that_went_backwards_or_lost_partitions():
    offsets = {0: PartitionOffsets(0, low=0, stable=3, high=3)}
    with pytest.raises(ReconcileError, match="re-created"):
        plan_offsets("t", offsets, {0: 9})
    with pytest.raises(ReconcileError, match=r"lost partition\(s\) \[1\]"):
        plan_offsets("t", offsets, {0: 1, 1: 5})


@pytest.mark.parametrize(
    ("field_name", "value"),
    [
        ("table", "tickets; drop table tickets"),
        ("key_column", "id)"),
        ("created_column", '"created_at"'),
        ("record_key", "json:ticket_id"),
        ("record_key", "body"),
        ("grace", "soon"),
    ],
)
def test_it_rejects_unsafe_or_malformed_binding_fields(field_name: str, value: str):
    with pytest.raises(BindingError, match=rf"binding 'tickets': {field_name}"):
        binding_from_dict(BASE | {field_name: value})


@pytest.mark.parametrize("field", ["table", "key_column", "created_column"])
def test_it_refuses_an_identifier_with_a_trailing_newline(field: str) -> None:
    # `$` in a regular expression also matches before a final newline: the whole name must match
    with pytest.raises(BindingError, match=rf"{field} must be a plain SQL"):
        binding_from_dict(BASE | {field: BASE[field] + "\n"})
