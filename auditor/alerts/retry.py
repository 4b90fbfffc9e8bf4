"""The one retry helper of outgoing notifications, and the typed error it understands."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from auditor.lib.secrets import mask_webhook_text

T = TypeVar("T")
MAX_BACKOFF_SECONDS = 60.0


class TransportError(Exception):
    """A delivery attempt failed; ``permanent`` says whether trying again could help."""

    def __init__(self, message: str, *, permanent: bool, status_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.permanent = permanent
        self.status_code = status_code

    def hiding(self, url: str) -> TransportError:
        """This error with whatever of ``url`` mask_webhook_url hides masked in its message (a
        receiver's reply may quote the path back, and the message is stored, logged and pushed
        to every viewer); returned for ``raise error.hiding(url)``."""
        self.message = mask_webhook_text(self.message, url)
        self.args = (self.message,)
        return self


def call_with_retries(
    attempt: Callable[[int], T],
    *,
    max_attempts: int,
    backoff_seconds: float,
    on_failure: Callable[[int, TransportError], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``attempt(n)`` for n = 1.. until it returns; retry TransportErrors that are not
    permanent, waiting backoff, 2 * backoff, 4 * backoff, ... (capped) in between. The last error is raised."""
    for number in range(1, max_attempts + 1):
        try:
            return attempt(number)
        except TransportError as error:
            if on_failure is not None:
                on_failure(number, error)
            if error.permanent or number == max_attempts:
                raise
            sleep(min(backoff_seconds * 2 ** (number - 1), MAX_BACKOFF_SECONDS))
    raise AssertionError("unreachable: max_attempts must be at least 1")
