"""Signatures, and the receiver snippet of auditor/alerts/README.md."""

from __future__ import annotations

import re
from pathlib import Path

from auditor.alerts.signing import signature, signature_headers, verify

README = Path(__file__).resolve().parents[2] / "auditor" / "alerts" / "README.md"


def test_it_signs_timestamp_dot_body_with_hmac_sha256():
    import hashlib
    import hmac

    expected = hmac.new(b"s3cret", b'1700000000.{"a":1}', hashlib.sha256).hexdigest()
    assert signature("s3cret", 1700000000, b'{"a":1}') == f"v1={expected}"


def test_it_rejects_a_wrong_secret_a_changed_body_and_an_old_timestamp():
    headers = signature_headers("s3cret", b"{}", now=1_700_000_000)
    ts, sig = headers["X-Auditor-Timestamp"], headers["X-Auditor-Signature"]
    assert verify("s3cret", ts, sig, b"{}", now=1_700_000_010)
    assert not verify("other", ts, sig, b"{}", now=1_700_000_010)
    assert not verify("s3cret", ts, sig, b"{ }", now=1_700_000_010)
    assert not verify("s3cret", ts, sig, b"{}", now=1_700_001_000)
    assert not verify("s3cret", None, sig, b"{}")


def test_it_documents_a_receiver_snippet_that_works():
    snippet = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    namespace: dict = {}
    exec(snippet, namespace)
    body = b'{"event":"opened"}'
    headers = signature_headers("s3cret", body)
    assert namespace["verify_auditor_webhook"]("s3cret", headers, body)
    assert not namespace["verify_auditor_webhook"]("s3cret", headers, body + b" ")
