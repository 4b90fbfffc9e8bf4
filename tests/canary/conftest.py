"""Fixtures of the canary tests: unique canary topics and a bounded canary run."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.management import call_command


@pytest.fixture
def canary_topic(kafka_admin) -> Iterator[str]:
    """A unique canary topic name; the topic (created by the canary or the test) is deleted afterwards."""
    name = f"canary-test-{uuid.uuid4().hex[:10]}"
    yield name
    for future in kafka_admin.delete_topics([name]).values():
        try:
            future.result(timeout=30)
        except Exception:  # noqa: BLE001 - never created when the test failed early
            pass


@pytest.fixture
def run_canary(kafka_bootstrap: str) -> Callable[..., dict[str, Any]]:
    """`audit canary ... --json` through the management command; returns the parsed totals."""

    def run(topic: str, *args: str) -> dict[str, Any]:
        out = io.StringIO()
        call_command(
            "audit", "canary", "--topic", topic, "--bootstrap-servers", kafka_bootstrap, "--json", *args, stdout=out
        )
        return json.loads(out.getvalue())

    return run
