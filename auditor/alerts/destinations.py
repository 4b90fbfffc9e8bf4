"""Where a webhook may go, and the HTTP POST that goes there.

The SSRF guard resolves the host once, refuses any non-public address (loopback,
private, link-local, multicast, reserved, unspecified, shared, or an IPv4 address
inside IPv6) unless AUDITOR_WEBHOOK_ALLOW_PRIVATE is set, and then connects to the
address it checked, so a second DNS answer cannot redirect the request (DNS
rebinding). Redirects are never followed and proxy variables are ignored.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from auditor.alerts.retry import TransportError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
USER_AGENT = "kafka-delivery-auditor-webhook/1"
RESPONSE_EXCERPT = 300


class DestinationRefused(TransportError):
    """The URL is unusable or points somewhere webhooks may not go: never worth retrying."""

    def __init__(self, message: str) -> None:
        super().__init__(message, permanent=True)


@dataclass(frozen=True)
class Destination:
    scheme: str
    host: str
    port: int
    target: str  # path and query
    address: str  # the checked IP address the connection goes to


def address_category(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public destination, or None when it is one."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is not None:
            return address_category(embedded) or "IPv4-embedding IPv6"
    for category, flag in (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("reserved", ip.is_reserved),
        ("private", ip.is_private),
    ):
        if flag:
            return category
    return None if ip.is_global else "non-public"


def parse_webhook_url(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, target) of an http(s) URL; DestinationRefused names what is wrong."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise DestinationRefused(f"webhook URL is not valid: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise DestinationRefused(f"webhook URL must start with http:// or https://, got {parts.scheme or 'none'!r}")
    if not parts.hostname:
        raise DestinationRefused("webhook URL has no host")
    if parts.username or parts.password:
        raise DestinationRefused("webhook URL must not carry credentials; deliveries are signed with the secret")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80), target


def _resolve(host: str, port: int) -> list[IPAddress]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        # DNS may be briefly unavailable: worth another try.
        raise TransportError(f"cannot resolve webhook host {host!r}: {exc}", permanent=False) from None
    addresses: list[IPAddress] = []
    for info in infos:
        ip = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if ip not in addresses:
            addresses.append(ip)
    return addresses


def check_destination(url: str, *, allow_private: bool) -> Destination:
    """The checked destination of ``url``; DestinationRefused when it may not be reached."""
    scheme, host, port, target = parse_webhook_url(url)
    addresses = _resolve(host, port)
    if not addresses:
        raise TransportError(f"webhook host {host!r} has no address", permanent=False)
    if not allow_private:
        for ip in addresses:
            category = address_category(ip)
            if category is not None:
                raise DestinationRefused(
                    f"refused: webhook host {host!r} resolves to {ip}, a {category} address; webhooks to "
                    "loopback or private networks are refused unless AUDITOR_WEBHOOK_ALLOW_PRIVATE is set"
                )
    return Destination(scheme, host, port, target, str(addresses[0]))


class _PinnedHTTPConnection(http.client.HTTPConnection):
    def __init__(self, destination: Destination, timeout: float) -> None:
        super().__init__(destination.host, destination.port, timeout=timeout)
        self._address = destination.address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, destination: Destination, timeout: float) -> None:
        self._tls = ssl.create_default_context()
        super().__init__(destination.host, destination.port, timeout=timeout, context=self._tls)
        self._address = destination.address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        # The certificate is checked against the host name, not the pinned address.
        self.sock = self._tls.wrap_socket(sock, server_hostname=self.host)


def post_json(destination: Destination, body: bytes, headers: dict[str, str], timeout: float) -> int:
    """POST ``body``; a 2xx status is returned, anything else raises TransportError (permanent for 3xx/4xx
    other than 408 and 429)."""
    connection_class = _PinnedHTTPSConnection if destination.scheme == "https" else _PinnedHTTPConnection
    connection = connection_class(destination, timeout)
    try:
        connection.request(
            "POST",
            destination.target,
            body=body,
            headers={"Content-Type": "application/json", "User-Agent": USER_AGENT, **headers},
        )
        response = connection.getresponse()
        excerpt = response.read(RESPONSE_EXCERPT).decode("utf-8", "replace").strip()
    except TimeoutError:
        raise TransportError(f"timed out after {timeout:g}s", permanent=False) from None
    except ssl.SSLCertVerificationError as exc:
        raise TransportError(f"TLS certificate not accepted: {exc.verify_message}", permanent=True) from None
    except (OSError, http.client.HTTPException) as exc:
        raise TransportError(f"connection failed: {exc or type(exc).__name__}", permanent=False) from None
    finally:
        connection.close()
    status = response.status
    if 200 <= status < 300:
        return status
    message = f"HTTP {status} {response.reason}" + (f": {excerpt}" if excerpt else "")
    # the reply may quote the request line back (Express: `Cannot POST /services/T0/B0/SECRET`)
    hidden = f"{destination.scheme}://{destination.host}{destination.target}"
    if 300 <= status < 400:
        error = TransportError(f"{message} (redirects are not followed)", permanent=True, status_code=status)
        raise error.hiding(hidden)
    transient = status >= 500 or status in (408, 429)
    raise TransportError(message, permanent=not transient, status_code=status).hiding(hidden)
