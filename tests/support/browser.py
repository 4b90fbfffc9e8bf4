"""Helpers of the browser tests (Playwright against the live server)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection


@contextmanager
def closing_connection() -> Iterator[None]:
    """Close this code's own Django connection on the way out.

    Playwright's greenlets give the code that commits data for a browser test its own
    Django connection, which the test database teardown would not close (and then could
    not drop the database).
    """
    try:
        yield
    finally:
        connection.close()
