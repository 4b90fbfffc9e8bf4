"""Webhook signatures: HMAC-SHA256 over ``<timestamp>.<body>`` (see README.md for receivers)."""

from __future__ import annotations

import hashlib
import hmac
import time

TIMESTAMP_HEADER = "X-Auditor-Timestamp"
SIGNATURE_HEADER = "X-Auditor-Signature"
DEFAULT_TOLERANCE_SECONDS = 300


def signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "v1=" + mac.hexdigest()


def signature_headers(secret: str, body: bytes, now: float | None = None) -> dict[str, str]:
    timestamp = int(time.time() if now is None else now)
    return {TIMESTAMP_HEADER: str(timestamp), SIGNATURE_HEADER: signature(secret, timestamp, body)}


def verify(
    secret: str,
    timestamp: str | None,
    signature_header: str | None,
    body: bytes,
    *,
    tolerance: int = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> bool:
    """True when the headers sign ``body`` with ``secret`` and the timestamp is recent."""
    if not timestamp or not signature_header or not timestamp.isdigit():
        return False
    if abs((time.time() if now is None else now) - int(timestamp)) > tolerance:
        return False
    expected = signature(secret, int(timestamp), body)
    return any(hmac.compare_digest(expected, part.strip()) for part in signature_header.split(","))
