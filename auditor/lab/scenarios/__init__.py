"""Scenario families, one module each (seeds 001, 003, 004). Importing a module registers its
scenarios (auditor/lab/registry.py)."""

from auditor.lab.scenarios import consumers, duplicates, replication

FAMILIES = (replication, duplicates, consumers)
