"""Fault and mode specifications: parsed strictly, errors name the input."""

from __future__ import annotations

import pytest

from auditor.demo.options import DeliveryMode, DemoOptionError, Faults, format_faults, parse_faults


def test_it_parses_and_formats_faults() -> None:
    faults = parse_faults(" drop-every=100, crash-after=500 ,slow-ms=20,fire-and-forget,fail-update-every=7")
    assert faults == Faults(crash_after=500, drop_every=100, slow_ms=20, fire_and_forget=True, fail_update_every=7)
    assert parse_faults(format_faults(faults)) == faults
    assert parse_faults("none") == parse_faults("") == parse_faults(None) == Faults()
    assert format_faults(Faults()) == "none"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("crash-after", "needs a whole number"),
        ("crash-after=0", "must be >= 1"),
        ("drop-every=x", "needs a whole number"),
        ("explode=1", "unknown fault 'explode'"),
        ("no-idempotence=maybe", "is a switch"),
        ("slow-ms=-5", "must be >= 0"),
    ],
)
def test_it_rejects_bad_fault_specs_by_name(text: str, message: str) -> None:
    with pytest.raises(DemoOptionError, match=message) as raised:
        parse_faults(text, "AUDITOR_DEMO_FAULTS")
    assert str(raised.value).startswith("AUDITOR_DEMO_FAULTS")


def test_it_parses_the_abort_fault_and_refuses_it_with_a_non_transactional_producer() -> None:
    assert parse_faults("abort-every=3,drop-every=5") == Faults(abort_every=3, drop_every=5)
    assert format_faults(Faults(abort_every=3)) == "abort-every=3"
    with pytest.raises(DemoOptionError, match=r"^--faults: abort-every .* cannot be combined with fire-and-forget"):
        parse_faults("abort-every=3,fire-and-forget", "--faults")
    with pytest.raises(DemoOptionError, match="no-idempotence"):
        Faults(abort_every=2, no_idempotence=True)


def test_it_parses_modes() -> None:
    assert DeliveryMode.parse(" Exactly-Once ") is DeliveryMode.EXACTLY_ONCE
    with pytest.raises(DemoOptionError, match="'twice' is not a delivery mode"):
        DeliveryMode.parse("twice")
