"""Does a transactional.id look like it changes when the application restarts?

A stable id lets the broker fence the previous instance (a zombie) and abort its open
transaction at once; an id with a random, time or process part leaves that transaction
open until transaction.timeout.ms, holding back read_committed consumers meanwhile.
"""

from __future__ import annotations

import re

_UNSTABLE_PARTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\$\{random\.|\{\{?\s*uuid\s*\}?\}|%\(uuid\)", re.I), "a random placeholder"),
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I), "a UUID"),
    (re.compile(r"(?<!\d)\d{10,}(?!\d)"), "a timestamp-like number"),
    (re.compile(r"\d+@[\w.-]+"), "a pid@host (Java runtime name)"),
    (re.compile(r"pid[-_.:=]?\d+", re.I), "a process id"),
    (re.compile(r"-[a-z0-9]{8,10}-[a-z0-9]{5}$"), "a Kubernetes Deployment pod name"),
    (re.compile(r"^[\w-]+(?:\.[\w-]+)+[-_:.]\d{2,7}$"), "a host-pid suffix"),
    (re.compile(r"(?:^|[-_.:])(?:host(?:name)?|ip)[-_.:]?[\w.-]*[-_:.]\d{2,7}$", re.I), "a host-pid suffix"),
)


_HEX_RUN = re.compile(r"(?<![0-9a-z])[0-9a-f]{12,}(?![0-9a-z])", re.I)


def unstable_part(transactional_id: str) -> str | None:
    """What in the id changes across restarts, or None when it looks stable."""
    for pattern, what in _UNSTABLE_PARTS:
        if pattern.search(transactional_id):
            return what
    for run in _HEX_RUN.findall(transactional_id):
        if re.search(r"[a-f]", run, re.I) and re.search(r"\d", run):
            return "a random hex string"
    return None
