"""A real HTTP webhook receiver on loopback, and the secret test deliveries are signed with."""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from auditor.alerts.signing import verify

# Set before any live process starts (they copy this environment), so the Celery worker
# and Daphne can sign test deliveries and reach the loopback receiver: the test settings
# allow private destinations, as the issue asks; refusal is tested with it switched off.
SECRET_ENV = "AUDITOR_TEST_WEBHOOK_SECRET"
os.environ.setdefault(SECRET_ENV, secrets.token_hex(16))
os.environ.setdefault("AUDITOR_WEBHOOK_ALLOW_PRIVATE", "true")


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    signature_valid: bool

    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    """Answers POSTs with the queued statuses (then 200), after an optional delay each;
    with ``echo_404`` set, answers 404 quoting the request path back as Express does."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.statuses: deque[int] = deque()
        self.delays: deque[float] = deque()
        self.received: list[Received] = []
        self.echo_404 = False
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                valid = verify(
                    receiver.secret,
                    self.headers.get("X-Auditor-Timestamp"),
                    self.headers.get("X-Auditor-Signature"),
                    body,
                )
                receiver.received.append(Received(self.path, dict(self.headers), body, valid))
                delay = receiver.delays.popleft() if receiver.delays else 0.0
                if delay:
                    time.sleep(delay)
                status = receiver.statuses.popleft() if receiver.statuses else 200
                reply = b"bad request: missing field" if status == 400 else b"ok"
                if receiver.echo_404:
                    status, reply = 404, f"<pre>Cannot POST {self.path}</pre>".encode()  # Express's default
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "text/plain")
                    self.end_headers()
                    self.wfile.write(reply)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.url = f"{self.base_url}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while len(self.received) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.received
