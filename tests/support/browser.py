"""Helpers of the browser tests (Playwright against the live server)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from django.db import connection

if TYPE_CHECKING:  # types only, as in the browser tests themselves
    from playwright.sync_api import Browser, Page


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


def logged_in_page(browser: Browser, url: str, credentials: tuple[str, str], live: str | None = None) -> Page:
    """A new page at `url`, reached through the login page it redirects to (asserted), once
    back at `url`. `live`: the page's live channel (its `data-live_<name>` flag): waited for as
    connected too."""
    page = browser.new_page()
    page.goto(url)
    assert "/login/" in page.url
    page.fill("input[name=username]", credentials[0])
    page.fill("input[name=password]", credentials[1])
    page.click("button[type=submit]")
    page.wait_for_url(url)
    if live is not None:
        page.wait_for_selector("#live-state.ok", timeout=20000)
        page.wait_for_function(f"document.body.dataset.live_{live} === '1'", timeout=10000)
    return page
