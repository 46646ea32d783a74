"""The HTTP transport of completion callbacks: one deadline over a whole request, and
connections only to checked addresses (docs/design.md §7, callbacks; ADR 0016).

httpx bounds each connect, read and write on its own, so a receiver that trickles a byte
every few seconds keeps a request open forever. This transport's sockets clamp every wait to
what is left of the request's deadline, set by `request()` around each request, and fail as
a timeout once it has passed. `request()` also names the addresses the caller resolved and
checked: a connection goes to one of them, never to what a second resolution might return.
"""

from __future__ import annotations

import ssl
import threading
import time
import typing
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import httpcore
import httpx

_SocketOption = typing.Any
"""httpcore's socket option tuples (passed through untouched)."""


class _Deadline(threading.local):
    """The monotonic time the current thread's request must end by (None: no deadline), and
    the addresses it may connect to (None: none)."""

    at: float | None = None
    addresses: list[str] | None = None

    def left(self, timeout: float | None, error: type[Exception]) -> float | None:
        """`timeout` cut to what is left before the deadline; `error` once it has passed."""
        if self.at is None:
            return timeout
        left = self.at - time.monotonic()
        if left <= 0:
            raise error("the request's deadline passed")
        return left if timeout is None else min(timeout, left)


class DeadlineStream(httpcore.NetworkStream):
    """A connection whose every read and write waits at most until the deadline."""

    def __init__(self, inner: httpcore.NetworkStream, deadline: _Deadline) -> None:
        self._inner = inner
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._deadline.left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        # One send of a large buffer could outlast the deadline between checks; a callback
        # body is a status document (a few KiB), written in a send or two.
        self._inner.write(buffer, self._deadline.left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        left = self._deadline.left(timeout, httpcore.ConnectTimeout)
        return DeadlineStream(
            self._inner.start_tls(ssl_context, server_hostname, left), self._deadline
        )

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """Opens TCP connections to the current request's checked addresses, whose waits all end
    by its deadline. `host` itself is never resolved here (TLS still checks its name)."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()
        self._deadline = _Deadline()

    @contextmanager
    def request(self, seconds: float, addresses: list[str]) -> Iterator[None]:
        """In the block, every connect, read and write ends `seconds` from now at the latest,
        and new connections go to `addresses` (in order; the first that answers)."""
        self._deadline.at = time.monotonic() + seconds
        self._deadline.addresses = addresses
        try:
            yield
        finally:
            self._deadline.at = None
            self._deadline.addresses = None

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[_SocketOption] | None = None,
    ) -> httpcore.NetworkStream:
        addresses = self._deadline.addresses
        if not addresses:
            raise httpcore.ConnectError("no checked address to connect to")
        error: Exception | None = None
        for address in addresses:
            left = self._deadline.left(timeout, httpcore.ConnectTimeout)
            try:
                inner = self._inner.connect_tcp(address, port, left, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc
                continue
            return DeadlineStream(inner, self._deadline)
        assert error is not None  # addresses is not empty
        raise error

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[_SocketOption] | None = None,
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("callbacks are sent over TCP only")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class DeadlineTransport(httpx.HTTPTransport):
    """httpx's transport over a `DeadlineBackend`, without proxies from the environment."""

    def __init__(self, backend: DeadlineBackend) -> None:
        super().__init__(trust_env=False)
        # httpx 0.28 builds its connection pool without a way to pass a network backend: the
        # pool is rebuilt here as httpx builds it (no proxy), with the deadline backend.
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            network_backend=backend,
        )
