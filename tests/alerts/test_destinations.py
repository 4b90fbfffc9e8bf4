"""The SSRF guard: which addresses a webhook may reach."""

from __future__ import annotations

import ipaddress

import pytest

from auditor.alerts.destinations import DestinationRefused, address_category, check_destination
from auditor.alerts.retry import TransportError, call_with_retries


@pytest.mark.parametrize(
    "address,category",
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd00::1", "private"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("240.0.0.1", "reserved"),
        ("100.64.0.1", "non-public"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.0.0.1", "private"),
        ("93.184.216.34", None),
        ("2606:4700:4700::1111", None),
    ],
)
def test_it_classifies_addresses(address, category):
    assert address_category(ipaddress.ip_address(address)) == category


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/hook",
        "http://localhost/hook",
        "https://[::1]/x",
        "http://169.254.169.254/latest/meta-data",
        "http://10.0.0.5/",
        "http://0.0.0.0:80/",
    ],
)
def test_it_refuses_non_public_destinations_by_default(url):
    with pytest.raises(DestinationRefused, match=r"refused: webhook host .* a [a-z-]+ address") as info:
        check_destination(url, allow_private=False)
    assert info.value.permanent


def test_it_allows_private_destinations_when_the_setting_says_so():
    destination = check_destination("http://localhost:8123/hook?x=1", allow_private=True)
    assert destination.address in ("127.0.0.1", "::1")
    assert (destination.host, destination.port, destination.target) == ("localhost", 8123, "/hook?x=1")


def test_it_accepts_a_public_address():
    destination = check_destination("https://93.184.216.34/hook", allow_private=False)
    assert (destination.scheme, destination.port, destination.address) == ("https", 443, "93.184.216.34")


@pytest.mark.parametrize(
    "url,message",
    [
        ("ftp://example.com/", "must start with http:// or https://"),
        ("http:///path", "has no host"),
        ("http://user:pw@93.184.216.34/", "must not carry credentials"),
        ("http://93.184.216.34:99999/", "not valid"),
    ],
)
def test_it_refuses_unusable_urls(url, message):
    with pytest.raises(DestinationRefused, match=message):
        check_destination(url, allow_private=True)


def test_it_retries_only_transient_errors_with_growing_backoff():
    waits: list[float] = []
    failures: list[int] = []

    def flaky(number: int) -> str:
        if number < 3:
            raise TransportError("HTTP 502", permanent=False, status_code=502)
        return "ok"

    result = call_with_retries(
        flaky, max_attempts=5, backoff_seconds=1.5, sleep=waits.append, on_failure=lambda n, e: failures.append(n)
    )
    assert (result, waits, failures) == ("ok", [1.5, 3.0], [1, 2])

    def broken(number: int) -> str:
        raise TransportError("HTTP 404", permanent=True, status_code=404)

    with pytest.raises(TransportError, match="HTTP 404"):
        call_with_retries(broken, max_attempts=5, backoff_seconds=1, sleep=waits.append)
    assert waits == [1.5, 3.0]
