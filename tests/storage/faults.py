"""Fault injection into a real boto3 client through botocore's event hooks (no mocks of ours).

Hooks act on the client's own request pipeline, so botocore's retry logic, error parsing and our
translation all run for real; only the network answer is replaced or dropped.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders
from botocore.exceptions import ConnectionClosedError, ReadTimeoutError


class _RawBody:
    """The `raw` object an `AWSResponse` reads its body from."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def error_response(url: str, status: int, code: str) -> AWSResponse:
    """An S3 XML error response as the server would send it."""
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
        f"<Message>injected {code}</Message></Error>"
    ).encode()
    headers = HTTPHeaders()
    headers["Content-Type"] = "application/xml"
    return AWSResponse(url, status, headers, _RawBody(body))


class Fault:
    """Answers every request of one operation with an injected failure; counts the attempts."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.attempts = 0

    def __call__(self, request: Any, **_: Any) -> AWSResponse:
        self.attempts += 1
        match self.kind:
            case "slow_down":
                return error_response(request.url, 503, "SlowDown")
            case "internal_error":
                return error_response(request.url, 500, "InternalError")
            case "service_unavailable":
                return error_response(request.url, 503, "ServiceUnavailable")
            case "read_timeout":
                raise ReadTimeoutError(endpoint_url=request.url)
            case "connection_reset":
                raise ConnectionClosedError(endpoint_url=request.url)
            case _:
                raise AssertionError(f"unknown fault {self.kind}")


FAULT_KINDS = [
    "slow_down",
    "internal_error",
    "service_unavailable",
    "read_timeout",
    "connection_reset",
]


def inject(client: Any, operation: str, fault: Fault) -> None:
    """Make every `operation` (e.g. "PutObject") request of `client` fail with `fault`."""
    client.meta.events.register_first(f"before-send.s3.{operation}", fault)


class LostFirstResponse:
    """Drops the first successful response of one operation, so botocore sends the request again.

    This is what a connection reset after the server committed a write looks like to botocore:
    it retries the same conditional PUT, and the server answers 412 to our own first write.
    """

    def __init__(self) -> None:
        self.dropped = 0

    def __call__(self, response: Any, **_: Any) -> int | None:
        if self.dropped == 0 and response is not None and response[0].status_code == 200:
            self.dropped += 1
            return 0  # "retry after 0 seconds", as botocore's own retry handler would answer
        return None


def drop_first_response(client: Any, operation: str) -> LostFirstResponse:
    """Install a `LostFirstResponse` on `client` for `operation`; return it for assertions."""
    hook = LostFirstResponse()
    client.meta.events.register_first(f"needs-retry.s3.{operation}", hook)
    return hook


@contextmanager
def silent_server() -> Iterator[str]:
    """A loopback TCP server that accepts connections and never answers; yields its URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            accepted.append(connection)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for connection in accepted:
            connection.close()
        listener.close()


def closed_port_url() -> str:
    """URL of a loopback port nobody listens on (connection refused)."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"
