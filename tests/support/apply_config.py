"""A config file for `audit apply` tests: one of everything, its secrets as ${ENV} references."""

from __future__ import annotations

import textwrap
from pathlib import Path

GOOD = """\
clusters:
  local:
    bootstrap_servers: 127.0.0.1:9092
    config:
      sasl.password: ${TEST_KAFKA_SECRET}
sources:
  tickets_db:
    url: postgresql://app:${TEST_APP_DB_PASSWORD}@127.0.0.1:5432/tickets
bindings:
  tickets:
    cluster: local
    topic: tickets
    source: tickets_db
    table: public.tickets
    key_column: id
    record_key: json:$.ticket_id
    created_column: created_at
    grace: 2m
    guarantee: at-least-once
    consumer_groups: [ticket-processor]
    schedule: 5m
stuck_rules:
  tickets-new:
    binding: tickets
    status_column: status
    stuck_values: [NEW]
    age_column: created_at
    older_than: 10m
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "auditor.yaml"
    path.write_text(textwrap.dedent(text))
    return path
