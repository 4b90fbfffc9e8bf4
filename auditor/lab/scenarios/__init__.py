"""Scenario families, one module each (seeds 001, 003, 004). Importing a module registers its
scenarios (auditor/lab/registry.py)."""

from auditor.lab.scenarios import (
    auditing,
    availability,
    canary,
    compaction,
    consumers,
    duplicates,
    ledgers,
    live,
    live_brokers,
    live_consumers,
    operators,
    partitions,
    recreation,
    replication,
    retention,
    timestamps,
    transactions,
    truncation,
)

FAMILIES = (
    replication,
    duplicates,
    availability,
    consumers,
    operators,
    partitions,
    retention,
    timestamps,
    ledgers,
    recreation,
    truncation,
    compaction,
    transactions,
    canary,
    auditing,
    live,
    live_brokers,
    live_consumers,
)
