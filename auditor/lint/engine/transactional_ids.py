"""Does a transactional.id look like it changes when the application restarts?

A stable id lets the broker fence the previous instance (a zombie) and abort its open
transaction at once; an id with a random, time or process part leaves that transaction
open until transaction.timeout.ms, holding back read_committed consumers meanwhile.
"""

from __future__ import annotations

import re

# A process id as a suffix: 3 to 7 digits (Linux pid_max is at most 4194304), no leading zero.
# Shorter numbers, and 00 or 01, are instance ordinals (orders.copier-01); a container's
# process is often pid 1, which a restart keeps anyway.
_PID = r"[1-9]\d{2,6}"
# What a host looks like in an id: an IPv4 address (10.0.0.5, or AWS's ip-10-0-0-5), localhost,
# or a name under a domain (worker-3.prod.example.com, node1.svc.cluster.local). A dotted name
# written the other way round (com.acme.orders.copier, a Java package style) is no host.
_HOST = (
    r"(?:\d{1,3}(?:[.-]\d{1,3}){3}"
    r"|localhost(?:\.localdomain)?"
    r"|[a-z0-9][a-z0-9-]*(?:\.[a-z0-9-]+)*\.(?:com|net|org|io|cloud|local|localdomain|internal|lan|corp"
    r"|intra|intranet|svc|cluster\.local))"
)
# Kubernetes' pod-template-hash and pod-name suffix use its SafeEncodeString alphabet
# (k8s.io/apimachinery/pkg/util/rand): no vowels, no 0, 1 or 3, so words and ordinals
# (orders-pipeline-north, orders-enricher-00001) are not taken for one.
_KUBE = "[bcdfghjklmnpqrstvwxz2456789]"
_UNSTABLE_PARTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\$\{random\.|\{\{?\s*uuid\s*\}?\}|%\(uuid\)", re.I), "a random placeholder"),
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I), "a UUID"),
    (re.compile(r"(?<!\d)\d{10,}(?!\d)"), "a timestamp-like number"),
    (re.compile(r"\d+@[\w.-]+"), "a pid@host (Java runtime name)"),
    # pid as a word: rapid-7 is no process id
    (re.compile(r"(?<![a-z0-9])pid[-_.:=]?\d+", re.I), "a process id"),
    (re.compile(rf"-{_KUBE}{{8,10}}-{_KUBE}{{5}}$"), "a Kubernetes Deployment pod name"),
    (re.compile(rf"(?:^|[-_:@/])(?:{_HOST})[-_:.@]{_PID}$", re.I), "a host-pid suffix"),
    (re.compile(rf"(?:^|[-_.:])(?:host(?:name)?|ip)(?:[-_.:=][\w.-]*)?[-_:.=]{_PID}$", re.I), "a host-pid suffix"),
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
