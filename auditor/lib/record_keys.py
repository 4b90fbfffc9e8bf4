"""A record's business key by a binding's rule (key | header:<name> | json:<path>), as Spark's
record_key_expression (spark_jobs/reconcile_helpers.py) finds it: every Python reader (the
stuck diagnosis's locate step, the key page) uses this one, so all of them agree with the job."""

from __future__ import annotations

import json
from typing import Any

from confluent_kafka import Message

from auditor.probes.headers import decode_audit_id
from auditor.probes.message import record_headers
from spark_jobs.binding import RecordKeySpec


def json_path(document: Any, path: str) -> Any:
    """get_json_object's subset the bindings allow: $.name and [index] steps."""
    current = document
    index = 1
    while index < len(path):
        if path[index] == ".":
            end = index + 1
            while end < len(path) and path[end] not in ".[":
                end += 1
            if not isinstance(current, dict):
                return None
            current = current.get(path[index + 1 : end])
            index = end
        elif path[index] == "[":
            end = path.index("]", index)
            position = int(path[index + 1 : end])
            if not isinstance(current, list) or position >= len(current):
                return None
            current = current[position]
            index = end + 1
        else:
            return None
        if current is None:
            return None
    return current


def record_key_of(msg: Message, spec: RecordKeySpec) -> str | None:
    """The business key as Spark's record_key_expression finds it (both engines agree)."""
    if spec.source == "key":
        key = msg.key()
        return None if key is None else decode_audit_id(key)
    if spec.source == "header":
        for name, value in record_headers(msg):
            if name == spec.argument:
                return None if value is None else decode_audit_id(value)
        return None
    try:
        document = json.loads(msg.value() or b"")
    except (ValueError, UnicodeDecodeError):
        return None
    found = json_path(document, str(spec.argument))
    if found is None:
        return None
    return found if isinstance(found, str) else json.dumps(found, separators=(",", ":"))
