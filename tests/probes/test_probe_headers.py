"""parse_audit_headers and friends: never raise, tell missing from malformed."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from auditor.probes import AuditHeaders, parse_audit_headers
from auditor.probes.headers import decode_audit_id, fast_audit_id, new_uuid4_batch

PID = "0123456789abcdef0123456789abcdef"


def stamped(**overrides: Any) -> list[tuple[str, Any]]:
    values = {"audit-id": b"ticket-1", "audit-pid": PID.encode(), "audit-seq": b"7", "audit-ts": b"1700000000000"}
    values.update(overrides)
    return [(name, value) for name, value in values.items() if value is not ...]


def test_it_parses_a_complete_set() -> None:
    parsed = parse_audit_headers(stamped())
    assert parsed == AuditHeaders("ticket-1", PID, 7, 1700000000000, None)
    assert parsed is not None and parsed.valid


def test_it_ignores_other_headers_and_their_order() -> None:
    headers = [("trace", b"x"), *reversed(stamped()), ("other", None)]
    parsed = parse_audit_headers(headers)
    assert parsed is not None and parsed.valid and parsed.seq == 7


def test_it_accepts_a_dict_str_values_and_bytes_names() -> None:
    assert parse_audit_headers(dict(stamped())).valid  # type: ignore[union-attr]
    as_text = [(name.encode(), value.decode()) for name, value in stamped()]
    assert parse_audit_headers(as_text) == AuditHeaders("ticket-1", PID, 7, 1700000000000, None)


@pytest.mark.parametrize("headers", [None, [], {}, [("trace", b"x")], [("audit-idx", b"1")]])
def test_it_reports_missing_as_none(headers: Any) -> None:
    assert parse_audit_headers(headers) is None


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"audit-seq": ...}, "missing audit-seq"),
        ({"audit-pid": ..., "audit-ts": ...}, "missing audit-pid, audit-ts"),
        ({"audit-seq": b"-1"}, "audit-seq is not a decimal integer"),
        ({"audit-seq": b"7a"}, "audit-seq is not a decimal integer"),
        ({"audit-seq": None}, "audit-seq is not a decimal integer"),
        ({"audit-seq": b"1" * 21}, "audit-seq is not a decimal integer"),
        ({"audit-ts": b" 17"}, "audit-ts is not a decimal integer"),
        ({"audit-pid": b"short"}, "audit-pid is not 32 lowercase hex digits"),
        ({"audit-pid": PID.upper().encode()}, "audit-pid is not 32 lowercase hex digits"),
        ({"audit-id": b""}, "audit-id is empty"),
        ({"audit-id": None}, "audit-id is empty"),
    ],
)
def test_it_reports_malformed_with_a_reason(overrides: dict[str, Any], problem: str) -> None:
    parsed = parse_audit_headers(stamped(**overrides))
    assert parsed is not None
    assert not parsed.valid
    assert problem in (parsed.problem or "")


def test_it_flags_conflicting_duplicates_but_not_identical_ones() -> None:
    assert parse_audit_headers([*stamped(), ("audit-seq", b"7")]).valid  # type: ignore[union-attr]
    parsed = parse_audit_headers([*stamped(), ("audit-seq", b"8")])
    assert parsed is not None and "more than once" in (parsed.problem or "")


@pytest.mark.parametrize(
    "garbage",
    ["audit-id", 42, [1, 2], [(None, None)], [("audit-id",)], [(b"\xff\xfe", b"x")], [object()], b"\x00"],
)
def test_it_never_raises_on_garbage(garbage: Any) -> None:
    result = parse_audit_headers(garbage)
    assert result is None or isinstance(result, AuditHeaders)
    status, _ = fast_audit_id(garbage)
    assert status in (1, 2)


@pytest.mark.parametrize(
    "headers",
    [
        None,
        stamped(),
        [*stamped(), ("trace", b"1")],
        [*stamped(), ("audit-seq", b"9")],
        stamped(**{"audit-pid": b"g" * 32}),
        stamped(**{"audit-seq": b"x"}),
        stamped(**{"audit-id": b""}),
        list(reversed(stamped())),
        [("trace", b"1")],
        stamped(**{"audit-ts": ...}),
    ],
)
def test_it_fast_path_agrees_with_the_parser(headers: Any) -> None:
    parsed = parse_audit_headers(headers)
    status, audit_id = fast_audit_id(headers)
    expected = 1 if parsed is None else 0 if parsed.valid else 2
    assert status == expected
    if parsed is not None and parsed.audit_id is not None:
        assert decode_audit_id(audit_id) == parsed.audit_id  # type: ignore[arg-type]


def test_it_decodes_binary_ids_the_same_way_everywhere() -> None:
    raw = b"\x00\xffid"
    assert decode_audit_id(raw) == "\x00\\xffid"
    parsed = parse_audit_headers(stamped(**{"audit-id": raw}))
    assert parsed is not None and parsed.audit_id == decode_audit_id(raw)


def test_it_makes_unique_version_4_uuids() -> None:
    ids = new_uuid4_batch(2000)
    assert len(set(ids)) == 2000
    for value in ids:
        parsed = uuid.UUID(value)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122 and parsed.hex == value
